//! Sending one event to one endpoint: each of its types not yet delivered,
//! one after another, with the contract's body and the Standard Webhooks
//! signature, until one fails; and what becomes of the event then (the
//! retry schedule of `domain::webhooks`).

use rand::Rng;

use super::Worker;
use crate::api::EventBody;
use crate::domain::webhooks::{
    log_message_id, message_id, next_attempt, signature_header, EventSet, EventType, Transition,
};
use crate::domain::{OrgId, WebhookId};
use crate::store::{AfterAttempt, DeliveryRecord, DueRow, LoggedEvent, NewRow, Target};
use crate::webhook_sender::{Delivery, Sent};

/// One event as a worker delivers it to one endpoint, from the log or from
/// an outbox row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    /// The `webhook-id` of the first of `types`.
    pub event_id: String,
    pub types: EventSet,
    /// How many of `types` were delivered.
    pub sent: usize,
    /// Failed attempts at the `sent`-th type.
    pub attempts: i64,
    /// Orders an endpoint's events: those of one task are delivered in
    /// order (the task's id; a test event's own id).
    pub task_key: String,
    /// `None` for `webhook.test`.
    pub change: Option<Transition>,
    pub created_at: i64,
}

impl Entry {
    /// A logged event as `types` (those of it the endpoint takes).
    pub(super) fn logged(event: &LoggedEvent, types: EventSet) -> Self {
        Entry {
            event_id: log_message_id(event.event_id),
            types,
            sent: 0,
            attempts: 0,
            task_key: event.task_id.to_string(),
            change: Some(event.transition.clone()),
            created_at: event.at,
        }
    }

    /// An outbox row.
    pub(super) fn row(row: &DueRow) -> Self {
        Entry {
            event_id: row.event_id.clone(),
            types: row.types,
            sent: row.sent,
            attempts: row.attempts,
            task_key: row.task_key.clone(),
            change: row.transition.clone(),
            created_at: row.created_at,
        }
    }

    /// The outbox row this entry becomes, due at `at`.
    pub(super) fn into_row(self, at: i64) -> NewRow {
        let change = self.change.as_ref();
        NewRow {
            event_id: self.event_id,
            types: self.types.text(),
            sent: self.sent as i64,
            task_key: self.task_key,
            from_status: change
                .and_then(|c| c.from_status)
                .map(|s| s.as_str().to_owned()),
            to_status: change.map(|c| c.to_status.as_str().to_owned()),
            agent_id: change.map(|c| c.agent_id.clone()),
            created_at: self.created_at,
            attempts: self.attempts,
            next_attempt_at: at,
        }
    }

    /// A delivery's body: the event's type and time and the ids and
    /// statuses of the change, never the task's content. Written from the
    /// entry alone, so every attempt sends the same bytes.
    pub(super) fn body(&self, org: OrgId, webhook_id: WebhookId, event: EventType) -> String {
        match &self.change {
            None => EventBody::test(org, webhook_id, self.created_at),
            Some(change) => {
                EventBody::transition(event, org, &self.task_key, change, self.created_at)
            }
        }
        .render()
    }
}

/// What came of delivering one entry: what becomes of it, the attempts it
/// took, and whether the endpoint is to get nothing more (it answered 410,
/// or the event ran out of retries).
pub(super) struct Delivered {
    pub after: AfterAttempt,
    pub log: Vec<DeliveryRecord>,
    pub disable: bool,
}

impl Worker {
    /// Sends the entry's types from the first not yet delivered.
    pub(super) async fn deliver(
        &self,
        org: OrgId,
        webhook_id: WebhookId,
        target: &Target,
        entry: &Entry,
    ) -> Delivered {
        let mut log = Vec::new();
        let mut attempts = entry.attempts;
        for (index, event) in entry.types.iter().enumerate().skip(entry.sent) {
            let event_id = message_id(&entry.event_id, index);
            let body = entry.body(org, webhook_id, event);
            let sent = match self.sign(org, webhook_id, target, &event_id, &body) {
                Ok((timestamp, signature)) => {
                    let headers = [
                        ("webhook-id", event_id.clone()),
                        ("webhook-timestamp", timestamp.to_string()),
                        ("webhook-signature", signature),
                    ];
                    self.sender
                        .send(Delivery {
                            url: &target.url,
                            headers,
                            body: &body,
                        })
                        .await
                }
                Err(e) => Sent {
                    error: Some(e),
                    ..Sent::default()
                },
            };
            let at = self.engine.now();
            let attempt = attempts + 1;
            let gone = sent.status == Some(410);
            let next = (!sent.succeeded() && !gone)
                .then(|| {
                    let jitter = rand::thread_rng().gen_range(-1.0..=1.0);
                    let failed = u32::try_from(attempt).unwrap_or(u32::MAX);
                    next_attempt(failed, entry.created_at, at, jitter, sent.retry_after)
                })
                .flatten();
            let succeeded = sent.succeeded();
            let error = match (sent.status, sent.error) {
                (_, Some(e)) => Some(e),
                (Some(s), None) if !succeeded => Some(format!("the receiver answered {s}")),
                _ => None,
            };
            log.push(DeliveryRecord {
                delivery_id: uuid::Uuid::now_v7().to_string(),
                event_id,
                event_type: event.as_str().to_owned(),
                attempt,
                status_code: sent.status.map(i64::from),
                error,
                response: (!sent.response.is_empty()).then_some(sent.response),
                at,
                next_attempt_at: next,
            });
            if succeeded {
                attempts = 0;
                continue;
            }
            let after = match next {
                Some(at) => AfterAttempt::Retry {
                    sent: index as i64,
                    attempts: attempt,
                    at,
                },
                None => AfterAttempt::Done,
            };
            return Delivered {
                after,
                log,
                disable: next.is_none(),
            };
        }
        Delivered {
            after: AfterAttempt::Done,
            log,
            disable: false,
        }
    }

    /// The `webhook-timestamp` and `webhook-signature` of one delivery:
    /// one signature per secret in use (two while a rotated-out one still
    /// signs).
    fn sign(
        &self,
        org: OrgId,
        webhook_id: WebhookId,
        target: &Target,
        event_id: &str,
        body: &str,
    ) -> Result<(i64, String), String> {
        let now = self.engine.now();
        let keyring = self.engine.inner.directory.keyring();
        let opened = |sealed| {
            keyring
                .open_webhook_secret(org, webhook_id, sealed)
                .map_err(|e| format!("the endpoint's secret does not open: {e}"))
        };
        let mut secrets = vec![opened(&target.secret)?];
        if let Some((previous, until)) = &target.previous {
            if *until > now {
                secrets.push(opened(previous)?);
            }
        }
        let timestamp = now / 1000;
        let signature = signature_header(
            secrets.iter().map(Vec::as_slice),
            event_id,
            timestamp,
            body.as_bytes(),
        );
        Ok((timestamp, signature))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::TaskStatus;

    const TASK: &str = "0190a0c2-7f3e-7c1a-9b2d-3e4f5a6b7c8d";

    fn logged() -> LoggedEvent {
        LoggedEvent {
            event_id: 42,
            task_id: TASK.parse().unwrap(),
            transition: Transition {
                from_status: Some(TaskStatus::Pending),
                to_status: TaskStatus::InProgress,
                agent_id: "bot".into(),
            },
            at: 0,
            lease_expired: false,
        }
    }

    #[test]
    fn bodies_carry_ids_and_statuses_and_a_test_event_its_endpoint() {
        let (org, webhook) = (OrgId::new_v7(), WebhookId::new_v7());
        let mut types = EventSet::default();
        types.insert(EventType::Claimed);
        let entry = Entry::logged(&logged(), types);
        assert_eq!(entry.event_id, "evt_42");
        let change: serde_json::Value =
            serde_json::from_str(&entry.body(org, webhook, EventType::Claimed)).unwrap();
        assert_eq!(
            change,
            json!({"type": "task.claimed", "timestamp": "1970-01-01T00:00:00.000Z",
                   "data": {"org_id": org.to_string(), "task_id": TASK,
                            "from_status": "pending", "to_status": "in_progress",
                            "agent_id": "bot"}})
        );
        let ping = Entry {
            change: None,
            ..entry
        };
        let ping: serde_json::Value =
            serde_json::from_str(&ping.body(org, webhook, EventType::Test)).unwrap();
        assert_eq!(
            ping["data"],
            json!({"org_id": org.to_string(), "webhook_id": webhook.to_string()})
        );
    }

    #[test]
    fn an_entry_that_waits_keeps_what_was_delivered_and_tried() {
        let mut types = EventSet::default();
        types.insert(EventType::Claimed);
        types.insert(EventType::StatusChanged);
        let entry = Entry {
            sent: 1,
            attempts: 2,
            ..Entry::logged(&logged(), types)
        };
        let row = entry.clone().into_row(77);
        assert_eq!(row.types, "task.claimed task.status_changed");
        assert_eq!((row.sent, row.attempts, row.next_attempt_at), (1, 2, 77));
        let due = DueRow {
            outbox_id: 9,
            org_id: OrgId::new_v7(),
            webhook_id: WebhookId::new_v7(),
            event_id: row.event_id,
            types: EventSet::parse(&row.types).unwrap(),
            sent: usize::try_from(row.sent).unwrap(),
            task_key: row.task_key,
            transition: Some(Transition {
                from_status: row.from_status.as_deref().and_then(TaskStatus::parse),
                to_status: TaskStatus::parse(row.to_status.as_deref().unwrap()).unwrap(),
                agent_id: row.agent_id.unwrap(),
            }),
            created_at: row.created_at,
            attempts: row.attempts,
        };
        assert_eq!(Entry::row(&due), entry);
    }
}
