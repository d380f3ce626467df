//! Webhooks in the store: the endpoints an org's actor loads, and what the
//! delivery worker reads and writes of the outbox and the delivery log.
//!
//! Outbox rows are inserted by the commit of the change that made them
//! (`WriteOp::InsertOutbox`); after that only a delivery worker changes
//! them, and what it writes (`WriteOp::SettleDeliveries`: rows delivered,
//! rows to retry, the attempts' log) goes through the group-commit writer
//! like any other write. On SQLite that keeps the one write lock and the
//! writer's page cache to the writer alone. On PostgreSQL, where several
//! nodes may deliver, a worker first takes due rows by moving their
//! `next_attempt_at` ahead in one conditional UPDATE
//! (`hold_webhook_events`), so of two workers only one takes a row, and a
//! worker that dies leaves its rows due again when the hold runs out.
//! SQLite has one server, whose worker keeps the rows it is delivering in
//! memory instead.

use sqlx::FromRow;

use super::{Arg, Result, Store, StoreError};
use crate::crypto::SealedSecret;
use crate::domain::webhooks::{Endpoint, Subscription};
use crate::domain::OrgId;

#[derive(FromRow)]
struct EndpointRow {
    webhook_id: String,
    url: String,
    events: String,
    description: Option<String>,
    active: i64,
    created_at: i64,
}

impl TryFrom<EndpointRow> for Endpoint {
    type Error = StoreError;

    fn try_from(r: EndpointRow) -> Result<Self> {
        let names: Vec<String> = serde_json::from_str(&r.events)
            .map_err(|e| StoreError::Corrupt(format!("webhook events: {e}")))?;
        Ok(Endpoint {
            subscription: Subscription::parse(&names).map_err(StoreError::Corrupt)?,
            webhook_id: r.webhook_id,
            url: r.url,
            description: r.description,
            active: r.active != 0,
            created_at: r.created_at,
        })
    }
}

/// An outbox row that is due, as a worker reads it.
#[derive(Debug, Clone, FromRow)]
pub struct DueEvent {
    pub outbox_id: i64,
    pub org_id: String,
    pub webhook_id: String,
    pub event_id: String,
    /// `EventSet::text`.
    pub types: String,
    /// How many of `types` were delivered.
    pub sent: i64,
    pub task_key: String,
    pub from_status: Option<String>,
    /// `None` for `webhook.test`.
    pub to_status: Option<String>,
    pub agent_id: Option<String>,
    pub created_at: i64,
    /// Failed attempts at the `sent`-th type.
    pub attempts: i64,
}

/// Where an endpoint's events go and the secrets that sign them.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub active: bool,
    pub secret: SealedSecret,
    /// The secret before the last rotation, while it still signs.
    pub previous: Option<(SealedSecret, i64)>,
}

#[derive(FromRow)]
struct TargetRow {
    url: String,
    active: i64,
    secret: Vec<u8>,
    secret_key_id: String,
    previous_secret: Option<Vec<u8>>,
    previous_secret_key_id: Option<String>,
    previous_until: Option<i64>,
}

/// One delivery attempt in the log.
#[derive(Debug, Clone, FromRow)]
pub struct DeliveryRecord {
    pub delivery_id: String,
    pub event_id: String,
    #[sqlx(rename = "type")]
    pub event_type: String,
    pub attempt: i64,
    pub status_code: Option<i64>,
    pub error: Option<String>,
    /// At most 1 KiB of the receiver's answer.
    pub response: Option<String>,
    pub at: i64,
    pub next_attempt_at: Option<i64>,
}

/// What becomes of an outbox row after a worker's turn at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterAttempt {
    /// Every type delivered, or never to be: the row goes.
    Done,
    /// `sent` types delivered; the next one is tried again at `at`, after
    /// `attempts` failed attempts at it.
    Retry { sent: i64, attempts: i64, at: i64 },
}

/// A worker's turn at one outbox row: what becomes of it and the attempts
/// it made, written by the group-commit writer.
#[derive(Debug, Clone)]
pub struct Settled {
    pub webhook_id: String,
    pub outbox_id: i64,
    pub after: AfterAttempt,
    pub log: Vec<DeliveryRecord>,
}

/// A stored secret that a rotation may have to re-seal: the endpoint, and
/// whether it is the previous secret.
pub type SecretSlot = (OrgId, String, bool, SealedSecret);

#[derive(FromRow)]
struct SecretRow {
    org_id: String,
    webhook_id: String,
    previous: i64,
    bytes: Vec<u8>,
    key_id: String,
}

/// The settled rows of a commit as the statements that write them read
/// them: JSON arrays of the log's rows, the ids to delete and the rows to
/// retry (`None` for an empty one, which writes nothing).
pub(super) struct SettleArgs {
    pub log: Option<String>,
    pub done: Option<String>,
    pub retry: Option<String>,
}

impl SettleArgs {
    pub(super) fn new(settled: &[(OrgId, &Settled)]) -> Self {
        let mut log = Vec::new();
        let mut done = Vec::new();
        let mut retry = Vec::new();
        for (org, s) in settled {
            for d in &s.log {
                log.push(serde_json::json!({
                    "delivery_id": d.delivery_id,
                    "org_id": org.to_string(),
                    "webhook_id": s.webhook_id,
                    "event_id": d.event_id,
                    "type": d.event_type,
                    "attempt": d.attempt,
                    "status_code": d.status_code,
                    "error": d.error,
                    "response": d.response,
                    "at": d.at,
                    "next_attempt_at": d.next_attempt_at,
                }));
            }
            match s.after {
                AfterAttempt::Done => done.push(serde_json::json!(s.outbox_id)),
                AfterAttempt::Retry { sent, attempts, at } => retry.push(serde_json::json!({
                    "outbox_id": s.outbox_id, "sent": sent, "attempts": attempts, "at": at,
                })),
            }
        }
        let text = |v: Vec<serde_json::Value>| {
            (!v.is_empty()).then(|| serde_json::Value::Array(v).to_string())
        };
        SettleArgs {
            log: text(log),
            done: text(done),
            retry: text(retry),
        }
    }
}

impl Store {
    /// The org's endpoints, for its actor.
    pub async fn org_webhooks(&self, org: OrgId) -> Result<Vec<Endpoint>> {
        let rows: Vec<EndpointRow> = self
            .org_rows(
                "SELECT webhook_id, url, events, description, active, created_at FROM webhooks \
                 WHERE org_id = $1 ORDER BY created_at, webhook_id",
                org,
            )
            .await?;
        super::records(rows)
    }

    /// Up to `limit` rows due at `now` and not in `skip`, at most
    /// `per_endpoint` of each endpoint, each the first of its endpoint's
    /// events of its task still in the outbox (events of a task go in
    /// order), soonest due first. It looks at a bounded number of due
    /// rows, however long the backlog.
    pub async fn due_webhook_events(
        &self,
        now: i64,
        limit: i64,
        per_endpoint: i64,
        skip: &[i64],
    ) -> Result<Vec<DueEvent>> {
        let skip = serde_json::to_string(skip).expect("ids serialize");
        let skipped = match self {
            Store::Sqlite(_) => "SELECT value FROM json_each($4)",
            Store::Postgres(..) => "SELECT value::int8 FROM json_array_elements_text($4::json)",
        };
        let sql = format!(
            "SELECT outbox_id, org_id, webhook_id, event_id, types, sent, task_key, from_status, \
             to_status, agent_id, created_at, attempts \
             FROM (SELECT d.*, ROW_NUMBER() OVER (PARTITION BY d.webhook_id \
               ORDER BY d.next_attempt_at, d.outbox_id) AS place \
             FROM (SELECT o.* FROM webhook_outbox o WHERE o.next_attempt_at <= $1 \
               AND o.outbox_id NOT IN ({skipped}) \
               AND NOT EXISTS (SELECT 1 FROM webhook_outbox p \
                 WHERE p.webhook_id = o.webhook_id \
                 AND p.task_key = o.task_key AND p.outbox_id < o.outbox_id) \
               ORDER BY o.next_attempt_at, o.outbox_id LIMIT 1000) d) ranked \
             WHERE place <= $3 ORDER BY next_attempt_at, outbox_id LIMIT $2"
        );
        self.fetch_all(
            &sql,
            vec![
                Arg::Int(now),
                Arg::Int(limit),
                Arg::Int(per_endpoint),
                Arg::Text(skip),
            ],
        )
        .await
    }

    /// Takes the rows of `ids` still due at `now` until `until`; answers
    /// those taken (another worker may have taken the rest).
    pub async fn hold_webhook_events(&self, ids: &[i64], now: i64, until: i64) -> Result<Vec<i64>> {
        let ids = serde_json::to_string(ids).expect("ids serialize");
        let sql = match self {
            Store::Sqlite(_) => {
                "UPDATE webhook_outbox SET next_attempt_at = $1 WHERE next_attempt_at <= $2 \
                 AND outbox_id IN (SELECT value FROM json_each($3)) RETURNING outbox_id"
            }
            Store::Postgres(..) => {
                "UPDATE webhook_outbox SET next_attempt_at = $1 WHERE next_attempt_at <= $2 \
                 AND outbox_id IN (SELECT value::int8 FROM json_array_elements_text($3::json)) \
                 RETURNING outbox_id"
            }
        };
        Ok(on_pool!(self, pool => {
            sqlx::query_scalar(sql)
                .bind(until)
                .bind(now)
                .bind(ids)
                .fetch_all(pool)
                .await?
        }))
    }

    /// An endpoint's address and secrets; `None` once it is deleted.
    pub async fn webhook_target(&self, org: OrgId, webhook: &str) -> Result<Option<Target>> {
        let row: Option<TargetRow> = self
            .fetch_optional(
                "SELECT url, active, secret, secret_key_id, previous_secret, \
                 previous_secret_key_id, previous_until FROM webhooks \
                 WHERE org_id = $1 AND webhook_id = $2",
                vec![Arg::Text(org.to_string()), Arg::Text(webhook.to_owned())],
            )
            .await?;
        Ok(row.map(|r| Target {
            url: r.url,
            active: r.active != 0,
            secret: SealedSecret {
                master_key_id: r.secret_key_id,
                bytes: r.secret,
            },
            previous: match (
                r.previous_secret,
                r.previous_secret_key_id,
                r.previous_until,
            ) {
                (Some(bytes), Some(master_key_id), Some(until)) => Some((
                    SealedSecret {
                        master_key_id,
                        bytes,
                    },
                    until,
                )),
                _ => None,
            },
        }))
    }

    /// The endpoint's latest `limit` attempts, newest first.
    pub async fn webhook_deliveries(
        &self,
        org: OrgId,
        webhook: &str,
        limit: i64,
    ) -> Result<Vec<DeliveryRecord>> {
        self.fetch_all(
            "SELECT delivery_id, event_id, type, attempt, status_code, error, response, at, \
             next_attempt_at FROM webhook_deliveries WHERE org_id = $1 AND webhook_id = $2 \
             ORDER BY at DESC, delivery_id DESC LIMIT $3",
            vec![
                Arg::Text(org.to_string()),
                Arg::Text(webhook.to_owned()),
                Arg::Int(limit),
            ],
        )
        .await
    }

    /// Forgets the attempts made before `before`.
    pub async fn prune_webhook_deliveries(&self, before: i64) -> Result<()> {
        on_pool!(self, pool => {
            sqlx::query("DELETE FROM webhook_deliveries WHERE at < $1")
                .bind(before)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Every stored secret sealed by a master key other than `current`.
    pub async fn webhook_secrets_not_under(&self, current: &str) -> Result<Vec<SecretSlot>> {
        let rows: Vec<SecretRow> = self
            .fetch_all(
                "SELECT org_id, webhook_id, CAST(0 AS BIGINT) AS previous, secret AS bytes, \
                 secret_key_id AS key_id FROM webhooks WHERE secret_key_id <> $1 \
                 UNION ALL SELECT org_id, webhook_id, CAST(1 AS BIGINT), previous_secret, \
                 previous_secret_key_id FROM webhooks WHERE previous_secret IS NOT NULL \
                 AND previous_secret_key_id <> $1",
                vec![Arg::Text(current.to_owned())],
            )
            .await?;
        rows.into_iter()
            .map(|r| {
                let org = super::rows::org_id(&r.org_id)?;
                let sealed = SealedSecret {
                    master_key_id: r.key_id,
                    bytes: r.bytes,
                };
                Ok((org, r.webhook_id, r.previous != 0, sealed))
            })
            .collect()
    }

    /// Replaces a stored secret's seal, if it is still `old`; `false` when
    /// something else changed it first (a rotation of the endpoint's
    /// secret).
    pub async fn reseal_webhook_secret(
        &self,
        (org, webhook, previous, old): &SecretSlot,
        new: &SealedSecret,
    ) -> Result<bool> {
        let sql = if *previous {
            "UPDATE webhooks SET previous_secret = $4, previous_secret_key_id = $5 \
             WHERE org_id = $1 AND webhook_id = $2 AND previous_secret = $3"
        } else {
            "UPDATE webhooks SET secret = $4, secret_key_id = $5 \
             WHERE org_id = $1 AND webhook_id = $2 AND secret = $3"
        };
        let done = on_pool!(self, pool => {
            sqlx::query(sql)
                .bind(org.to_string())
                .bind(webhook)
                .bind(&old.bytes)
                .bind(&new.bytes)
                .bind(&new.master_key_id)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(done == 1)
    }
}
