//! What the report writers read of an org's history: each task's header
//! and its state changes, loaded from the store (never from an org actor,
//! so a report never holds a claim up). Here, below both, so the store
//! that reads it knows nothing of the reports.

use super::{TaskId, TaskStatus};

/// One task as the reports see it. No content: titles and outputs are read
/// separately, only for the reports that word things (clusters, runbooks).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskHistory {
    pub task_id: TaskId,
    pub status: TaskStatus,
    pub tags: Vec<String>,
    pub assignee: Option<String>,
    /// Milliseconds since the epoch.
    pub created_at: i64,
    pub updated_at: i64,
    /// Failures retried under its retry policy.
    pub retries: u8,
    /// State changes, oldest first (the creation's, with `from: None`, first).
    pub events: Vec<StateChange>,
}

/// One move of a task from a status to another.
#[derive(Debug, Clone, PartialEq)]
pub struct StateChange {
    /// `None` for the task's creation.
    pub from: Option<TaskStatus>,
    pub to: TaskStatus,
    /// Who made the move: a key name (claims), a member's email or key
    /// name (updates), or `system` (lease expiry, cascades, unblocking).
    pub agent: String,
    pub at: i64,
}

impl TaskHistory {
    /// When the task reached its current terminal status, if it has one.
    pub fn finished_at(&self) -> Option<i64> {
        if !self.status.is_terminal() {
            return None;
        }
        self.events
            .iter()
            .rev()
            .find(|e| e.to == self.status)
            .map(|e| e.at)
            .or(Some(self.updated_at))
    }
}
