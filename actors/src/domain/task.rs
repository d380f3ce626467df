//! Task records as the engine holds and stores them.

use uuid::Uuid;

use super::retry::RetryPolicy;
use super::{ScheduleId, TaskId, TaskStatus};

/// A claim's time-limited hold on a task. `lease_id` fences late writers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub lease_id: Uuid,
    pub expires_at: i64,
    pub seconds: u32,
}

/// What an org actor keeps in memory for each open task: ids, ordering keys,
/// tags and links; never content (titles, bodies, outputs stay in the store).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskHeader {
    pub task_id: TaskId,
    pub status: TaskStatus,
    pub priority: u8,
    pub created_at: i64,
    pub updated_at: i64,
    pub assignee: Option<String>,
    pub tags: Vec<String>,
    pub blocked_by: Vec<TaskId>,
    pub parent: Option<TaskId>,
    pub lease: Option<Lease>,
    /// Leases that ran out since the task was created or last retried.
    pub attempts: u8,
    /// The attempts after which an expiry fails the task.
    pub max_attempts: u8,
    /// When it may be claimed: a `pending` task before then is waiting.
    pub run_at: Option<i64>,
    /// What a failure does while retries are left, and the retries so far.
    pub retry: Option<RetryPolicy>,
    pub retries: u8,
    /// The schedule tick that made it; set once, at creation.
    pub scheduled: Option<Scheduled>,
}

/// The schedule and tick a task was created for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheduled {
    pub schedule_id: ScheduleId,
    pub scheduled_for: i64,
}

/// The encrypted-at-rest fields of a task, named as in the associated data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentField {
    Title,
    Description,
    Metadata,
    Output,
    Note,
}

impl ContentField {
    pub fn name(self) -> &'static str {
        match self {
            ContentField::Title => "title",
            ContentField::Description => "description",
            ContentField::Metadata => "metadata",
            ContentField::Output => "output",
            ContentField::Note => "note",
        }
    }
}

/// A task row as stored: header plus sealed content.
#[derive(Debug, Clone)]
pub struct StoredTask {
    pub header: TaskHeader,
    pub title: Vec<u8>,
    pub description: Option<Vec<u8>>,
    pub metadata: Option<Vec<u8>>,
    pub output: Option<Vec<u8>>,
}

impl StoredTask {
    /// Bytes of sealed content: about what serving the task costs.
    pub fn content_len(&self) -> usize {
        let len = |c: &Option<Vec<u8>>| c.as_ref().map_or(0, Vec::len);
        self.title.len() + len(&self.description) + len(&self.metadata) + len(&self.output)
    }
}

/// One state event as stored (note sealed).
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub task_id: TaskId,
    pub from_status: Option<TaskStatus>,
    pub to_status: TaskStatus,
    pub agent_id: String,
    pub at: i64,
    pub note: Option<Vec<u8>>,
    /// Made by a lease's expiry: the statuses alone do not say so, and
    /// its webhook and stream event is `task.lease_expired`.
    pub lease_expired: bool,
}
