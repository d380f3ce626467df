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
//!
//! A commit writes the changes it made for an endpoint as one pack (see
//! migration `0022_outbox_packs`), not a row each: a claim's commit then
//! carries a share of one row per endpoint, not two rows with their index
//! entries. An endpoint's packs are delivered in order, one at a time;
//! only an entry that fails, or that must wait behind its task's earlier
//! event, becomes a row of its own.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use sqlx::FromRow;

use super::{Arg, Result, Store, StoreError};
use crate::crypto::SealedSecret;
use crate::domain::webhooks::{Endpoint, OutboxEvent, Subscription};
use crate::domain::OrgId;

/// Changes in one pack at most: a commit with more for one endpoint
/// writes several.
pub const PACK_ENTRIES: usize = 256;

/// A pack a commit writes: one endpoint's changes, in commit order.
pub(super) struct NewPack {
    pub org: OrgId,
    pub webhook_id: String,
    /// A JSON array of [`PackEntry`].
    pub entries: String,
}

/// One change in a pack's JSON: `[event_id, types, task_key, from_status,
/// to_status, agent_id, created_at]`, the columns of an outbox row.
#[derive(Serialize, Deserialize)]
struct PackEntry(
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
);

/// The packs of a commit's webhook events: each endpoint's, in order, at
/// most [`PACK_ENTRIES`] a pack.
pub(super) fn outbox_packs(outbox: &[(OrgId, &OutboxEvent)]) -> Vec<NewPack> {
    let mut groups: Vec<(OrgId, &str, Vec<&OutboxEvent>)> = Vec::new();
    for (org, e) in outbox {
        match groups
            .iter_mut()
            .find(|(o, w, _)| o == org && *w == e.webhook_id)
        {
            Some((_, _, events)) => events.push(e),
            None => groups.push((*org, &e.webhook_id, vec![e])),
        }
    }
    let mut packs = Vec::new();
    for (org, webhook, events) in groups {
        for chunk in events.chunks(PACK_ENTRIES) {
            let entries: Vec<PackEntry> = chunk
                .iter()
                .map(|e| {
                    let t = e.transition.as_ref();
                    PackEntry(
                        e.event_id.clone(),
                        e.types.text(),
                        e.task_key.clone(),
                        t.and_then(|t| t.from_status).map(|s| s.as_str().to_owned()),
                        t.map(|t| t.to_status.as_str().to_owned()),
                        t.map(|t| t.agent_id.clone()),
                        e.created_at,
                    )
                })
                .collect();
            packs.push(NewPack {
                org,
                webhook_id: webhook.to_owned(),
                entries: serde_json::to_string(&entries).expect("entries serialize"),
            });
        }
    }
    packs
}

#[derive(FromRow)]
struct PackRow {
    pack_id: i64,
    org_id: String,
    webhook_id: String,
    entries: String,
    start: i64,
}

/// The first pack of an endpoint, as a worker reads it.
#[derive(Debug, Clone)]
pub struct DuePack {
    pub pack_id: i64,
    pub org_id: String,
    pub webhook_id: String,
    /// Entries before this one are done.
    pub start: usize,
    /// The entries from `start` on, each as its outbox row would read
    /// (`outbox_id` its place in the pack).
    pub entries: Vec<DueEvent>,
}

impl TryFrom<PackRow> for DuePack {
    type Error = StoreError;

    fn try_from(r: PackRow) -> Result<Self> {
        let entries: Vec<PackEntry> = serde_json::from_str(&r.entries)
            .map_err(|e| StoreError::Corrupt(format!("outbox pack {}: {e}", r.pack_id)))?;
        let start = usize::try_from(r.start).unwrap_or(0);
        let entries = entries
            .into_iter()
            .enumerate()
            .skip(start)
            .map(|(i, e)| DueEvent {
                outbox_id: i as i64,
                org_id: r.org_id.clone(),
                webhook_id: r.webhook_id.clone(),
                event_id: e.0,
                types: e.1,
                sent: 0,
                task_key: e.2,
                from_status: e.3,
                to_status: e.4,
                agent_id: e.5,
                created_at: e.6,
                attempts: 0,
            })
            .collect();
        Ok(DuePack {
            pack_id: r.pack_id,
            org_id: r.org_id,
            webhook_id: r.webhook_id,
            start,
            entries,
        })
    }
}

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

/// A worker's turn at one outbox row or pack: what becomes of it and the
/// attempts it made, written by the group-commit writer.
#[derive(Debug, Clone)]
pub struct Settled {
    pub webhook_id: String,
    pub turn: Turn,
    pub log: Vec<DeliveryRecord>,
}

/// What a worker's turn leaves of what it took.
#[derive(Debug, Clone)]
pub enum Turn {
    Row {
        outbox_id: i64,
        after: AfterAttempt,
    },
    /// Consecutive packs of an endpoint: those in `done` go, and `left`
    /// is the last one's id and new start if it is not done; `rows` are
    /// the entries that wait in rows of their own, in the packs' order.
    Packs {
        done: Vec<i64>,
        left: Option<(i64, usize)>,
        rows: Vec<Later>,
    },
}

/// A pack's entry that becomes an outbox row: `event.sent` of its types
/// delivered, `event.attempts` failed attempts at the next, tried at
/// `next_attempt_at`.
#[derive(Debug, Clone)]
pub struct Later {
    pub event: DueEvent,
    pub next_attempt_at: i64,
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

/// The settled turns of a commit as the statements that write them read
/// them: JSON arrays of the log's rows, the row ids to delete, the rows to
/// retry, the new rows, the packs to delete and the packs partly done
/// (`None` for an empty one, which writes nothing).
pub(super) struct SettleArgs {
    pub log: Option<String>,
    pub done: Option<String>,
    pub retry: Option<String>,
    pub rows: Option<String>,
    pub packs_done: Option<String>,
    pub packs_left: Option<String>,
}

impl SettleArgs {
    pub(super) fn new(settled: &[(OrgId, &Settled)]) -> Self {
        let mut log = Vec::new();
        let mut done = Vec::new();
        let mut retry = Vec::new();
        let mut rows = Vec::new();
        let mut packs_done = Vec::new();
        let mut packs_left = Vec::new();
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
            match &s.turn {
                Turn::Row {
                    outbox_id,
                    after: AfterAttempt::Done,
                } => done.push(serde_json::json!(outbox_id)),
                Turn::Row {
                    outbox_id,
                    after: AfterAttempt::Retry { sent, attempts, at },
                } => retry.push(serde_json::json!({
                    "outbox_id": outbox_id, "sent": sent, "attempts": attempts, "at": at,
                })),
                Turn::Packs {
                    done: gone,
                    left,
                    rows: later,
                } => {
                    for Later {
                        event: e,
                        next_attempt_at,
                    } in later
                    {
                        rows.push(serde_json::json!({
                            "org_id": org.to_string(),
                            "webhook_id": s.webhook_id,
                            "event_id": e.event_id,
                            "types": e.types,
                            "sent": e.sent,
                            "task_key": e.task_key,
                            "from_status": e.from_status,
                            "to_status": e.to_status,
                            "agent_id": e.agent_id,
                            "created_at": e.created_at,
                            "attempts": e.attempts,
                            "next_attempt_at": next_attempt_at,
                        }));
                    }
                    packs_done.extend(gone.iter().map(|id| serde_json::json!(id)));
                    if let Some((pack_id, start)) = left {
                        packs_left.push(serde_json::json!({"pack_id": pack_id, "start": start}));
                    }
                }
            }
        }
        let text = |v: Vec<serde_json::Value>| {
            (!v.is_empty()).then(|| serde_json::Value::Array(v).to_string())
        };
        SettleArgs {
            log: text(log),
            done: text(done),
            retry: text(retry),
            rows: text(rows),
            packs_done: text(packs_done),
            packs_left: text(packs_left),
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

    /// The first pack of each endpoint, if it is not held at `now` nor in
    /// `skip`, oldest first, at most `limit`. It looks at one pack per
    /// endpoint, however long the backlog.
    pub async fn due_webhook_packs(
        &self,
        now: i64,
        limit: i64,
        skip: &[i64],
    ) -> Result<Vec<DuePack>> {
        let skip = serde_json::to_string(skip).expect("ids serialize");
        let skipped = match self {
            Store::Sqlite(_) => "SELECT value FROM json_each($3)",
            Store::Postgres(..) => "SELECT value::int8 FROM json_array_elements_text($3::json)",
        };
        let sql = format!(
            "SELECT p.pack_id, p.org_id, p.webhook_id, p.entries, p.start FROM webhooks w \
             JOIN webhook_outbox_packs p ON p.pack_id = (SELECT MIN(q.pack_id) \
               FROM webhook_outbox_packs q WHERE q.webhook_id = w.webhook_id) \
             WHERE p.held_until <= $1 AND p.pack_id NOT IN ({skipped}) \
             ORDER BY p.pack_id LIMIT $2"
        );
        let rows: Vec<PackRow> = self
            .fetch_all(&sql, vec![Arg::Int(now), Arg::Int(limit), Arg::Text(skip)])
            .await?;
        super::records(rows)
    }

    /// Up to `limit` of the endpoint's packs after `pack`, in order: what
    /// a turn at its first pack may take with it.
    pub async fn following_webhook_packs(
        &self,
        webhook: &str,
        pack: i64,
        limit: i64,
    ) -> Result<Vec<DuePack>> {
        let rows: Vec<PackRow> = self
            .fetch_all(
                "SELECT pack_id, org_id, webhook_id, entries, start FROM webhook_outbox_packs \
                 WHERE webhook_id = $1 AND pack_id > $2 ORDER BY pack_id LIMIT $3",
                vec![
                    Arg::Text(webhook.to_owned()),
                    Arg::Int(pack),
                    Arg::Int(limit),
                ],
            )
            .await?;
        super::records(rows)
    }

    /// Takes the packs of `ids` not held at `now` until `until`; answers
    /// those taken.
    pub async fn hold_webhook_packs(&self, ids: &[i64], now: i64, until: i64) -> Result<Vec<i64>> {
        self.hold(
            "webhook_outbox_packs",
            "pack_id",
            "held_until",
            ids,
            now,
            until,
        )
        .await
    }

    /// Of `tasks`, those with an event of the endpoint waiting in an
    /// outbox row: their later events wait behind it.
    pub async fn waiting_webhook_tasks(
        &self,
        webhook: &str,
        tasks: &[&str],
    ) -> Result<HashSet<String>> {
        let sql = match self {
            Store::Sqlite(_) => {
                "SELECT DISTINCT task_key FROM webhook_outbox WHERE webhook_id = $1 \
                 AND task_key IN (SELECT value FROM json_each($2))"
            }
            Store::Postgres(..) => {
                "SELECT DISTINCT task_key FROM webhook_outbox WHERE webhook_id = $1 \
                 AND task_key IN (SELECT value FROM json_array_elements_text($2::json))"
            }
        };
        let tasks = serde_json::to_string(tasks).expect("keys serialize");
        Ok(on_pool!(self, pool => {
            sqlx::query_scalar::<_, String>(sql)
                .bind(webhook)
                .bind(tasks)
                .fetch_all(pool)
                .await?
        })
        .into_iter()
        .collect())
    }

    /// Takes the rows of `ids` still due at `now` until `until`; answers
    /// those taken (another worker may have taken the rest).
    pub async fn hold_webhook_events(&self, ids: &[i64], now: i64, until: i64) -> Result<Vec<i64>> {
        self.hold(
            "webhook_outbox",
            "outbox_id",
            "next_attempt_at",
            ids,
            now,
            until,
        )
        .await
    }

    /// Moves `column` of the rows of `ids` whose `column` is at most `now`
    /// to `until`; answers their ids.
    async fn hold(
        &self,
        table: &str,
        id: &str,
        column: &str,
        ids: &[i64],
        now: i64,
        until: i64,
    ) -> Result<Vec<i64>> {
        let ids = serde_json::to_string(ids).expect("ids serialize");
        let listed = match self {
            Store::Sqlite(_) => "SELECT value FROM json_each($3)",
            Store::Postgres(..) => "SELECT value::int8 FROM json_array_elements_text($3::json)",
        };
        let sql = format!(
            "UPDATE {table} SET {column} = $1 WHERE {column} <= $2 AND {id} IN ({listed}) \
             RETURNING {id}"
        );
        let sql = sql.as_str();
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
