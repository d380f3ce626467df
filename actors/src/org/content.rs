//! The content of tasks waiting to be claimed, kept by the actor that
//! created them, so that a claim answers without reading the store.
//!
//! A claim changes only a header, which the actor holds; the task's sealed
//! content (title, description, metadata) it used to read back from the
//! store, on a reader's connection whose pages every commit invalidates.
//! The actor wrote that content itself, and every later change of it
//! passes through the actor, so it can keep a copy that cannot go stale:
//! a task's copy is kept when its creation is handed to the writer,
//! dropped when its content changes or it finishes, and handed out by its
//! first claim. A task claimed again after its lease ran out, or created
//! while the budget was spent, or before the actor last started, is read
//! from the store as before.
//!
//! The copies of all orgs share one budget of bytes. When it is spent a
//! new task is simply not kept: the oldest copies stay, which is what a
//! queue served oldest first claims next.
//!
//! Claims past the kept copies (a backlog larger than the budget, or tasks
//! created before the actor started) would each read the store on the
//! claim path. So the actor refills: when fewer than `REFILL_AHEAD` copies
//! wait at the head of the pending queue, it reads the content of the next
//! `REFILL_BATCH` pending tasks in one query, off the claim path, and keeps
//! what the budget has room for. A read holds up to `REFILL_BATCH` tasks'
//! content before any is kept, and `REFILLS_AT_ONCE` bounds how many
//! such reads all orgs have out, so what they hold together stays bounded
//! whatever the size of the tasks. A read can race with a change: a task
//! claimed, changed or finished while its read was out is not kept from
//! it, and the read starts only once the writes queued before it was asked
//! for are committed, so what it finds is what the actor last wrote.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::api::ClaimCacheFigures;
use crate::domain::{StoredTask, TaskId};

/// What a kept task costs besides its content bytes: its header, the map
/// entry, the allocations' own overhead. An estimate, on the high side.
const ENTRY_OVERHEAD: usize = 320;

/// Kept copies at the head of the pending queue below which a refill reads
/// more: at 10,000 claims a second, 50 ms of claims.
const REFILL_AHEAD: usize = 512;
/// Tasks one refill reads, in one query.
const REFILL_BATCH: usize = 128;
/// Refills out at once, all orgs together.
const REFILLS_AT_ONCE: usize = 2;
/// Claims answered from kept copies between two looks at the queue's head;
/// a claim that found no copy looks at once.
const LOOK_EVERY: u32 = 64;

/// The bytes every org's kept content may take together.
#[derive(Debug)]
pub struct ContentBudget {
    limit: usize,
    used: AtomicUsize,
    /// Claims answered with a kept copy, and claims that found none.
    kept: AtomicU64,
    read: AtomicU64,
    /// Copies kept from refills' reads.
    refilled: AtomicU64,
    /// One permit per refill out.
    refills: Arc<Semaphore>,
}

impl ContentBudget {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
            kept: AtomicU64::new(0),
            read: AtomicU64::new(0),
            refilled: AtomicU64::new(0),
            refills: Arc::new(Semaphore::new(REFILLS_AT_ONCE)),
        })
    }

    /// Bytes taken now, over all orgs.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    pub fn figures(&self) -> ClaimCacheFigures {
        ClaimCacheFigures {
            bytes_used: self.used(),
            bytes_limit: self.limit,
            claims_kept: self.kept.load(Ordering::Relaxed),
            claims_read: self.read.load(Ordering::Relaxed),
            tasks_refilled: self.refilled.load(Ordering::Relaxed),
        }
    }

    fn take(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|after| *after <= self.limit)
            })
            .is_ok()
    }

    fn has_room(&self, bytes: usize) -> bool {
        self.used().saturating_add(bytes) <= self.limit
    }

    fn give_back(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// A refill to read: the tasks, in claim order, and its place among the
/// refills out, held until its read is handed back.
#[derive(Debug)]
pub struct Refill {
    pub wanted: Vec<TaskId>,
    pub permit: OwnedSemaphorePermit,
}

/// One org's kept content, by task. Dropping it gives its bytes back.
#[derive(Debug)]
pub struct ContentCache {
    budget: Arc<ContentBudget>,
    tasks: HashMap<TaskId, Box<StoredTask>>,
    bytes: usize,
    /// The tasks whose content a refill is reading and that no claim,
    /// change or finish has touched since it was asked for; `None` while
    /// no refill is out.
    refilling: Option<HashSet<TaskId>>,
    /// Claims since the queue's head was last looked at.
    claims_unlooked: u32,
    /// Whether a claim found no copy since the last look.
    missed: bool,
}

fn cost(task: &StoredTask) -> usize {
    task.content_len() + ENTRY_OVERHEAD
}

impl ContentCache {
    pub fn new(budget: Arc<ContentBudget>) -> Self {
        Self {
            budget,
            tasks: HashMap::new(),
            bytes: 0,
            refilling: None,
            claims_unlooked: 0,
            missed: false,
        }
    }

    /// Keeps a copy of a task just handed to the writer, if the budget has
    /// room for it.
    pub fn keep(&mut self, task: &StoredTask) {
        self.forget(task.header.task_id);
        if self.budget.take(cost(task)) {
            self.insert(Box::new(task.clone()));
        }
    }

    /// Holds a copy whose bytes the budget has granted.
    fn insert(&mut self, task: Box<StoredTask>) {
        self.bytes += cost(&task);
        self.tasks.insert(task.header.task_id, task);
    }

    /// The kept copy of a task being claimed, if any; it is not kept after.
    pub fn take(&mut self, id: TaskId) -> Option<Box<StoredTask>> {
        self.unrefill(id);
        self.claims_unlooked = self.claims_unlooked.saturating_add(1);
        let Some(task) = self.tasks.remove(&id) else {
            self.budget.read.fetch_add(1, Ordering::Relaxed);
            self.missed = true;
            return None;
        };
        self.budget.kept.fetch_add(1, Ordering::Relaxed);
        self.release(&task);
        Some(task)
    }

    /// Drops the copy of a task whose content changed or that finished.
    pub fn forget(&mut self, id: TaskId) {
        self.unrefill(id);
        if let Some(task) = self.tasks.remove(&id) {
            self.release(&task);
        }
    }

    /// A refill's read, if out, no longer counts for this task.
    fn unrefill(&mut self, id: TaskId) {
        if let Some(refilling) = &mut self.refilling {
            refilling.remove(&id);
        }
    }

    /// After claims: the pending tasks (`pending`, in claim order) whose
    /// content a refill should read now, if one is due. The tasks returned
    /// count as being read until [`ContentCache::refilled`].
    pub fn refill_due(&mut self, pending: impl Iterator<Item = TaskId>) -> Option<Refill> {
        if self.refilling.is_some() || !(self.missed || self.claims_unlooked >= LOOK_EVERY) {
            return None;
        }
        self.missed = false;
        self.claims_unlooked = 0;
        if !self.budget.has_room(REFILL_BATCH * ENTRY_OVERHEAD) {
            return None;
        }
        let mut pending = pending.peekable();
        let mut ahead = 0;
        while ahead < REFILL_AHEAD && pending.next_if(|id| self.tasks.contains_key(id)).is_some() {
            ahead += 1;
        }
        if ahead == REFILL_AHEAD {
            return None;
        }
        let wanted: Vec<TaskId> = pending
            .take(REFILL_AHEAD + REFILL_BATCH)
            .filter(|id| !self.tasks.contains_key(id))
            .take(REFILL_BATCH)
            .collect();
        if wanted.is_empty() {
            return None;
        }
        let permit = self.budget.refills.clone().try_acquire_owned().ok()?;
        self.refilling = Some(wanted.iter().copied().collect());
        Some(Refill { wanted, permit })
    }

    /// What a refill read, in claim order: keeps, in that order and while
    /// the budget has room, each task nothing touched while the read was
    /// out.
    pub fn refilled(&mut self, read: Vec<StoredTask>) {
        let Some(untouched) = self.refilling.take() else {
            return;
        };
        for task in read {
            if !untouched.contains(&task.header.task_id) {
                continue;
            }
            if !self.budget.take(cost(&task)) {
                break;
            }
            self.insert(Box::new(task));
            self.budget.refilled.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn release(&mut self, task: &StoredTask) {
        let bytes = cost(task);
        self.bytes -= bytes;
        self.budget.give_back(bytes);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.tasks.len()
    }
}

impl Drop for ContentCache {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{TaskHeader, TaskStatus};

    fn task(title_len: usize) -> StoredTask {
        StoredTask {
            header: TaskHeader {
                task_id: TaskId::new_v7(),
                status: TaskStatus::Pending,
                priority: 2,
                created_at: 1,
                updated_at: 1,
                assignee: None,
                tags: Vec::new(),
                blocked_by: Vec::new(),
                parent: None,
                lease: None,
                attempts: 0,
                max_attempts: 5,
                run_at: None,
                retry: None,
                retries: 0,
                scheduled: None,
            },
            title: vec![1; title_len],
            description: Some(vec![2; 10]),
            metadata: None,
            output: None,
        }
    }

    #[test]
    fn content_cache_stays_within_its_budget_across_orgs() {
        let one = task(100);
        let budget = ContentBudget::new(2 * cost(&one) + 1);
        let mut first = ContentCache::new(budget.clone());
        let mut second = ContentCache::new(budget.clone());
        first.keep(&one);
        let two = task(100);
        second.keep(&two);
        // The budget holds two such tasks: a third is not kept.
        let three = task(100);
        first.keep(&three);
        assert_eq!(first.len(), 1);
        assert!(first.take(three.header.task_id).is_none());
        assert_eq!(budget.used(), 2 * cost(&one));

        // A claim hands the copy out once and frees its bytes for the next.
        let claimed = first.take(one.header.task_id).expect("kept");
        assert_eq!(claimed.title, one.title);
        assert!(first.take(one.header.task_id).is_none());
        first.keep(&three);
        assert_eq!(first.len(), 1);

        // A changed task's copy is dropped; an org's cache gives all back.
        second.forget(two.header.task_id);
        assert_eq!(second.len(), 0);
        assert_eq!(budget.used(), cost(&three));
        drop(first);
        assert_eq!(budget.used(), 0);
    }

    /// `n` pending tasks of small content, in claim order.
    fn backlog(n: usize) -> Vec<StoredTask> {
        (0..n).map(|_| task(10)).collect()
    }

    fn ids(tasks: &[StoredTask]) -> Vec<TaskId> {
        tasks.iter().map(|t| t.header.task_id).collect()
    }

    /// Claims the first of `tasks`, which has no copy: the rest of the
    /// queue, and the tasks the refill then due is to read.
    fn miss_the_first(
        cache: &mut ContentCache,
        tasks: &[StoredTask],
    ) -> (Vec<TaskId>, Vec<TaskId>) {
        assert!(cache.take(tasks[0].header.task_id).is_none());
        let pending = ids(&tasks[1..]);
        let due = cache.refill_due(pending.iter().copied()).expect("due");
        (pending, due.wanted)
    }

    #[test]
    fn a_claim_past_the_kept_copies_asks_for_the_next_batch_in_claim_order() {
        let budget = ContentBudget::new(1 << 20);
        let mut cache = ContentCache::new(budget.clone());
        let tasks = backlog(3 + REFILL_BATCH + 10);
        for t in &tasks[1..3] {
            cache.keep(t);
        }
        // Nothing claimed yet: no look at the queue.
        assert!(cache.refill_due(ids(&tasks).into_iter()).is_none());

        // The first task was not kept: its claim misses and asks for the
        // next unkept tasks after the kept ones, a batch of them.
        let (pending, wanted) = miss_the_first(&mut cache, &tasks);
        assert_eq!(wanted, pending[2..2 + REFILL_BATCH]);
        // One read at a time.
        assert!(cache.take(tasks[1].header.task_id).is_some());
        assert!(cache.take(tasks[5].header.task_id).is_none());
        assert!(cache.refill_due(pending[1..].iter().copied()).is_none());

        // The read comes back: every task but the one claimed meanwhile is
        // kept, and the next claims find their copies.
        let read: Vec<StoredTask> = tasks[3..3 + REFILL_BATCH].to_vec();
        cache.refilled(read);
        assert_eq!(cache.len(), 1 + REFILL_BATCH - 1);
        assert_eq!(budget.figures().tasks_refilled, REFILL_BATCH as u64 - 1);
        assert!(cache.take(tasks[5].header.task_id).is_none());
        assert_eq!(
            cache.take(tasks[6].header.task_id).expect("refilled").title,
            tasks[6].title
        );
    }

    #[test]
    fn a_task_changed_while_its_read_was_out_is_not_kept_from_the_read() {
        let budget = ContentBudget::new(1 << 20);
        let mut cache = ContentCache::new(budget.clone());
        let tasks = backlog(4);
        let (pending, wanted) = miss_the_first(&mut cache, &tasks);
        assert_eq!(wanted, pending);

        // Changed (its copy forgotten) and finished after the read was
        // asked for: the read holds what the store had before.
        cache.forget(tasks[1].header.task_id);
        cache.forget(tasks[3].header.task_id);
        cache.refilled(tasks[1..].to_vec());
        assert_eq!(cache.len(), 1);
        assert!(cache.take(tasks[1].header.task_id).is_none());
        assert!(cache.take(tasks[2].header.task_id).is_some());
        assert!(cache.take(tasks[3].header.task_id).is_none());
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn enough_copies_ahead_or_a_spent_budget_ask_for_no_read() {
        let tasks = backlog(REFILL_AHEAD + 2);
        let budget = ContentBudget::new(1 << 20);
        let mut cache = ContentCache::new(budget.clone());
        for t in &tasks[1..] {
            cache.keep(t);
        }
        assert!(cache.take(tasks[0].header.task_id).is_none());
        assert!(cache.refill_due(ids(&tasks[1..]).into_iter()).is_none());

        // Claims answered from copies look again every `LOOK_EVERY`.
        for t in &tasks[1..=LOOK_EVERY as usize] {
            assert!(cache.take(t.header.task_id).is_some());
        }
        let rest = backlog(3);
        let pending: Vec<TaskId> = ids(&tasks[LOOK_EVERY as usize + 1..])
            .into_iter()
            .chain(ids(&rest))
            .collect();
        let due = cache.refill_due(pending.iter().copied()).expect("due");
        assert_eq!(due.wanted, ids(&rest));

        // With the budget spent, a miss asks for nothing.
        let spent = ContentBudget::new(cost(&tasks[0]));
        let mut cache = ContentCache::new(spent);
        cache.keep(&tasks[0]);
        assert!(cache.take(tasks[1].header.task_id).is_none());
        assert!(cache.refill_due(ids(&tasks[2..]).into_iter()).is_none());
    }

    #[test]
    fn refills_out_at_once_are_bounded_across_orgs() {
        let budget = ContentBudget::new(1 << 20);
        let tasks = backlog(2);
        let mut refills = Vec::new();
        let mut orgs: Vec<ContentCache> = (0..=REFILLS_AT_ONCE)
            .map(|_| ContentCache::new(budget.clone()))
            .collect();
        for cache in &mut orgs[..REFILLS_AT_ONCE] {
            assert!(cache.take(tasks[0].header.task_id).is_none());
            refills.push(cache.refill_due(ids(&tasks[1..]).into_iter()).expect("due"));
        }
        let last = orgs.last_mut().expect("one more org");
        assert!(last.take(tasks[0].header.task_id).is_none());
        assert!(last.refill_due(ids(&tasks[1..]).into_iter()).is_none());

        // A read handed back frees its place for the next miss.
        let done = refills.pop().expect("a refill");
        orgs[REFILLS_AT_ONCE - 1].refilled(tasks[1..].to_vec());
        drop(done);
        let last = orgs.last_mut().expect("one more org");
        assert!(last.take(tasks[0].header.task_id).is_none());
        assert!(last.refill_due(ids(&tasks[1..]).into_iter()).is_some());
    }

    #[test]
    fn content_cache_keeps_the_latest_copy_of_a_task() {
        let budget = ContentBudget::new(1 << 20);
        let mut cache = ContentCache::new(budget.clone());
        let mut task = task(10);
        cache.keep(&task);
        task.title = vec![9; 40];
        cache.keep(&task);
        assert_eq!(cache.len(), 1);
        assert_eq!(budget.used(), cost(&task));
        assert_eq!(
            cache.take(task.header.task_id).expect("kept").title,
            task.title
        );
        assert_eq!(budget.used(), 0);
    }
}
