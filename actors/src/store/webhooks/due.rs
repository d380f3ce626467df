//! What a delivery worker takes of the store, as it reads it: an endpoint
//! whose org has events after its cursor, and an outbox row that is due.
//! Each is decoded once from its row, typed; a row that does not read is
//! `StoreError::Corrupt` naming it, an error the worker reports, never a
//! row it passes over.

use sqlx::FromRow;

use super::super::{rows, Result, StoreError};
use crate::domain::webhooks::{EventSet, Transition};
use crate::domain::{OrgId, WebhookId};

/// An endpoint whose org has events after its cursor, as a worker takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueLog {
    pub webhook_id: WebhookId,
    pub org_id: OrgId,
    /// The last event of the org the endpoint has been through.
    pub cursor: i64,
}

#[derive(FromRow)]
pub(super) struct DueLogRow {
    webhook_id: String,
    org_id: String,
    cursor: i64,
}

impl TryFrom<DueLogRow> for DueLog {
    type Error = StoreError;

    fn try_from(r: DueLogRow) -> Result<Self> {
        let naming = in_row(format!("webhook cursor {}", r.webhook_id));
        Ok(DueLog {
            webhook_id: rows::webhook_id(&r.webhook_id).map_err(&naming)?,
            org_id: rows::org_id(&r.org_id).map_err(&naming)?,
            cursor: r.cursor,
        })
    }
}

/// An outbox row that is due, as a worker reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueRow {
    pub outbox_id: i64,
    pub org_id: OrgId,
    pub webhook_id: WebhookId,
    /// The `webhook-id` of the first of `types`.
    pub event_id: String,
    pub types: EventSet,
    /// How many of `types` were delivered.
    pub sent: usize,
    pub task_key: String,
    /// `None` for `webhook.test`.
    pub transition: Option<Transition>,
    pub created_at: i64,
    /// Failed attempts at the `sent`-th type.
    pub attempts: i64,
}

#[derive(FromRow)]
pub(super) struct DueRowColumns {
    outbox_id: i64,
    org_id: String,
    webhook_id: String,
    event_id: String,
    types: String,
    sent: i64,
    task_key: String,
    from_status: Option<String>,
    to_status: Option<String>,
    agent_id: Option<String>,
    created_at: i64,
    attempts: i64,
}

impl TryFrom<DueRowColumns> for DueRow {
    type Error = StoreError;

    fn try_from(r: DueRowColumns) -> Result<Self> {
        let naming = in_row(format!("webhook outbox row {}", r.outbox_id));
        let transition = match &r.to_status {
            None => None,
            Some(to) => Some(Transition {
                from_status: r
                    .from_status
                    .as_deref()
                    .map(rows::status)
                    .transpose()
                    .map_err(&naming)?,
                to_status: rows::status(to).map_err(&naming)?,
                agent_id: r.agent_id.unwrap_or_default(),
            }),
        };
        Ok(DueRow {
            outbox_id: r.outbox_id,
            org_id: rows::org_id(&r.org_id).map_err(&naming)?,
            webhook_id: rows::webhook_id(&r.webhook_id).map_err(&naming)?,
            types: EventSet::parse(&r.types).map_err(|what| naming(StoreError::Corrupt(what)))?,
            sent: usize::try_from(r.sent)
                .map_err(|_| naming(StoreError::Corrupt(format!("sent {}", r.sent))))?,
            event_id: r.event_id,
            task_key: r.task_key,
            transition,
            created_at: r.created_at,
            attempts: r.attempts,
        })
    }
}

/// What a decode of the row `row` found corrupt, naming the row.
fn in_row(row: String) -> impl Fn(StoreError) -> StoreError {
    move |e| match e {
        StoreError::Corrupt(what) => StoreError::Corrupt(format!("{row}: {what}")),
        other => other,
    }
}
