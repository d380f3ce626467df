//! Leases whose holders the org's own write limit refused. A fleet on a
//! small tier shares its writes between claims, renewals and completions;
//! when its renewals are refused its leases run out, and counting each of
//! those expiries as an attempt failed working tasks as poison. The actor
//! notes each refused update of a current lease, and the expiry of that
//! lease within its last period uses no attempt
//! (`domain::lease::expiry_counts`).
//!
//! Kept in memory beside the rate-limit buckets, never stored: an actor
//! that restarts forgets them, and an expiry after that counts as any
//! other would.

use std::collections::HashMap;

use uuid::Uuid;

use crate::api::TaskUpdate;
use crate::domain::open::OpenTasks;
use crate::domain::{Lease, TaskId};

/// Past this many notes, those of leases no longer current are dropped.
const KEPT: usize = 4096;

#[derive(Debug, Default)]
pub(super) struct RefusedLeases {
    /// The lease an update named, and when it was last refused.
    by_task: HashMap<TaskId, (Uuid, i64)>,
}

impl RefusedLeases {
    /// Notes the leases named by `updates`, refused at `now` by the write
    /// limit, that are still their tasks' current ones.
    pub(super) fn note(&mut self, open: &OpenTasks, updates: &[TaskUpdate], now: i64) {
        for u in updates {
            let Some(lease_id) = u.lease_id else { continue };
            if current(open, u.task_id) == Some(lease_id) {
                self.by_task.insert(u.task_id, (lease_id, now));
            }
        }
        if self.by_task.len() > KEPT {
            self.by_task
                .retain(|task, (lease, _)| current(open, *task) == Some(*lease));
        }
    }

    /// When an update of `lease`, `task`'s, was last refused; the note is
    /// taken.
    pub(super) fn take(&mut self, task: TaskId, lease: &Lease) -> Option<i64> {
        self.by_task
            .remove(&task)
            .filter(|(id, _)| *id == lease.lease_id)
            .map(|(_, at)| at)
    }
}

fn current(open: &OpenTasks, task: TaskId) -> Option<Uuid> {
    open.get(task).and_then(|h| h.lease).map(|l| l.lease_id)
}
