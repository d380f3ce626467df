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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::api::ClaimCacheFigures;
use crate::domain::{StoredTask, TaskId};

/// What a kept task costs besides its content bytes: its header, the map
/// entry, the allocations' own overhead. An estimate, on the high side.
const ENTRY_OVERHEAD: usize = 320;

/// The bytes every org's kept content may take together.
#[derive(Debug)]
pub struct ContentBudget {
    limit: usize,
    used: AtomicUsize,
    /// Claims answered with a kept copy, and claims that found none.
    kept: AtomicU64,
    read: AtomicU64,
}

impl ContentBudget {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
            kept: AtomicU64::new(0),
            read: AtomicU64::new(0),
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
        }
    }

    fn take(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|after| *after <= self.limit)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// One org's kept content, by task. Dropping it gives its bytes back.
#[derive(Debug)]
pub struct ContentCache {
    budget: Arc<ContentBudget>,
    tasks: HashMap<TaskId, Box<StoredTask>>,
    bytes: usize,
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
        }
    }

    /// Keeps a copy of a task just handed to the writer, if the budget has
    /// room for it.
    pub fn keep(&mut self, task: &StoredTask) {
        let id = task.header.task_id;
        self.forget(id);
        let bytes = cost(task);
        if self.budget.take(bytes) {
            self.bytes += bytes;
            self.tasks.insert(id, Box::new(task.clone()));
        }
    }

    /// The kept copy of a task being claimed, if any; it is not kept after.
    pub fn take(&mut self, id: TaskId) -> Option<Box<StoredTask>> {
        let Some(task) = self.tasks.remove(&id) else {
            self.budget.read.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        self.budget.kept.fetch_add(1, Ordering::Relaxed);
        self.release(&task);
        Some(task)
    }

    /// Drops the copy of a task whose content changed or that finished.
    pub fn forget(&mut self, id: TaskId) {
        if let Some(task) = self.tasks.remove(&id) {
            self.release(&task);
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
