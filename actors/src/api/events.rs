//! What is said of a change to the world outside: the body of every
//! webhook delivery (CONTRACT §7) and the `data` of every event of the
//! event stream (§10), with what a watcher asks: the stream's query and a
//! wait for tasks. Ids and statuses only, never a task's content, so
//! client-encrypted orgs get them too. A receiver can generate its type
//! from this schema (the OpenAPI document's `webhooks`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::decode::{dedup, Result};
use super::Timestamp;
use super::MAX_WAIT_SECONDS;
pub use crate::domain::watch::WaitUntil;
pub use crate::domain::webhooks::EventType;
use crate::domain::webhooks::Transition;
use crate::domain::{OrgId, TaskId, TaskStatus, WebhookId};

/// A webhook delivery's body, and an event's `data` on the event stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EventBody {
    #[serde(rename = "type")]
    pub kind: EventType,
    /// When the change was made.
    pub timestamp: Timestamp,
    pub data: EventData,
}

impl EventBody {
    /// The body of a task's transition as an event of type `kind` tells
    /// it, on the stream and in every webhook delivery alike.
    pub fn transition(
        kind: EventType,
        org: OrgId,
        task_id: &str,
        change: &Transition,
        at: i64,
    ) -> Self {
        EventBody {
            kind,
            timestamp: Timestamp(at),
            data: EventData::Transition(TransitionData {
                org_id: org.to_string(),
                task_id: task_id.to_owned(),
                from_status: change.from_status,
                to_status: change.to_status,
                agent_id: change.agent_id.clone(),
            }),
        }
    }

    /// The body of a `webhook.test` event sent to `webhook_id`.
    pub fn test(org: OrgId, webhook_id: WebhookId, at: i64) -> Self {
        EventBody {
            kind: EventType::Test,
            timestamp: Timestamp(at),
            data: EventData::Test(WebhookPing {
                org_id: org.to_string(),
                webhook_id,
            }),
        }
    }

    /// As it is sent: compact JSON on one line (line breaks inside strings
    /// are escaped), the same bytes on every attempt.
    pub fn render(&self) -> String {
        serde_json::to_string(self).expect("an event body of plain data serializes")
    }
}

/// What changed: a task's transition, or (for `webhook.test`) the endpoint
/// tested.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum EventData {
    Transition(TransitionData),
    Test(WebhookPing),
}

/// A task's transition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TransitionData {
    pub org_id: String,
    pub task_id: String,
    /// `null` for a creation.
    pub from_status: Option<TaskStatus>,
    pub to_status: TaskStatus,
    /// Who made the change: the key's name, the member's email, or
    /// `system` (unblocking, cascades, lease expiry, schedules).
    pub agent_id: String,
}

/// The endpoint a `webhook.test` event was sent to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookPing {
    pub org_id: String,
    pub webhook_id: WebhookId,
}

/// `GET /events`: which events, and from where. `Last-Event-ID`, when
/// sent, wins over `since`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WatchEvents {
    /// Event types to keep, comma-separated (§7's names; default all).
    #[serde(default)]
    pub types: Option<String>,
    /// Task ids to keep, comma-separated, up to 100 (default all).
    #[serde(default)]
    pub task_id: Option<String>,
    /// Replay every event after this id that history still holds, then go
    /// on live.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub since: Option<i64>,
}

impl super::Decode for WatchEvents {}

/// `POST /tasks/wait`: until all (or any) of 1 to 25 tasks are finished.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitTasks {
    #[schemars(length(min = 1, max = 25))]
    pub task_ids: Vec<TaskId>,
    /// `all` (default): answer when every task found is finished; `any`:
    /// when one is.
    #[serde(default)]
    pub until: WaitUntil,
    /// How long to wait before answering `done: false` (default 30).
    #[serde(default = "default_wait_seconds")]
    #[schemars(range(min = 0, max = 30))]
    pub wait_seconds: u32,
}

fn default_wait_seconds() -> u32 {
    MAX_WAIT_SECONDS
}

impl super::Decode for WaitTasks {
    fn validate(&mut self) -> Result<()> {
        dedup(&mut self.task_ids);
        Ok(())
    }
}

/// `POST /tasks/wait` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WaitAnswer {
    /// Whether all (or any) of the tasks found are finished.
    pub done: bool,
    /// The tasks found, in the order asked.
    pub tasks: Vec<WaitedTask>,
    /// The ids of no task of the org.
    pub not_found: Vec<TaskId>,
}

/// Where a waited-for task stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WaitedTask {
    pub task_id: TaskId,
    pub status: TaskStatus,
    pub updated_at: Timestamp,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_body_is_the_contract_s_shape_and_reads_back() {
        let body = EventBody {
            kind: EventType::Claimed,
            timestamp: Timestamp(0),
            data: EventData::Transition(TransitionData {
                org_id: "org".into(),
                task_id: "task".into(),
                from_status: Some(TaskStatus::Pending),
                to_status: TaskStatus::InProgress,
                agent_id: "bot".into(),
            }),
        };
        let value = serde_json::to_value(&body).unwrap();
        assert_eq!(
            value,
            json!({"type": "task.claimed", "timestamp": "1970-01-01T00:00:00.000Z",
                   "data": {"org_id": "org", "task_id": "task", "from_status": "pending",
                            "to_status": "in_progress", "agent_id": "bot"}})
        );
        assert_eq!(serde_json::from_value::<EventBody>(value).unwrap(), body);
        let webhook = WebhookId::new_v7();
        let ping = json!({"type": "webhook.test", "timestamp": "1970-01-01T00:00:00.000Z",
                          "data": {"org_id": "org", "webhook_id": webhook.to_string()}});
        let read: EventBody = serde_json::from_value(ping).unwrap();
        assert!(
            matches!(read.data, EventData::Test(WebhookPing { webhook_id, .. }) if webhook_id == webhook)
        );
    }
}
