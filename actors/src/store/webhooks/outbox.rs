//! What a delivery worker reads and settles: each endpoint's cursor over
//! its org's event log, and the outbox rows (events that failed, that wait
//! behind their task's earlier event, and test events).
//!
//! Settling a turn moves the cursor only from where the turn found it, so
//! a turn that lost its hold (PostgreSQL) and was done again by another
//! worker changes nothing; its rows are not inserted twice.
//!
//! Holds: on PostgreSQL, where every node's worker reads the shared store,
//! a worker takes an endpoint's cursor or a row by moving its
//! `held_until` ahead on the database's clock in one conditional UPDATE,
//! so of two workers only one takes it, and a worker that dies leaves it
//! due again when the hold runs out. SQLite has one server, whose worker
//! keeps what it took in memory instead. A row's schedule
//! (`next_attempt_at`) is on the engine's clock, apart from its hold.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::super::{rows, Arg, Result, Store};
use super::due::{DueLog, DueLogRow, DueRow, DueRowColumns};
use super::DeliveryRecord;
use crate::domain::{OrgId, WebhookId};

/// Attempts the delivery log keeps per endpoint, newest first: what
/// `GET /webhooks/{id}/deliveries` shows.
pub const LOG_KEPT: i64 = 100;

/// Milliseconds since the epoch on PostgreSQL's clock: the one clock the
/// nodes of a cluster share.
const PG_NOW_MS: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";

/// An outbox row a turn at an endpoint's log leaves: an event that failed,
/// that waits behind its task's earlier event, or that the turn did not
/// reach before its hold ran out. `sent` of its types are delivered,
/// `attempts` attempts at the next failed; due at `next_attempt_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewRow {
    pub event_id: String,
    pub types: String,
    pub sent: i64,
    pub task_key: String,
    pub from_status: Option<String>,
    pub to_status: Option<String>,
    pub agent_id: Option<String>,
    pub created_at: i64,
    pub attempts: i64,
    pub next_attempt_at: i64,
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

/// A worker's turn at one endpoint: what becomes of what it took, and the
/// attempts it made (at most [`LOG_KEPT`], the newest).
#[derive(Debug, Clone)]
pub struct Settled {
    pub webhook_id: WebhookId,
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
    /// The endpoint's cursor moves from `from` to `through`; `rows` are the
    /// events that wait in rows of their own, in the log's order.
    Log {
        from: i64,
        through: i64,
        rows: Vec<NewRow>,
    },
}

#[derive(Serialize)]
struct LogArg<'a> {
    delivery_id: &'a str,
    org_id: String,
    webhook_id: WebhookId,
    event_id: &'a str,
    #[serde(rename = "type")]
    event_type: &'a str,
    attempt: i64,
    status_code: Option<i64>,
    error: Option<&'a str>,
    response: Option<&'a str>,
    at: i64,
    next_attempt_at: Option<i64>,
}

#[derive(Serialize)]
struct RetryArg {
    outbox_id: i64,
    sent: i64,
    attempts: i64,
    at: i64,
}

#[derive(Serialize)]
struct RowArg<'a> {
    org_id: String,
    webhook_id: WebhookId,
    /// Where the cursor of the turn that made it was: the row is written
    /// only if it is still there.
    cursor: i64,
    #[serde(flatten)]
    row: &'a NewRow,
}

#[derive(Serialize)]
struct MoveArg {
    webhook_id: WebhookId,
    from: i64,
    through: i64,
}

/// The settled turns of a commit as the statements that write them read
/// them: JSON arrays of the log's rows, the endpoints whose log to trim,
/// the row ids to delete, the rows to retry, the new rows and the cursor
/// moves (`None` for an empty one, which writes nothing).
pub(in crate::store) struct SettleArgs {
    pub log: Option<String>,
    pub trim: Option<String>,
    pub done: Option<String>,
    pub retry: Option<String>,
    pub rows: Option<String>,
    pub moves: Option<String>,
}

impl SettleArgs {
    pub(in crate::store) fn new(settled: &[(OrgId, &Settled)]) -> Self {
        let mut log = Vec::new();
        let mut trim = Vec::new();
        let mut done = Vec::new();
        let mut retry = Vec::new();
        let mut rows = Vec::new();
        let mut moves = Vec::new();
        for (org, s) in settled {
            for d in &s.log {
                log.push(LogArg {
                    delivery_id: &d.delivery_id,
                    org_id: org.to_string(),
                    webhook_id: s.webhook_id,
                    event_id: &d.event_id,
                    event_type: &d.event_type,
                    attempt: d.attempt,
                    status_code: d.status_code,
                    error: d.error.as_deref(),
                    response: d.response.as_deref(),
                    at: d.at,
                    next_attempt_at: d.next_attempt_at,
                });
            }
            if !s.log.is_empty() && !trim.contains(&s.webhook_id) {
                trim.push(s.webhook_id);
            }
            match &s.turn {
                Turn::Row {
                    outbox_id,
                    after: AfterAttempt::Done,
                } => done.push(*outbox_id),
                Turn::Row {
                    outbox_id,
                    after: AfterAttempt::Retry { sent, attempts, at },
                } => retry.push(RetryArg {
                    outbox_id: *outbox_id,
                    sent: *sent,
                    attempts: *attempts,
                    at: *at,
                }),
                Turn::Log {
                    from,
                    through,
                    rows: later,
                } => {
                    moves.push(MoveArg {
                        webhook_id: s.webhook_id,
                        from: *from,
                        through: *through,
                    });
                    rows.extend(later.iter().map(|row| RowArg {
                        org_id: org.to_string(),
                        webhook_id: s.webhook_id,
                        cursor: *from,
                        row,
                    }));
                }
            }
        }
        fn text<T: Serialize>(items: &[T]) -> Option<String> {
            (!items.is_empty()).then(|| serde_json::to_string(items).expect("settled serializes"))
        }
        SettleArgs {
            log: text(&log),
            trim: text(&trim),
            done: text(&done),
            retry: text(&retry),
            rows: text(&rows),
            moves: text(&moves),
        }
    }
}

/// A JSON array bound as `$n`, as a set of rows to select from.
pub(super) fn listed(store: &Store, n: u8) -> String {
    match store {
        Store::Sqlite(_) => format!("SELECT value FROM json_each(${n})"),
        Store::Postgres(..) => format!("SELECT value FROM json_array_elements_text(${n}::json)"),
    }
}

/// The same, for an array of integers.
fn listed_ints(store: &Store, n: u8) -> String {
    match store {
        Store::Sqlite(_) => format!("SELECT value FROM json_each(${n})"),
        Store::Postgres(..) => {
            format!("SELECT value::int8 FROM json_array_elements_text(${n}::json)")
        }
    }
}

impl Store {
    /// Up to `limit` endpoints (not in `skip`) whose org has events after
    /// their cursor. On PostgreSQL each is held for `hold_ms` on the
    /// database's clock, and only those not held already are answered.
    pub async fn take_due_logs(
        &self,
        limit: i64,
        skip: &[WebhookId],
        hold_ms: i64,
    ) -> Result<Vec<DueLog>> {
        let skip = serde_json::to_string(skip).expect("ids serialize");
        let pending = "EXISTS (SELECT 1 FROM task_events e \
                       WHERE e.org_id = c.org_id AND e.event_id > c.event_id)";
        let sql = match self {
            Store::Sqlite(_) => format!(
                "SELECT c.webhook_id, c.org_id, c.event_id AS cursor FROM webhook_cursors c \
                 WHERE c.webhook_id NOT IN ({skipped}) AND {pending} ORDER BY c.webhook_id \
                 LIMIT $1",
                skipped = listed(self, 2)
            ),
            Store::Postgres(..) => format!(
                "UPDATE webhook_cursors h SET held_until = {PG_NOW_MS} + $3 \
                 FROM (SELECT c.webhook_id FROM webhook_cursors c \
                   WHERE c.held_until <= {PG_NOW_MS} AND c.webhook_id NOT IN ({skipped}) \
                   AND {pending} ORDER BY c.webhook_id LIMIT $1 FOR UPDATE SKIP LOCKED) due \
                 WHERE h.webhook_id = due.webhook_id \
                 RETURNING h.webhook_id, h.org_id, h.event_id AS cursor",
                skipped = listed(self, 2)
            ),
        };
        let mut args = vec![Arg::Int(limit), Arg::Text(skip)];
        if matches!(self, Store::Postgres(..)) {
            args.push(Arg::Int(hold_ms));
        }
        let due: Vec<DueLogRow> = self.fetch_all(&sql, args).await?;
        super::super::records(due)
    }

    /// Up to `limit` rows due at `now` and not in `skip`, at most
    /// `per_endpoint` of each endpoint, each the first of its endpoint's
    /// rows of its task still in the outbox (events of a task go in
    /// order), soonest due first. It looks at a bounded number of due
    /// rows, however long the backlog. On PostgreSQL each is held for
    /// `hold_ms` on the database's clock, and only those it took are
    /// answered (another worker may have taken the rest).
    pub async fn take_due_rows(
        &self,
        now: i64,
        limit: i64,
        per_endpoint: i64,
        skip: &[i64],
        hold_ms: i64,
    ) -> Result<Vec<DueRow>> {
        let skip = serde_json::to_string(skip).expect("ids serialize");
        let not_held = match self {
            Store::Sqlite(_) => String::new(),
            Store::Postgres(..) => format!("AND o.held_until <= {PG_NOW_MS}"),
        };
        let sql = format!(
            "SELECT outbox_id, org_id, webhook_id, event_id, types, sent, task_key, from_status, \
             to_status, agent_id, created_at, attempts \
             FROM (SELECT d.*, ROW_NUMBER() OVER (PARTITION BY d.webhook_id \
               ORDER BY d.next_attempt_at, d.outbox_id) AS place \
             FROM (SELECT o.* FROM webhook_outbox o WHERE o.next_attempt_at <= $1 {not_held} \
               AND o.outbox_id NOT IN ({skipped}) \
               AND NOT EXISTS (SELECT 1 FROM webhook_outbox p \
                 WHERE p.webhook_id = o.webhook_id \
                 AND p.task_key = o.task_key AND p.outbox_id < o.outbox_id) \
               ORDER BY o.next_attempt_at, o.outbox_id LIMIT 1000) d) ranked \
             WHERE place <= $3 ORDER BY next_attempt_at, outbox_id LIMIT $2",
            skipped = listed_ints(self, 4)
        );
        let due: Vec<DueRowColumns> = self
            .fetch_all(
                &sql,
                vec![
                    Arg::Int(now),
                    Arg::Int(limit),
                    Arg::Int(per_endpoint),
                    Arg::Text(skip),
                ],
            )
            .await?;
        let due: Vec<DueRow> = super::super::records(due)?;
        let Store::Postgres(pool, _) = self else {
            return Ok(due);
        };
        if due.is_empty() {
            return Ok(due);
        }
        let ids: Vec<i64> = due.iter().map(|r| r.outbox_id).collect();
        let held: HashSet<i64> = sqlx::query_scalar(&format!(
            "UPDATE webhook_outbox SET held_until = {PG_NOW_MS} + $1 \
             WHERE held_until <= {PG_NOW_MS} AND outbox_id = ANY($2) RETURNING outbox_id"
        ))
        .bind(hold_ms)
        .bind(&ids)
        .fetch_all(pool)
        .await?
        .into_iter()
        .collect();
        Ok(due
            .into_iter()
            .filter(|r| held.contains(&r.outbox_id))
            .collect())
    }

    /// How long from `now` until there may be something to take that
    /// could not be taken just now, in milliseconds (0 or less: at once),
    /// or `None` when only a commit can bring more: the soonest retry of
    /// an outbox row first of its task (neither in `skip_rows` nor of an
    /// endpoint in `skip_endpoints`), and on PostgreSQL also when another
    /// worker's hold of such a row, or of a cursor with events waiting,
    /// runs out (on the database's clock).
    pub async fn next_delivery_in(
        &self,
        now: i64,
        skip_rows: &[i64],
        skip_endpoints: &[WebhookId],
    ) -> Result<Option<i64>> {
        let heads = format!(
            "FROM webhook_outbox o WHERE o.outbox_id NOT IN ({rows}) \
             AND o.webhook_id NOT IN ({endpoints}) \
             AND NOT EXISTS (SELECT 1 FROM webhook_outbox p WHERE p.webhook_id = o.webhook_id \
               AND p.task_key = o.task_key AND p.outbox_id < o.outbox_id)",
            rows = listed_ints(self, 2),
            endpoints = listed(self, 3)
        );
        let sql = match self {
            Store::Sqlite(_) => format!("SELECT MIN(o.next_attempt_at) - $1 {heads}"),
            Store::Postgres(..) => format!(
                "SELECT MIN(w) FROM (SELECT GREATEST(o.next_attempt_at - $1, \
                   o.held_until - {PG_NOW_MS}) AS w {heads} \
                 UNION ALL SELECT c.held_until - {PG_NOW_MS} FROM webhook_cursors c \
                   WHERE c.held_until > {PG_NOW_MS} AND c.webhook_id NOT IN ({endpoints}) \
                   AND EXISTS (SELECT 1 FROM task_events e \
                     WHERE e.org_id = c.org_id AND e.event_id > c.event_id)) soonest",
                endpoints = listed(self, 3)
            ),
        };
        let rows = serde_json::to_string(skip_rows).expect("ids serialize");
        let endpoints = serde_json::to_string(skip_endpoints).expect("ids serialize");
        let sql = sql.as_str();
        Ok(on_pool!(self, pool => {
            sqlx::query_scalar::<_, Option<i64>>(sql)
                .bind(now)
                .bind(&rows)
                .bind(&endpoints)
                .fetch_one(pool)
                .await?
        }))
    }

    /// Of each endpoint's `tasks`, those with an event of the endpoint
    /// waiting in an outbox row (their later events wait behind it), by
    /// endpoint; one read for all.
    pub async fn waiting_webhook_tasks(
        &self,
        asked: &[(WebhookId, Vec<&str>)],
    ) -> Result<HashMap<WebhookId, HashSet<String>>> {
        let sql = format!(
            "SELECT DISTINCT webhook_id, task_key FROM webhook_outbox \
             WHERE webhook_id IN ({}) AND task_key IN ({})",
            listed(self, 1),
            listed(self, 2)
        );
        let webhooks: Vec<WebhookId> = asked.iter().map(|(w, _)| *w).collect();
        let tasks: Vec<&str> = asked.iter().flat_map(|(_, t)| t.iter().copied()).collect();
        let webhooks = serde_json::to_string(&webhooks).expect("ids serialize");
        let tasks = serde_json::to_string(&tasks).expect("keys serialize");
        let sql = sql.as_str();
        let found: Vec<(String, String)> = on_pool!(self, pool => {
            sqlx::query_as(sql)
                .bind(webhooks)
                .bind(tasks)
                .fetch_all(pool)
                .await?
        });
        let mut waiting: HashMap<WebhookId, HashSet<String>> = HashMap::new();
        for (webhook, task) in found {
            let webhook = rows::webhook_id(&webhook)?;
            let of_it = asked
                .iter()
                .any(|(w, t)| *w == webhook && t.contains(&task.as_str()));
            if of_it {
                waiting.entry(webhook).or_default().insert(task);
            }
        }
        Ok(waiting)
    }

    /// Commits turns on PostgreSQL, on the worker's own connection: their
    /// tables are the worker's alone, so the writers' lanes never wait
    /// for them.
    pub async fn settle_deliveries(&self, org: OrgId, settled: &[Settled]) -> Result<()> {
        let Store::Postgres(pool, _) = self else {
            unreachable!("SQLite settles through the group-commit writer");
        };
        let turns: Vec<(OrgId, &Settled)> = settled.iter().map(|s| (org, s)).collect();
        let mut tx = pool.begin().await?;
        settle_in(&mut tx, &turns).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// Writes turns in a PostgreSQL transaction. A turn at a log whose cursor
/// moved since it was taken (another worker did it after this one's hold
/// ran out) writes nothing.
pub(in crate::store) async fn settle_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    settled: &[(OrgId, &Settled)],
) -> std::result::Result<(), sqlx::Error> {
    let mut kept = Vec::with_capacity(settled.len());
    for &(org, s) in settled {
        if let Turn::Log { from, through, .. } = &s.turn {
            let moved = sqlx::query(
                "UPDATE webhook_cursors SET event_id = $3, held_until = 0 \
                 WHERE webhook_id = $1 AND event_id = $2",
            )
            .bind(s.webhook_id.to_string())
            .bind(from)
            .bind(through)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            if moved == 0 {
                tracing::debug!(webhook_id = %s.webhook_id, "a stale webhook turn was dropped");
                continue;
            }
        }
        kept.push((org, s));
    }
    for (sql, arg) in pg_settle_statements(SettleArgs::new(&kept)) {
        sqlx::query(&sql).bind(arg).execute(&mut **tx).await?;
    }
    Ok(())
}

/// PostgreSQL's statements of a settle (cursor moves already made), each
/// over one JSON array.
fn pg_settle_statements(args: SettleArgs) -> Vec<(String, String)> {
    let mut statements = Vec::new();
    if let Some(log) = args.log {
        statements.push((
            "INSERT INTO webhook_deliveries (delivery_id, org_id, webhook_id, event_id, type, \
             attempt, status_code, error, response, at, next_attempt_at) \
             SELECT v->>'delivery_id', v->>'org_id', v->>'webhook_id', v->>'event_id', \
             v->>'type', (v->>'attempt')::int8, (v->>'status_code')::int8, v->>'error', \
             v->>'response', (v->>'at')::int8, (v->>'next_attempt_at')::int8 \
             FROM json_array_elements($1::json) AS v"
                .to_owned(),
            log,
        ));
    }
    if let Some(trim) = args.trim {
        statements.push((
            format!(
                "DELETE FROM webhook_deliveries WHERE delivery_id IN (SELECT delivery_id FROM \
             (SELECT delivery_id, ROW_NUMBER() OVER (PARTITION BY webhook_id \
               ORDER BY at DESC, delivery_id DESC) AS place FROM webhook_deliveries \
               WHERE webhook_id IN (SELECT value FROM json_array_elements_text($1::json))) d \
             WHERE place > {LOG_KEPT})"
            ),
            trim,
        ));
    }
    if let Some(done) = args.done {
        statements.push((
            "DELETE FROM webhook_outbox WHERE outbox_id IN \
             (SELECT value::int8 FROM json_array_elements_text($1::json))"
                .to_owned(),
            done,
        ));
    }
    if let Some(retry) = args.retry {
        statements.push((
            "UPDATE webhook_outbox o SET sent = (v->>'sent')::int8, \
             attempts = (v->>'attempts')::int8, next_attempt_at = (v->>'at')::int8, \
             held_until = 0 \
             FROM json_array_elements($1::json) AS v WHERE o.outbox_id = (v->>'outbox_id')::int8"
                .to_owned(),
            retry,
        ));
    }
    if let Some(rows) = args.rows {
        statements.push((
            "INSERT INTO webhook_outbox (org_id, webhook_id, event_id, types, sent, task_key, \
             from_status, to_status, agent_id, created_at, attempts, next_attempt_at) \
             SELECT v->>'org_id', v->>'webhook_id', v->>'event_id', v->>'types', \
             (v->>'sent')::int8, v->>'task_key', v->>'from_status', v->>'to_status', \
             v->>'agent_id', (v->>'created_at')::int8, (v->>'attempts')::int8, \
             (v->>'next_attempt_at')::int8 \
             FROM json_array_elements($1::json) WITH ORDINALITY AS a(v, n) ORDER BY n"
                .to_owned(),
            rows,
        ));
    }
    statements
}
