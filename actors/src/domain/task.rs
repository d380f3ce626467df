//! Task records as the engine holds and stores them.

use serde_json::{Map, Value};
use uuid::Uuid;

use super::{TaskId, TaskStatus};

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

/// One state event as stored (note sealed).
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub task_id: TaskId,
    pub from_status: Option<TaskStatus>,
    pub to_status: TaskStatus,
    pub agent_id: String,
    pub at: i64,
    pub note: Option<Vec<u8>>,
}

/// A create item's blocker: an existing task or another item of the same call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockerRef {
    Task(TaskId),
    Ref(String),
}

/// A validated create item.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTask {
    pub task_id: Option<TaskId>,
    pub reference: Option<String>,
    pub title: Value,
    pub description: Option<Value>,
    pub parent: Option<TaskId>,
    pub assignee: Option<String>,
    pub priority: u8,
    /// `None`: the key was absent, so the org's default tags apply.
    pub tags: Option<Vec<String>>,
    pub metadata: Option<Value>,
    pub blocked_by: Vec<BlockerRef>,
}

/// A validated update item. `Option<Option<_>>` tells "absent" from "null".
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskUpdate {
    pub task_id: Option<TaskId>,
    pub status: Option<TaskStatus>,
    pub title: Option<Value>,
    pub description: Option<Option<Value>>,
    pub note: Option<String>,
    pub output: Option<Value>,
    pub assignee: Option<Option<String>>,
    pub priority: Option<u8>,
    pub blocked_by: Option<Vec<TaskId>>,
    pub tags: Option<Vec<String>>,
    pub metadata: Option<Map<String, Value>>,
    pub agent_id: Option<String>,
    pub lease_id: Option<Uuid>,
}

/// A validated claim request.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimRequest {
    pub tags: Vec<String>,
    pub lease_seconds: u32,
    pub include_context: bool,
}

/// A validated `GET /tasks` query.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ListQuery {
    pub statuses: Vec<TaskStatus>,
    pub parent: Option<TaskId>,
    pub assignee: Option<String>,
    pub tags: Vec<String>,
    pub priority_max: Option<u8>,
    pub limit: u32,
    pub cursor: Option<String>,
    pub full: bool,
}
