//! What is said of a change to the world outside: the body of every
//! webhook delivery (CONTRACT §7) and the `data` of every event of the
//! event stream (§10). Ids and statuses only, never a task's content, so
//! client-encrypted orgs get them too. A receiver can generate its type
//! from this schema (the OpenAPI document's `webhooks`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Timestamp;
use crate::domain::webhooks::EventType;
use crate::domain::TaskStatus;

/// What an event says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum EventKind {
    #[serde(rename = "task.created")]
    Created,
    #[serde(rename = "task.claimed")]
    Claimed,
    #[serde(rename = "task.completed")]
    Completed,
    #[serde(rename = "task.failed")]
    Failed,
    #[serde(rename = "task.canceled")]
    Canceled,
    #[serde(rename = "task.lease_expired")]
    LeaseExpired,
    #[serde(rename = "task.unblocked")]
    Unblocked,
    /// Every transition, creation included.
    #[serde(rename = "task.status_changed")]
    StatusChanged,
    /// `POST /webhooks/{webhook_id}/test`.
    #[serde(rename = "webhook.test")]
    Test,
}

impl From<EventType> for EventKind {
    fn from(t: EventType) -> Self {
        match t {
            EventType::Created => EventKind::Created,
            EventType::Claimed => EventKind::Claimed,
            EventType::Completed => EventKind::Completed,
            EventType::Failed => EventKind::Failed,
            EventType::Canceled => EventKind::Canceled,
            EventType::LeaseExpired => EventKind::LeaseExpired,
            EventType::Unblocked => EventKind::Unblocked,
            EventType::StatusChanged => EventKind::StatusChanged,
            EventType::Test => EventKind::Test,
        }
    }
}

/// A webhook delivery's body, and an event's `data` on the event stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EventBody {
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// When the change was made.
    pub timestamp: Timestamp,
    pub data: EventData,
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
    pub webhook_id: String,
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_body_is_the_contract_s_shape_and_reads_back() {
        let body = EventBody {
            kind: EventKind::Claimed,
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
        let ping = json!({"type": "webhook.test", "timestamp": "1970-01-01T00:00:00.000Z",
                          "data": {"org_id": "org", "webhook_id": "wh"}});
        let read: EventBody = serde_json::from_value(ping).unwrap();
        assert!(
            matches!(read.data, EventData::Test(WebhookPing { ref webhook_id, .. }) if webhook_id == "wh")
        );
    }
}
