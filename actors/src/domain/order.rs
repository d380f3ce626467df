//! Orderings: which pending task a claim takes, and the total order of lists.
//!
//! Claims take the lowest priority number, then the oldest `created_at`, then
//! the smallest `task_id`. Lists order by status group (open work first), then
//! the same three keys; the order is total so keyset pages never repeat or
//! skip an unchanged task.

use std::collections::{BTreeSet, HashMap};

use super::{TaskHeader, TaskId, TaskStatus};

/// Claim order of a pending task.
pub type PendingKey = (u8, i64, TaskId);

/// Position of a task in list order; also what a cursor remembers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ListKey {
    pub rank: i64,
    pub priority: u8,
    pub created_at: i64,
    pub task_id: TaskId,
}

impl ListKey {
    pub fn new(status: TaskStatus, priority: u8, created_at: i64, task_id: TaskId) -> Self {
        Self {
            rank: status.rank(),
            priority,
            created_at,
            task_id,
        }
    }

    /// Where the task with header `h` stands in list order.
    pub fn of(h: &TaskHeader) -> Self {
        Self::new(h.status, h.priority, h.created_at, h.task_id)
    }
}

/// The pending queue of one org: all pending tasks in claim order, plus one
/// ordered set per tag for filtered claims.
#[derive(Debug, Default)]
pub struct PendingIndex {
    all: BTreeSet<PendingKey>,
    by_tag: HashMap<String, BTreeSet<PendingKey>>,
}

impl PendingIndex {
    pub fn insert(&mut self, key: PendingKey, tags: &[String]) {
        self.all.insert(key);
        for t in tags {
            self.by_tag.entry(t.clone()).or_default().insert(key);
        }
    }

    pub fn remove(&mut self, key: &PendingKey, tags: &[String]) {
        self.all.remove(key);
        for t in tags {
            if let Some(set) = self.by_tag.get_mut(t) {
                set.remove(key);
                if set.is_empty() {
                    self.by_tag.remove(t);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.all.len()
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// Every pending task, in claim order.
    pub fn ids(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.all.iter().map(|k| k.2)
    }

    /// The first task in claim order that carries any of `tags` (every task
    /// when `tags` is empty) and passes `eligible`.
    pub fn first_matching(
        &self,
        tags: &[String],
        mut eligible: impl FnMut(&PendingKey) -> bool,
    ) -> Option<PendingKey> {
        if tags.is_empty() {
            return self.all.iter().find(|k| eligible(k)).copied();
        }
        tags.iter()
            .filter_map(|t| self.by_tag.get(t))
            .filter_map(|set| set.iter().find(|k| eligible(k)).copied())
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn claims_by_priority_then_age_then_id() {
        let mut idx = PendingIndex::default();
        let (a, b, c) = (TaskId::new_v7(), TaskId::new_v7(), TaskId::new_v7());
        idx.insert((3, 10, a), &[]);
        idx.insert((1, 20, b), &[]);
        idx.insert((1, 15, c), &[]);
        assert_eq!(idx.first_matching(&[], |_| true), Some((1, 15, c)));
        idx.remove(&(1, 15, c), &[]);
        assert_eq!(idx.first_matching(&[], |_| true), Some((1, 20, b)));
    }

    #[test]
    fn tag_filter_matches_any_and_respects_eligibility() {
        let mut idx = PendingIndex::default();
        let (a, b, c) = (TaskId::new_v7(), TaskId::new_v7(), TaskId::new_v7());
        idx.insert((1, 1, a), &tags(&["gpu"]));
        idx.insert((2, 1, b), &tags(&["cpu"]));
        idx.insert((3, 1, c), &tags(&["cpu", "gpu"]));
        assert_eq!(
            idx.first_matching(&tags(&["cpu"]), |_| true),
            Some((2, 1, b))
        );
        assert_eq!(
            idx.first_matching(&tags(&["cpu", "gpu"]), |_| true),
            Some((1, 1, a))
        );
        assert_eq!(
            idx.first_matching(&tags(&["gpu"]), |k| k.2 != a),
            Some((3, 1, c))
        );
        assert_eq!(idx.first_matching(&tags(&["tpu"]), |_| true), None);
        idx.remove(&(3, 1, c), &tags(&["cpu", "gpu"]));
        assert_eq!(idx.first_matching(&tags(&["gpu"]), |k| k.2 != a), None);
    }

    #[test]
    fn list_order_puts_open_work_first() {
        let id = TaskId::new_v7();
        let done = ListKey::new(TaskStatus::Completed, 1, 0, id);
        let blocked = ListKey::new(TaskStatus::Blocked, 5, 99, id);
        let pending = ListKey::new(TaskStatus::Pending, 5, 99, id);
        assert!(pending < blocked && blocked < done);
    }
}
