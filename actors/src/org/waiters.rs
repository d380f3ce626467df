//! What waits in the actor: long-poll claims, and waits for tasks to
//! finish (`POST /tasks/wait`).
//!
//! A claim with `wait_seconds` that finds nothing waits here until a
//! matching task becomes pending or its time runs out.
//!
//! Waiters are served first come, first served among those whose filter
//! matches: after every message that put a task into the pending queue, the
//! actor walks them in arrival order and claims for each in turn. Nothing
//! polls and nothing sleeps; a timer per waiter answers `null` at its
//! deadline.
//!
//! A waiter whose client went away has a closed reply port: it leaves
//! without claiming, when the engine says its caller is gone
//! (`WaiterGone`) or the next time the actor looks. A claim whose answer
//! never reaches its claimant is undone by its ticket (`ClaimUndelivered`),
//! the task back to `pending`, so no task waits on a lease nobody holds.
//!
//! A wait for tasks is answered from the actor's own knowledge: every
//! change of a watched task passes through `Work::put`, which notes it
//! here, and after each message the waits whose condition now holds are
//! released. The release carries no task: the engine reads them from the
//! store once the change that finished them is committed, so an answer
//! never shows what a failed commit lost.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use ractor::ActorRef;

use super::tasks::SYSTEM_AGENT;
use super::work::Work;
use super::{Admission, Claimed, OrgActor, OrgMsg, OrgState, Outcome, Reply};
use crate::api::{ClaimRequest, Text, WaitTasks, WaitUntil};
use crate::domain::account::{Caller, Principal};
use crate::domain::{TaskId, TaskStatus};
use crate::error::{EngineError, LimitExceeded, LimitKind};
use crate::writer::Commit;

/// A claim waiting for a task.
pub(super) struct Waiter {
    caller: Caller,
    request: ClaimRequest,
    reply: Reply<Vec<Claimed>>,
    deadline: Instant,
    /// The commit of the claim's own usage, answered when nothing came.
    usage: Option<Commit>,
}

#[derive(Default)]
pub(super) struct Waiters {
    queue: VecDeque<Waiter>,
    /// The pending queue's version when the waiters last looked at it.
    seen_version: u64,
}

impl Waiters {
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Drops the waiters whose caller went away.
    pub fn drop_gone(&mut self) {
        self.queue.retain(|w| !w.reply.is_closed());
    }

    /// Queues a waiter behind the others, after dropping those whose
    /// caller went away.
    fn push(&mut self, waiter: Waiter) {
        self.drop_gone();
        self.queue.push_back(waiter);
    }

    /// Takes the waiters whose time ran out at `now` or whose caller went
    /// away; the others keep their order.
    fn take_due(&mut self, now: Instant) -> VecDeque<Waiter> {
        let (due, waiting) = self
            .queue
            .drain(..)
            .partition(|w| w.deadline <= now || w.reply.is_closed());
        self.queue = waiting;
        due
    }
}

/// The waits for tasks one key may hold at once; beyond, 429.
pub const WAITS_PER_KEY: usize = 25;

/// A wait for tasks: the tasks found when it came, and which of them are
/// finished.
pub(super) struct TaskWait {
    key: Principal,
    until: WaitUntil,
    found: Vec<TaskId>,
    finished: HashSet<TaskId>,
    reply: Reply<()>,
    deadline: Instant,
    /// The commit of the wait's own usage.
    usage: Option<Commit>,
}

impl TaskWait {
    fn holds(&self) -> bool {
        self.until.holds(self.found.len(), self.finished.len())
    }

    fn release(self) {
        let _ = self.reply.send(Outcome {
            result: Ok(()),
            commit: self.usage,
        });
    }
}

/// The waits for tasks, and the changes of their tasks since they last
/// looked.
#[derive(Default)]
pub(super) struct TaskWaits {
    waits: Vec<TaskWait>,
    /// How many waits watch each task.
    watched: HashMap<TaskId, usize>,
    /// Watched tasks the message being served changed, and whether each
    /// is now finished.
    changed: Vec<(TaskId, bool)>,
}

impl TaskWaits {
    pub fn len(&self) -> usize {
        self.waits.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waits.is_empty()
    }

    fn held_by(&self, key: Principal) -> usize {
        self.waits.iter().filter(|w| w.key == key).count()
    }

    /// Notes a change of a task: kept only when a wait watches it.
    pub fn note(&mut self, id: TaskId, finished: bool) {
        if !self.watched.is_empty() && self.watched.contains_key(&id) {
            self.changed.push((id, finished));
        }
    }

    fn push(&mut self, wait: TaskWait) {
        for id in &wait.found {
            *self.watched.entry(*id).or_default() += 1;
        }
        self.waits.push(wait);
    }

    /// Takes the waits `leaves` picks; the others keep their order.
    fn take(&mut self, mut leaves: impl FnMut(&TaskWait) -> bool) -> Vec<TaskWait> {
        let (gone, kept) = std::mem::take(&mut self.waits)
            .into_iter()
            .partition(|w| leaves(w));
        self.waits = kept;
        for w in &gone {
            for id in &w.found {
                if let Some(n) = self.watched.get_mut(id) {
                    *n -= 1;
                    if *n == 0 {
                        self.watched.remove(id);
                    }
                }
            }
        }
        gone
    }

    /// Applies the changes noted, and takes the waits that now hold or
    /// whose caller went away.
    fn take_settled(&mut self) -> Vec<TaskWait> {
        if self.changed.is_empty() {
            return Vec::new();
        }
        for (id, finished) in std::mem::take(&mut self.changed) {
            for w in self.waits.iter_mut().filter(|w| w.found.contains(&id)) {
                if finished {
                    w.finished.insert(id);
                } else {
                    w.finished.remove(&id);
                }
            }
        }
        self.take(|w| w.holds() || w.reply.is_closed())
    }

    fn drop_gone(&mut self) {
        drop(self.take(|w| w.reply.is_closed()));
    }
}

impl Waiter {
    /// Answers `null`: nothing came in time, or the actor is stopping.
    fn answer_null(self) {
        let _ = self.reply.send(Outcome {
            result: Ok(Vec::new()),
            commit: self.usage,
        });
    }
}

impl OrgActor {
    /// A claim: served at once when a task matches, else (with
    /// `wait_seconds`) queued as a waiter.
    pub(super) fn claim_or_wait(
        &self,
        myself: &ActorRef<OrgMsg>,
        state: &mut OrgState,
        caller: Caller,
        request: ClaimRequest,
        reply: Reply<Vec<Claimed>>,
    ) {
        if reply.is_closed() {
            return;
        }
        let Some((slot, mut work, reply)) = self.begin_or_refuse(state, Admission::write(), reply)
        else {
            return;
        };
        let claimed = self.claim_up_to(state, &mut work, &caller, &request);
        if !claimed.is_empty() || request.wait_seconds == 0 || self.draining() {
            self.finish(state, slot, work, Ok(claimed), reply);
            return;
        }
        let usage = (!work.is_empty()).then(|| slot.submit(work.into_batch(state)));
        let wait = Duration::from_secs(u64::from(request.wait_seconds));
        state.waiters.push(Waiter {
            caller,
            request,
            reply,
            deadline: Instant::now() + wait,
            usage,
        });
        state.waiters.seen_version = state.open.pending_version();
        myself.send_after(wait, || OrgMsg::WaitElapsed);
    }

    /// A wait for tasks: released at once when all (or any) of those found
    /// are finished, when there is nothing to wait for, or without
    /// `wait_seconds`; else held until they are or its time runs out.
    pub(super) async fn wait_for_tasks(
        &self,
        myself: &ActorRef<OrgMsg>,
        state: &mut OrgState,
        caller: &Caller,
        request: WaitTasks,
        reply: Reply<()>,
    ) {
        if reply.is_closed() {
            return;
        }
        state.task_waits.drop_gone();
        let Some((slot, mut work, reply)) = self.begin_or_refuse(state, Admission::read(), reply)
        else {
            return;
        };
        if let Err(e) = self
            .load(state, &mut work, request.task_ids.iter().copied())
            .await
        {
            self.finish(state, slot, work, Err(e), reply);
            return;
        }
        let mut found = Vec::with_capacity(request.task_ids.len());
        let mut finished = HashSet::new();
        for &id in &request.task_ids {
            if let Some(h) = work.header(state, id) {
                found.push(id);
                if h.status.is_terminal() {
                    finished.insert(id);
                }
            }
        }
        if request.until.settled(found.len(), finished.len())
            || request.wait_seconds == 0
            || self.draining()
        {
            self.finish(state, slot, work, Ok(()), reply);
            return;
        }
        if state.task_waits.held_by(caller.principal) >= WAITS_PER_KEY {
            let refused = EngineError::Limit(LimitExceeded {
                kind: LimitKind::Waits,
                limit: WAITS_PER_KEY as i64,
                tier: state.entry.record.tier,
                resets: None,
                retry_after: Some(1),
            });
            self.finish(state, slot, work, Err(refused), reply);
            return;
        }
        let usage = (!work.is_empty()).then(|| slot.submit(work.into_batch(state)));
        let wait = Duration::from_secs(u64::from(request.wait_seconds));
        state.task_waits.push(TaskWait {
            key: caller.principal,
            until: request.until,
            found,
            finished,
            reply,
            deadline: Instant::now() + wait,
            usage,
        });
        myself.send_after(wait, || OrgMsg::WaitElapsed);
    }

    /// Releases the waits for tasks whose condition the message just
    /// served made true.
    pub(super) fn release_settled_waits(&self, state: &mut OrgState) {
        for w in state.task_waits.take_settled() {
            w.release();
        }
    }

    /// Claims for waiters, in arrival order, while tasks are pending and
    /// something entered the queue since they last looked.
    pub(super) async fn serve_waiters(&self, state: &mut OrgState) {
        let version = state.open.pending_version();
        if state.waiters.is_empty() || version == state.waiters.seen_version {
            return;
        }
        state.waiters.seen_version = version;
        let mut i = 0;
        while i < state.waiters.queue.len() && state.open.pending_len() > 0 {
            if state.waiters.queue[i].reply.is_closed() {
                state.waiters.queue.remove(i);
                continue;
            }
            // Taken before anything changes; a full queue leaves the waiters
            // for the next look.
            let Ok(slot) = self.deps.writers.reserve(state.org) else {
                state.waiters.seen_version = 0;
                return;
            };
            let mut work = Work::default();
            let w = &state.waiters.queue[i];
            let (caller, request) = (w.caller.clone(), w.request.clone());
            let claimed = self.claim_up_to(state, &mut work, &caller, &request);
            if claimed.is_empty() {
                i += 1;
                continue;
            }
            let waiter = state.waiters.queue.remove(i).expect("the waiter looked at");
            let commit = slot.submit(work.into_batch(state));
            let answer = Outcome {
                result: Ok(claimed),
                commit: Some(commit),
            };
            // Unanswered, the claim's tickets undo it.
            let _ = waiter.reply.send(answer);
        }
    }

    /// Undoes a claim nobody received: the task goes back to `pending`,
    /// unless its lease is no longer the one claimed.
    pub(super) async fn release(&self, state: &mut OrgState, id: TaskId, lease: uuid::Uuid) {
        let Some(mut h) = state.open.get(id).cloned() else {
            return;
        };
        if h.lease.map(|l| l.lease_id) != Some(lease) {
            return;
        }
        let Ok(slot) = self.deps.writers.reserve_waiting(state.org).await else {
            // The writer is gone: the engine is stopping and the lease
            // expires after the restart.
            return;
        };
        let mut work = Work::default();
        h.assignee = None;
        work.transition(
            state,
            &mut h,
            TaskStatus::Pending,
            SYSTEM_AGENT,
            Some(&Text::Plain("claimant went away".into())),
            self.now(),
        );
        work.put(state, h);
        tracing::info!(org_id = %state.org, task_id = %id, "claimant went away; task back to pending");
        drop(slot.submit(work.into_batch(state)));
    }

    /// Answers `null` to the waiters whose time ran out, and drops those
    /// whose client went away.
    pub(super) fn answer_elapsed_waiters(&self, state: &mut OrgState) {
        let now = Instant::now();
        for w in state.waiters.take_due(now) {
            w.answer_null();
        }
        let due = state
            .task_waits
            .take(|w| w.deadline <= now || w.reply.is_closed());
        due.into_iter().for_each(TaskWait::release);
    }

    /// Drops the waiting claims and waits whose caller went away.
    pub(super) fn drop_gone_waiters(&self, state: &mut OrgState) {
        state.waiters.drop_gone();
        state.task_waits.drop_gone();
    }

    /// Answers `null` to every waiting claim and releases every wait: the
    /// actor or the server is stopping.
    pub(super) fn release_waiters(&self, state: &mut OrgState) {
        for w in state.waiters.queue.drain(..) {
            w.answer_null();
        }
        state
            .task_waits
            .take(|_| true)
            .into_iter()
            .for_each(TaskWait::release);
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::oneshot;

    use super::*;
    use crate::domain::account::Role;
    use crate::domain::{KeyId, OrgId};

    type Answer = oneshot::Receiver<Outcome<Vec<Claimed>>>;

    fn waiter(name: &str, deadline: Instant) -> (Waiter, Answer) {
        let (tx, rx) = oneshot::channel();
        let caller = Caller {
            org_id: OrgId::new_v7(),
            principal: Principal::Key(KeyId::new_v7()),
            key_name: name.to_owned(),
            email: format!("{name}@example.com"),
            role: Role::User,
        };
        let waiter = Waiter {
            caller,
            request: ClaimRequest::default(),
            reply: tx.into(),
            deadline,
            usage: None,
        };
        (waiter, rx)
    }

    fn names(waiters: &Waiters) -> Vec<&str> {
        waiters
            .queue
            .iter()
            .map(|w| w.caller.key_name.as_str())
            .collect()
    }

    fn answered_null(answer: &mut Answer) -> bool {
        matches!(answer.try_recv(), Ok(Outcome { result: Ok(tasks), .. }) if tasks.is_empty())
    }

    #[test]
    fn waiters_keep_arrival_order_and_the_gone_leave() {
        let later = Instant::now() + Duration::from_secs(30);
        let mut waiters = Waiters::default();
        let (a, _a) = waiter("a", later);
        let (b, b_answer) = waiter("b", later);
        let (c, _c) = waiter("c", later);
        waiters.push(a);
        waiters.push(b);
        drop(b_answer);
        waiters.push(c);
        // The gone one left when the next waiter came.
        assert_eq!(names(&waiters), ["a", "c"]);
        let (d, _d) = waiter("d", later);
        waiters.push(d);
        assert_eq!(names(&waiters), ["a", "c", "d"]);
        assert_eq!(waiters.len(), 3);
    }

    #[test]
    fn a_waiter_past_its_deadline_is_answered_null_and_the_rest_wait_in_order() {
        let now = Instant::now();
        let mut waiters = Waiters::default();
        let (a, mut a_answer) = waiter("a", now + Duration::from_secs(5));
        let (b, mut b_answer) = waiter("b", now + Duration::from_secs(1));
        let (c, mut c_answer) = waiter("c", now + Duration::from_secs(9));
        let (d, d_answer) = waiter("d", now + Duration::from_secs(9));
        for w in [a, b, c, d] {
            waiters.queue.push_back(w);
        }
        drop(d_answer);

        let due = waiters.take_due(now + Duration::from_secs(2));
        let due_names: Vec<&str> = due.iter().map(|w| w.caller.key_name.as_str()).collect();
        assert_eq!(due_names, ["b", "d"]);
        due.into_iter().for_each(Waiter::answer_null);
        assert!(answered_null(&mut b_answer));
        assert_eq!(names(&waiters), ["a", "c"]);
        assert!(a_answer.try_recv().is_err(), "a still waits");

        for w in waiters.take_due(now + Duration::from_secs(9)) {
            w.answer_null();
        }
        assert!(waiters.is_empty());
        assert!(answered_null(&mut a_answer));
        assert!(answered_null(&mut c_answer));
    }

    fn task_wait(until: WaitUntil, found: &[TaskId]) -> (TaskWait, oneshot::Receiver<Outcome<()>>) {
        let (tx, rx) = oneshot::channel();
        let wait = TaskWait {
            key: Principal::Key(KeyId::new_v7()),
            until,
            found: found.to_vec(),
            finished: HashSet::new(),
            reply: tx.into(),
            deadline: Instant::now() + Duration::from_secs(30),
            usage: None,
        };
        (wait, rx)
    }

    #[test]
    fn a_wait_leaves_when_its_tasks_finish_and_a_reopened_task_holds_it_again() {
        let (a, b, c) = (TaskId::new_v7(), TaskId::new_v7(), TaskId::new_v7());
        let mut waits = TaskWaits::default();
        let (all, _all) = task_wait(WaitUntil::All, &[a, b]);
        let (any, _any) = task_wait(WaitUntil::Any, &[b, c]);
        waits.push(all);
        waits.push(any);
        // A task nobody watches is not noted.
        waits.note(TaskId::new_v7(), true);
        assert!(waits.changed.is_empty());

        waits.note(a, true);
        waits.note(a, false);
        assert!(waits.take_settled().is_empty(), "a reopened: nothing holds");
        waits.note(a, true);
        assert!(waits.take_settled().is_empty(), "all of a, b: b is open");
        waits.note(b, true);
        let settled = waits.take_settled();
        assert_eq!(
            settled.len(),
            2,
            "b ends the wait for all and the one for any"
        );
        assert!(waits.is_empty());
        assert!(
            waits.watched.is_empty(),
            "nothing is watched once every wait left"
        );
    }

    #[test]
    fn a_wait_whose_caller_went_away_leaves_and_its_tasks_are_no_longer_watched() {
        let a = TaskId::new_v7();
        let mut waits = TaskWaits::default();
        let (gone, answer) = task_wait(WaitUntil::All, &[a]);
        let (kept, _kept) = task_wait(WaitUntil::All, &[a]);
        waits.push(gone);
        waits.push(kept);
        drop(answer);
        waits.drop_gone();
        assert_eq!(waits.len(), 1);
        assert_eq!(waits.watched.get(&a), Some(&1));
    }
}
