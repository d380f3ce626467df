//! Task answers: what create, update, get, list and claim return.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use uuid::Uuid;

use super::{Object, Text, Timestamp};
use crate::domain::{ScheduleId, TaskId, TaskStatus};

/// `POST /tasks` answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CreateAnswer {
    pub created: usize,
    pub results: Vec<CreatedItem>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CreatedItem {
    #[serde(rename = "ref")]
    pub reference: Option<String>,
    pub task_id: TaskId,
    /// `pending`, or `blocked` while a blocker is live.
    pub status: TaskStatus,
    pub created_at: Timestamp,
    /// Open tasks that say nearly the same (score 0.9 or more), best
    /// first; absent when there are none or they could not be found in
    /// time (managed orgs with an embedder only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub similar_open_tasks: Option<Vec<SimilarTask>>,
    /// Tags of the nearest tasks that this one lacks, from the vocabulary;
    /// advisory (managed orgs with an embedder only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggested_tags: Option<Vec<String>>,
}

/// An open task close in meaning to a new one.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SimilarTask {
    pub task_id: TaskId,
    pub title: Text,
    /// Cosine similarity, in [-1, 1].
    pub score: f32,
}

/// `POST /tasks/update` answer; `partial` (HTTP 207) when any item failed.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct UpdateAnswer {
    /// How many items applied.
    pub updated: usize,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    pub results: Vec<UpdateResult>,
}

impl UpdateAnswer {
    pub fn new(results: Vec<UpdateResult>) -> Self {
        let updated = results
            .iter()
            .filter(|r| matches!(r, UpdateResult::Applied { .. }))
            .count();
        Self {
            updated,
            partial: updated < results.len(),
            results,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum UpdateResult {
    Applied {
        task_id: TaskId,
        status: TaskStatus,
        updated_at: Timestamp,
    },
    Failed {
        task_id: TaskId,
        error: ItemError,
    },
}

/// Why one update item failed (the strings are fixed by the contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ItemError {
    #[serde(rename = "Invalid status transition")]
    InvalidTransition,
    #[serde(rename = "assignee required")]
    AssigneeRequired,
    #[serde(rename = "lease lost")]
    LeaseLost,
    #[serde(rename = "task not found")]
    TaskNotFound,
}

impl ItemError {
    pub const ALL: [ItemError; 4] = [
        ItemError::InvalidTransition,
        ItemError::AssigneeRequired,
        ItemError::LeaseLost,
        ItemError::TaskNotFound,
    ];

    /// The text the answer carries.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemError::InvalidTransition => "Invalid status transition",
            ItemError::AssigneeRequired => "assignee required",
            ItemError::LeaseLost => "lease lost",
            ItemError::TaskNotFound => "task not found",
        }
    }
}

/// A task as clients see it, content opened.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskView {
    pub task_id: TaskId,
    pub title: Text,
    pub description: Option<Text>,
    pub status: TaskStatus,
    pub priority: u8,
    pub assignee: Option<String>,
    pub tags: Vec<String>,
    /// `{}` when none was set.
    pub metadata: Object,
    pub output: Option<Object>,
    pub blocked_by: Vec<TaskId>,
    pub parent_task_id: Option<TaskId>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// Leases that ran out since the task was created or last retried.
    pub attempts: u8,
    /// The attempts after which an expiry fails the task.
    pub max_attempts: u8,
    /// While the task is leased.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseTerms>,
    /// When it may be claimed: a pending task before then is waiting.
    pub run_at: Option<Timestamp>,
    /// What a failure does while retries are left, if it was created with
    /// a policy.
    pub retry: Option<RetryPolicyView>,
    /// Failures retried so far.
    pub retries: u8,
    /// The schedule whose tick created it.
    pub schedule_id: Option<ScheduleId>,
    /// That tick's time.
    pub scheduled_for: Option<Timestamp>,
}

/// A task's retry policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RetryPolicyView {
    pub max_retries: u8,
    pub backoff_seconds: u32,
    pub max_backoff_seconds: u32,
}

/// When a leased task's lease runs out, and its length.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
pub struct LeaseTerms {
    pub lease_expires_at: Timestamp,
    pub lease_seconds: u32,
}

/// A state event of a task's history.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskEvent {
    /// `null` for the creation event.
    pub from_status: Option<TaskStatus>,
    pub to_status: TaskStatus,
    pub agent_id: String,
    pub timestamp: Timestamp,
    pub note: Option<Text>,
}

/// A blocker's status, as a dependency of the task that waits on it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Dependency {
    pub task_id: TaskId,
    pub status: TaskStatus,
}

/// A task from `POST /tasks/get`: with its dependencies, and its history
/// when it was the only id asked for.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskDetail {
    #[serde(flatten)]
    pub task: TaskView,
    pub dependencies: Vec<Dependency>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<TaskEvent>>,
}

/// `POST /tasks/get` answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct GetAnswer {
    pub tasks: Vec<TaskDetail>,
    pub count: usize,
    pub not_found: Vec<TaskId>,
}

/// The lean list item: unset fields are left out.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskSummary {
    pub task_id: TaskId,
    pub title: Text,
    pub status: TaskStatus,
    pub priority: u8,
    pub updated_at: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assignee: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_by: Vec<TaskId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_task_id: Option<TaskId>,
    /// While it is waiting: when it may be claimed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_at: Option<Timestamp>,
}

/// A list item: lean, or the whole task with `full=true`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ListedTask {
    Lean(TaskSummary),
    Full(Box<TaskView>),
}

/// Read whole first: every whole task also has the lean item's fields, so
/// the other order would read every whole task as a lean one.
impl<'de> Deserialize<'de> for ListedTask {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            Full(Box<TaskView>),
            Lean(TaskSummary),
        }
        Ok(match Wire::deserialize(d)? {
            Wire::Full(task) => ListedTask::Full(task),
            Wire::Lean(task) => ListedTask::Lean(task),
        })
    }
}

/// `GET /tasks` answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ListAnswer {
    pub tasks: Vec<ListedTask>,
    /// Pass as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// A claimed task: the task with its lease, and the briefing context.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ClaimedTask {
    #[serde(flatten)]
    pub task: TaskView,
    /// Fences this claim: send it with updates, which fail with `lease lost`
    /// once the lease is no longer this one.
    pub lease_id: Uuid,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<ClaimContext>,
}

/// `POST /tasks/claim` with `count`: the tasks claimed (possibly none).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ClaimedTasks {
    pub tasks: Vec<ClaimedTask>,
}

/// The answer to a claim: without `count`, the task or `null`; with it,
/// `{tasks: [...]}`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ClaimAnswer {
    One(Option<Box<ClaimedTask>>),
    Batch(ClaimedTasks),
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ClaimContext {
    /// The parent, its parent, and so on (up to three).
    pub parent_chain: Vec<ParentLink>,
    pub blockers: Vec<BlockerLink>,
    /// Completed tasks close in meaning, with their output, best first;
    /// best effort (paid tiers, managed orgs with an embedder).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prior_art: Option<Vec<PriorArt>>,
    /// The runbook that best fits the task; best effort (pro and
    /// enterprise managed orgs, once runbooks are distilled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runbook: Option<RunbookContext>,
}

/// A runbook distilled from the org's completed work.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RunbookContext {
    pub topic: String,
    pub body: String,
    /// How well it fits: cosine similarity, or the share of shared terms
    /// without vectors.
    pub score: f32,
}

/// A completed task close in meaning to the claimed one.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PriorArt {
    pub task_id: TaskId,
    pub title: Text,
    pub output: Option<Object>,
    /// Cosine similarity, in [-1, 1].
    pub score: f32,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ParentLink {
    pub task_id: TaskId,
    pub title: Text,
    pub description: Option<Text>,
    pub status: TaskStatus,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct BlockerLink {
    pub task_id: TaskId,
    pub title: Text,
    pub status: TaskStatus,
    pub output: Option<Object>,
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;
    use serde_json::{json, Value};

    use super::*;

    /// `value` written, read back and written again: what was read, and
    /// whether the second writing is the first.
    fn read_back<T: Serialize + DeserializeOwned>(value: &T) -> (T, Value, Value) {
        let written = serde_json::to_value(value).unwrap();
        let read: T = serde_json::from_value(written.clone()).unwrap();
        let again = serde_json::to_value(&read).unwrap();
        (read, written, again)
    }

    fn task(lease: Option<LeaseTerms>) -> TaskView {
        TaskView {
            task_id: TaskId(Uuid::now_v7()),
            title: Text::Plain("t".into()),
            description: Some(Text::Envelope(Object::from_iter([(
                "__service_enc__".to_owned(),
                json!({"v": 1}),
            )]))),
            status: TaskStatus::InProgress,
            priority: 2,
            assignee: Some("agent".into()),
            tags: vec!["a".into()],
            metadata: Object::new(),
            output: None,
            blocked_by: vec![TaskId(Uuid::now_v7())],
            parent_task_id: None,
            created_at: Timestamp(1_700_000_000_000),
            updated_at: Timestamp(1_700_000_000_500),
            attempts: 1,
            max_attempts: 3,
            lease,
            run_at: Some(Timestamp(1_700_000_200_000)),
            retry: Some(RetryPolicyView {
                max_retries: 3,
                backoff_seconds: 10,
                max_backoff_seconds: 600,
            }),
            retries: 1,
            schedule_id: Some(ScheduleId::new_v7()),
            scheduled_for: Some(Timestamp(1_700_000_000_000)),
        }
    }

    #[test]
    fn list_items_read_back_as_the_kind_they_were() {
        let lease = LeaseTerms {
            lease_expires_at: Timestamp(1_700_000_100_000),
            lease_seconds: 100,
        };
        let lean = TaskSummary {
            task_id: TaskId(Uuid::now_v7()),
            title: Text::Plain("lean".into()),
            status: TaskStatus::Pending,
            priority: 3,
            updated_at: Timestamp(1_700_000_000_000),
            assignee: None,
            tags: Vec::new(),
            blocked_by: Vec::new(),
            parent_task_id: None,
            run_at: None,
        };
        let list = ListAnswer {
            tasks: vec![
                ListedTask::Full(Box::new(task(Some(lease)))),
                ListedTask::Full(Box::new(task(None))),
                ListedTask::Lean(lean),
            ],
            next_cursor: Some("c".into()),
        };
        let (read, written, again) = read_back(&list);
        assert_eq!(written, again);
        let kinds: Vec<bool> = read
            .tasks
            .iter()
            .map(|t| matches!(t, ListedTask::Full(_)))
            .collect();
        assert_eq!(kinds, [true, true, false]);
        match &read.tasks[0] {
            ListedTask::Full(t) => assert_eq!(t.lease.map(|l| l.lease_seconds), Some(100)),
            ListedTask::Lean(_) => unreachable!("read as whole above"),
        }
    }

    #[test]
    fn task_details_and_update_results_read_back() {
        let detail = GetAnswer {
            tasks: vec![TaskDetail {
                task: task(None),
                dependencies: vec![Dependency {
                    task_id: TaskId(Uuid::now_v7()),
                    status: TaskStatus::Blocked,
                }],
                history: Some(vec![TaskEvent {
                    from_status: None,
                    to_status: TaskStatus::Pending,
                    agent_id: "a".into(),
                    timestamp: Timestamp(1),
                    note: Some(Text::Plain("n".into())),
                }]),
            }],
            count: 1,
            not_found: vec![TaskId(Uuid::now_v7())],
        };
        let (_, written, again) = read_back(&detail);
        assert_eq!(written, again);

        let update = UpdateAnswer::new(vec![
            UpdateResult::Applied {
                task_id: TaskId(Uuid::now_v7()),
                status: TaskStatus::Completed,
                updated_at: Timestamp(2),
            },
            UpdateResult::Failed {
                task_id: TaskId(Uuid::now_v7()),
                error: ItemError::TaskNotFound,
            },
        ]);
        let (read, written, again) = read_back(&update);
        assert_eq!(written, again);
        assert!(read.partial);
        assert!(matches!(
            read.results[1],
            UpdateResult::Failed {
                error: ItemError::TaskNotFound,
                ..
            }
        ));
        // Whole, `partial` is left out and reads as false.
        let whole: UpdateAnswer =
            serde_json::from_value(json!({"updated": 0, "results": []})).unwrap();
        assert!(!whole.partial);
    }

    #[test]
    fn item_errors_say_what_they_write() {
        for error in ItemError::ALL {
            assert_eq!(serde_json::to_value(error).unwrap(), error.as_str());
        }
    }

    #[test]
    fn wire_names_follow_the_contract() {
        let failed = UpdateResult::Failed {
            task_id: TaskId(Uuid::nil()),
            error: ItemError::InvalidTransition,
        };
        assert_eq!(
            serde_json::to_value(failed).unwrap()["error"],
            "Invalid status transition"
        );
        assert_eq!(
            serde_json::to_value(TaskStatus::InProgress).unwrap(),
            "in_progress"
        );
    }
}
