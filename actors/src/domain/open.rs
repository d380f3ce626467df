//! The open tasks of one org and the indexes over them: the pending queue in
//! claim order, the waiting tasks (pending, with a `run_at` still ahead) by
//! `run_at`, all open tasks in list order, leases by expiry, and each
//! blocker's `blocked` dependents.
//!
//! A pending task is waiting when its `run_at` is after the time up to
//! which waiting tasks were released (`release_due`, which the actor calls
//! with its clock before each claim and when its timer for the earliest
//! `run_at` fires): claims see only the pending queue, so a waiting task
//! costs them nothing.
//!
//! `put` keeps every index consistent with the headers, so callers never
//! touch an index directly. Finished tasks are not kept. This is what an org
//! actor holds per task, and what the memory benchmark measures. It also
//! keeps the count of tasks per open status and a version that changes with
//! every change, so a snapshot of the counts costs nothing to take and
//! nothing to skip when nothing changed.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;

use super::lease::LeaseQueue;
use super::order::{ListKey, PendingIndex};
use super::{TaskHeader, TaskId, TaskStatus};

#[derive(Debug, Default)]
pub struct OpenTasks {
    tasks: HashMap<TaskId, TaskHeader>,
    pending: PendingIndex,
    /// Every open task in list order: the store keeps no index of open
    /// tasks in that order, so claims and completions move no entry there.
    order: BTreeSet<ListKey>,
    leases: LeaseQueue,
    /// Pending tasks not claimable yet, by `(run_at, task_id)`.
    waiting: BTreeSet<(i64, TaskId)>,
    /// The time up to which waiting tasks were moved to the pending queue.
    released_through: i64,
    dependents: HashMap<TaskId, Vec<TaskId>>,
    /// Bumped whenever a header enters the pending queue, so a claim that
    /// waits knows when looking again could find something new.
    pending_version: u64,
    counts: StatusCounts,
    /// Changes with every `put` and `remove`.
    version: u64,
}

/// Open tasks per status.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StatusCounts {
    pub pending: usize,
    pub paused: usize,
    pub in_progress: usize,
    pub feedback: usize,
    pub blocked: usize,
}

impl StatusCounts {
    fn slot(&mut self, status: TaskStatus) -> Option<&mut usize> {
        match status {
            TaskStatus::Pending => Some(&mut self.pending),
            TaskStatus::Paused => Some(&mut self.paused),
            TaskStatus::InProgress => Some(&mut self.in_progress),
            TaskStatus::Feedback => Some(&mut self.feedback),
            TaskStatus::Blocked => Some(&mut self.blocked),
            TaskStatus::Canceled | TaskStatus::Completed | TaskStatus::Failed => None,
        }
    }
}

impl OpenTasks {
    pub fn get(&self, id: TaskId) -> Option<&TaskHeader> {
        self.tasks.get(&id)
    }

    pub fn contains(&self, id: TaskId) -> bool {
        self.tasks.contains_key(&id)
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Pending tasks whose `run_at` has not come yet.
    pub fn waiting_len(&self) -> usize {
        self.waiting.len()
    }

    /// The earliest `run_at` of a waiting task.
    pub fn next_run_at(&self) -> Option<i64> {
        self.waiting.first().map(|(at, _)| *at)
    }

    /// Moves every waiting task whose `run_at` is at or before `now_ms` to
    /// the pending queue; answers how many it moved.
    pub fn release_due(&mut self, now_ms: i64) -> usize {
        self.released_through = self.released_through.max(now_ms);
        let mut moved = 0;
        while let Some(&(at, id)) = self.waiting.first() {
            if at > self.released_through {
                break;
            }
            self.waiting.pop_first();
            if let Some(h) = self.tasks.get(&id) {
                self.pending
                    .insert((h.priority, h.created_at, h.task_id), &h.tags);
                moved += 1;
            }
        }
        if moved > 0 {
            self.pending_version += 1;
            self.version += 1;
        }
        moved
    }

    /// The pending tasks, in claim order.
    pub fn pending_ids(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.pending.ids()
    }

    /// Changes with every task put into the pending queue.
    pub fn pending_version(&self) -> u64 {
        self.pending_version
    }

    pub fn has_leases(&self) -> bool {
        !self.leases.is_empty()
    }

    pub fn lease_count(&self) -> usize {
        self.leases.len()
    }

    /// Lease expiries, earliest first.
    pub fn lease_expiries(&self) -> impl Iterator<Item = i64> + '_ {
        self.leases.expiries()
    }

    /// Open tasks per status.
    pub fn counts(&self) -> StatusCounts {
        self.counts
    }

    /// A number that changes whenever the open tasks do.
    pub fn version(&self) -> u64 {
        self.version
    }

    pub fn next_lease_deadline(&self) -> Option<i64> {
        self.leases.next_deadline()
    }

    /// Tasks whose lease ran out at or before `now_ms`, in expiry order.
    /// Their headers still carry the lease; `put` the expired headers back.
    pub fn pop_expired_leases(&mut self, now_ms: i64) -> Vec<TaskId> {
        self.version += 1;
        self.leases.pop_expired(now_ms)
    }

    /// The `blocked` tasks waiting on `blocker`.
    pub fn dependents(&self, blocker: TaskId) -> &[TaskId] {
        self.dependents.get(&blocker).map_or(&[], Vec::as_slice)
    }

    /// The first pending task in claim order carrying any of `tags` (any
    /// task when empty) that `eligible` accepts.
    pub fn next_claimable(
        &self,
        tags: &[String],
        eligible: impl Fn(&TaskHeader) -> bool,
    ) -> Option<&TaskHeader> {
        let key = self
            .pending
            .first_matching(tags, |k| self.tasks.get(&k.2).is_some_and(&eligible))?;
        self.tasks.get(&key.2)
    }

    /// Up to `limit` open tasks that `keep` accepts, in list order,
    /// strictly after `after`.
    pub fn list(
        &self,
        after: Option<ListKey>,
        limit: usize,
        keep: impl Fn(&TaskHeader) -> bool,
    ) -> Vec<ListKey> {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.order
            .range((from, Bound::Unbounded))
            .filter(|k| self.tasks.get(&k.task_id).is_some_and(&keep))
            .take(limit)
            .copied()
            .collect()
    }

    /// Stores a task's new header; a finished task leaves. Returns the old one.
    pub fn put(&mut self, header: TaskHeader) -> Option<TaskHeader> {
        self.version += 1;
        let old = self.remove(header.task_id);
        if !header.status.is_terminal() {
            self.index(&header);
            self.tasks.insert(header.task_id, header);
        }
        old
    }

    pub fn remove(&mut self, id: TaskId) -> Option<TaskHeader> {
        let old = self.tasks.remove(&id)?;
        self.version += 1;
        self.unindex(&old);
        Some(old)
    }

    fn index(&mut self, h: &TaskHeader) {
        if let Some(n) = self.counts.slot(h.status) {
            *n += 1;
        }
        self.order.insert(ListKey::of(h));
        if h.status == TaskStatus::Pending {
            match h.run_at.filter(|at| *at > self.released_through) {
                Some(at) => {
                    self.waiting.insert((at, h.task_id));
                }
                None => {
                    self.pending
                        .insert((h.priority, h.created_at, h.task_id), &h.tags);
                    self.pending_version += 1;
                }
            }
        }
        if let Some(lease) = h.lease {
            self.leases.insert(lease.expires_at, h.task_id);
        }
        if h.status == TaskStatus::Blocked {
            for b in &h.blocked_by {
                self.dependents.entry(*b).or_default().push(h.task_id);
            }
        }
    }

    fn unindex(&mut self, h: &TaskHeader) {
        if let Some(n) = self.counts.slot(h.status) {
            *n -= 1;
        }
        self.order.remove(&ListKey::of(h));
        if h.status == TaskStatus::Pending {
            let waited = h
                .run_at
                .is_some_and(|at| self.waiting.remove(&(at, h.task_id)));
            if !waited {
                self.pending
                    .remove(&(h.priority, h.created_at, h.task_id), &h.tags);
            }
        }
        if let Some(lease) = h.lease {
            self.leases.remove(lease.expires_at, h.task_id);
        }
        if h.status == TaskStatus::Blocked {
            for b in &h.blocked_by {
                if let Some(list) = self.dependents.get_mut(b) {
                    list.retain(|d| *d != h.task_id);
                    if list.is_empty() {
                        self.dependents.remove(b);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::lease;

    fn header(status: TaskStatus, priority: u8, created_at: i64) -> TaskHeader {
        TaskHeader {
            task_id: TaskId::new_v7(),
            status,
            priority,
            created_at,
            updated_at: created_at,
            assignee: None,
            tags: vec!["gpu".into()],
            blocked_by: Vec::new(),
            parent: None,
            lease: None,
            attempts: 0,
            max_attempts: 5,
            run_at: None,
            retry: None,
            retries: 0,
            scheduled: None,
        }
    }

    #[test]
    fn waiting_tasks_are_not_claimable_until_their_time_is_released() {
        let mut open = OpenTasks::default();
        open.release_due(1_000);
        let now = header(TaskStatus::Pending, 3, 1);
        let later = TaskHeader {
            run_at: Some(5_000),
            ..header(TaskStatus::Pending, 1, 2)
        };
        let past = TaskHeader {
            run_at: Some(500),
            ..header(TaskStatus::Pending, 1, 3)
        };
        for h in [&now, &later, &past] {
            open.put(h.clone());
        }
        assert_eq!((open.pending_len(), open.waiting_len()), (2, 1));
        assert_eq!(open.next_run_at(), Some(5_000));
        // The urgent task waits; the due ones are claimed in claim order.
        assert_eq!(
            open.next_claimable(&[], |_| true).unwrap().task_id,
            past.task_id
        );
        let version = open.pending_version();
        assert_eq!(open.release_due(4_999), 0);
        assert_eq!(open.pending_version(), version);
        assert_eq!(open.release_due(5_000), 1);
        assert!(open.pending_version() > version);
        assert_eq!(open.next_run_at(), None);
        assert_eq!(
            open.next_claimable(&[], |_| true).unwrap().task_id,
            later.task_id,
            "once due it takes its place in claim order"
        );
        // Put back with a new run_at (an update), it waits again; with none
        // (run_at: null) it is due at once; claimed, it leaves both.
        open.put(TaskHeader {
            run_at: Some(9_000),
            ..later.clone()
        });
        assert_eq!((open.pending_len(), open.waiting_len()), (2, 1));
        open.put(TaskHeader {
            run_at: None,
            ..later.clone()
        });
        assert_eq!((open.pending_len(), open.waiting_len()), (3, 0));
        open.put(TaskHeader {
            status: TaskStatus::InProgress,
            ..later.clone()
        });
        assert_eq!((open.pending_len(), open.waiting_len()), (2, 0));
        // A waiting task that finishes leaves the waiting index.
        let waits = TaskHeader {
            run_at: Some(20_000),
            ..header(TaskStatus::Pending, 1, 4)
        };
        open.put(waits.clone());
        open.put(TaskHeader {
            status: TaskStatus::Canceled,
            ..waits
        });
        assert_eq!((open.waiting_len(), open.next_run_at()), (0, None));
        assert_eq!(open.counts().pending, 2);
    }

    #[test]
    fn claim_order_follows_puts() {
        let mut open = OpenTasks::default();
        let old = header(TaskStatus::Pending, 3, 1);
        let urgent = header(TaskStatus::Pending, 1, 5);
        open.put(old.clone());
        open.put(urgent.clone());
        assert_eq!(
            open.next_claimable(&[], |_| true).unwrap().task_id,
            urgent.task_id
        );
        let mut claimed = urgent.clone();
        claimed.status = TaskStatus::InProgress;
        claimed.lease = Some(lease::grant(10, 60));
        open.put(claimed);
        assert_eq!(
            open.next_claimable(&[], |_| true).unwrap().task_id,
            old.task_id
        );
        assert_eq!(open.pending_len(), 1);
        assert_eq!(open.next_lease_deadline(), Some(60_010));
        assert_eq!(
            open.counts(),
            StatusCounts {
                pending: 1,
                in_progress: 1,
                ..StatusCounts::default()
            }
        );
        assert_eq!(open.lease_expiries().collect::<Vec<_>>(), [60_010]);
        assert!(open.next_claimable(&["cpu".into()], |_| true).is_none());
    }

    #[test]
    fn finished_tasks_leave_every_index() {
        let mut open = OpenTasks::default();
        let blocker = header(TaskStatus::InProgress, 3, 1);
        let mut blocked = header(TaskStatus::Blocked, 3, 2);
        blocked.blocked_by = vec![blocker.task_id];
        open.put(blocker.clone());
        open.put(blocked.clone());
        assert_eq!(open.dependents(blocker.task_id), &[blocked.task_id]);
        let mut failed = blocked.clone();
        failed.status = TaskStatus::Failed;
        open.put(failed);
        assert!(open.dependents(blocker.task_id).is_empty());
        assert!(!open.contains(blocked.task_id));
        assert_eq!(open.len(), 1);
        assert_eq!(
            open.counts(),
            StatusCounts {
                in_progress: 1,
                ..StatusCounts::default()
            }
        );
    }

    #[test]
    fn list_follows_status_then_claim_order_and_resumes_after_a_key() {
        let mut open = OpenTasks::default();
        let late = header(TaskStatus::Pending, 3, 9);
        let urgent = header(TaskStatus::Pending, 1, 9);
        let working = header(TaskStatus::InProgress, 1, 1);
        let mut blocked = header(TaskStatus::Blocked, 1, 1);
        blocked.tags = vec!["cpu".into()];
        for h in [&working, &late, &blocked, &urgent] {
            open.put(h.clone());
        }
        let ids = |keys: Vec<ListKey>| keys.into_iter().map(|k| k.task_id).collect::<Vec<_>>();
        assert_eq!(
            ids(open.list(None, 10, |_| true)),
            [
                urgent.task_id,
                late.task_id,
                working.task_id,
                blocked.task_id
            ]
        );
        let first_two = open.list(None, 2, |_| true);
        assert_eq!(
            ids(open.list(first_two.last().copied(), 10, |_| true)),
            [working.task_id, blocked.task_id]
        );
        assert_eq!(
            ids(open.list(None, 10, |h| h.tags.contains(&"cpu".to_string()))),
            [blocked.task_id]
        );
        // A claim moves the task from the pending part to the working one;
        // a finished task leaves the list.
        let mut claimed = urgent.clone();
        claimed.status = TaskStatus::InProgress;
        open.put(claimed);
        let mut done = working.clone();
        done.status = TaskStatus::Completed;
        open.put(done);
        assert_eq!(
            ids(open.list(None, 10, |_| true)),
            [late.task_id, urgent.task_id, blocked.task_id]
        );
    }
}
