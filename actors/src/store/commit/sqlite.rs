//! A group commit on SQLite: BEGIN, every task statement (multi-row,
//! padded), an occasional settle and COMMIT as one multi-statement query,
//! on a connection the writer keeps.

use std::collections::HashSet;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::query_builder::Separated;
use sqlx::sqlite::SqliteConnection;
use sqlx::{ConnectOptions as _, QueryBuilder, Sqlite, SqlitePool};

use super::accounts::account_statements;
use super::{padded, CommitPlan, EventChain, PlannedHeader, WriterConn};
use crate::domain::{ContentField, OrgId, TaskId, TaskStatus};
use crate::store::webhooks::{SettleArgs, LOG_KEPT};
use crate::store::{rows, writer_thread, Result};

/// The SQLite connection a writer commits on: a lane's own, opened outside
/// the pool on a thread the scheduler favours (see `writer_thread`), or
/// one of the pool's for a one-off commit (`Store::apply`).
pub enum SqliteConn {
    Own(SqliteConnection),
    Pooled(PoolConnection<Sqlite>),
}

impl Deref for SqliteConn {
    type Target = SqliteConnection;
    fn deref(&self) -> &SqliteConnection {
        match self {
            SqliteConn::Own(c) => c,
            SqliteConn::Pooled(c) => c,
        }
    }
}

impl DerefMut for SqliteConn {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        match self {
            SqliteConn::Own(c) => c,
            SqliteConn::Pooled(c) => c,
        }
    }
}

/// A writer lane's own connection, on a thread given the nice value
/// `nice` (see `Store::writer_conn`).
pub(super) async fn own_conn(pool: &SqlitePool, nice: i32) -> Result<WriterConn> {
    let options = (*pool.connect_options())
        .clone()
        .thread_name(|_| writer_thread::NAME.to_owned());
    let conn = options.connect().await?;
    writer_thread::renice(nice);
    Ok(WriterConn::sqlite(SqliteConn::Own(conn)))
}

/// Binds an org id and the stored form of a task header, in the column
/// order of `tasks` (`org_id, task_id, status, status_rank, priority,
/// assignee, tags, blocked_by, parent_task_id, created_at, updated_at,
/// lease_id, lease_expires_at, lease_seconds, attempts, max_attempts`),
/// then its `finished_rank, run_at, retry, retries, schedule_id,
/// scheduled_for`.
macro_rules! push_header {
    ($b:expr, $org:expr, $header:expr) => {{
        let h = rows::HeaderColumns::from($header);
        $b.push_bind($org.to_string())
            .push_bind(h.task_id)
            .push_bind(h.status)
            .push_bind(h.status_rank)
            .push_bind(h.priority)
            .push_bind(h.assignee)
            .push_bind(h.tags)
            .push_bind(h.blocked_by)
            .push_bind(h.parent)
            .push_bind(h.created_at)
            .push_bind(h.updated_at)
            .push_bind(h.lease_id)
            .push_bind(h.lease_expires_at)
            .push_bind(h.lease_seconds)
            .push_bind(h.attempts)
            .push_bind(h.max_attempts)
            .push_bind(h.finished_rank)
            .push_bind(h.run_at)
            .push_bind(h.retry)
            .push_bind(h.retries)
            .push_bind(h.schedule_id)
            .push_bind(h.scheduled_for)
    }};
}

/// Columns `push_header!` binds.
const HEADER_BINDS: usize = 22;

/// Binds a padding row of `columns` NULLs (see `padded`). A NULL has no
/// type in SQLite, so one bind type serves every column.
fn push_nulls(b: &mut Separated<'_, '_, Sqlite, &'static str>, columns: usize) {
    for _ in 0..columns {
        b.push_bind(None::<i64>);
    }
}

/// Starts the next statement of the multi-statement query `one` with
/// `text`, its first words.
fn next_statement<'q, 'a>(
    one: &'q mut QueryBuilder<'a, Sqlite>,
    text: &str,
) -> &'q mut QueryBuilder<'a, Sqlite> {
    if !one.sql().is_empty() {
        one.push("; ");
    }
    one.push(text)
}

/// Bytes a new task row reserves for its first header change to take
/// (migration `0014_row_slack`): more than a claim adds to a row. A claim
/// by a key named like `agent-7@example.com` adds about 71 (the assignee,
/// the lease id, expiry and length, a longer status, a later
/// `updated_at`); 64, as this was, left rows on full pages growing.
const ROW_SLACK: usize = 80;

/// Appends the task statements of a `CommitPlan` (usage, events, inserts,
/// headers, content: multi-row, padded) to the multi-statement query `one`.
/// Events go first: a task's first event of the commit reads the task's
/// `last_event_id` as it was before the commit, and a task inserted by the
/// commit has no row yet, so no event before its first.
fn push_task_statements(
    one: &mut QueryBuilder<'_, Sqlite>,
    plan: &CommitPlan<'_>,
    chain: &EventChain<'_>,
) {
    let usage: Vec<_> = plan.usage.iter().collect();
    for rows in padded(&usage) {
        let qb = next_statement(
            one,
            "INSERT INTO org_usage (org_id, month, requests, tasks, plans, read_tat, write_tat) \
                     SELECT * FROM (",
        );
        qb.push_values(rows, |mut b, row| match row {
            Some((org, u)) => {
                b.push_bind(org.to_string())
                    .push_bind(u.month.clone())
                    .push_bind(u.requests)
                    .push_bind(u.tasks)
                    .push_bind(u.plans)
                    .push_bind(i64::try_from(u.read_tat).unwrap_or(i64::MAX))
                    .push_bind(i64::try_from(u.write_tat).unwrap_or(i64::MAX));
            }
            None => push_nulls(&mut b, 7),
        });
        qb.push(
                    ") AS v WHERE v.column1 IS NOT NULL ON CONFLICT (org_id) DO UPDATE SET \
                     month = excluded.month, requests = excluded.requests, tasks = excluded.tasks, \
                     plans = excluded.plans, read_tat = excluded.read_tat, write_tat = excluded.write_tat",
                );
    }
    for rows in padded(&chain.events) {
        let qb = next_statement(
            one,
            "INSERT INTO task_events (event_id, org_id, task_id, from_status, to_status, \
                     agent_id, at, note, prev_event_id, lease_expired) SELECT v.column1, \
                     v.column2, v.column3, v.column4, v.column5, v.column6, v.column7, v.column8, \
                     COALESCE(v.column9, (SELECT t.last_event_id FROM tasks t \
                     WHERE t.org_id = v.column2 AND t.task_id = v.column3)), v.column10 FROM (",
        );
        qb.push_values(rows, |mut b, row| match row {
            Some((id, prev, org, e)) => {
                b.push_bind(*id)
                    .push_bind(org.to_string())
                    .push_bind(e.task_id.to_string())
                    .push_bind(e.from_status.map(|s| s.as_str()))
                    .push_bind(e.to_status.as_str())
                    .push_bind(e.agent_id.clone())
                    .push_bind(e.at)
                    .push_bind(e.note.clone())
                    .push_bind(*prev)
                    .push_bind(e.lease_expired.then_some(1_i64));
            }
            None => push_nulls(&mut b, 10),
        });
        qb.push(") AS v WHERE v.column1 IS NOT NULL");
    }
    for rows in padded(&plan.inserts) {
        let qb = next_statement(
            one,
            &format!(
                "INSERT INTO tasks (org_id, task_id, status, status_rank, priority, \
                     assignee, tags, blocked_by, parent_task_id, created_at, updated_at, \
                     lease_id, lease_expires_at, lease_seconds, attempts, max_attempts, \
                     finished_rank, run_at, retry, retries, schedule_id, scheduled_for, title, \
                     description, metadata, output, last_event_id, slack) \
                     SELECT *, zeroblob({ROW_SLACK}) FROM ("
            ),
        );
        qb.push_values(rows, |mut b, row| match row {
            Some((org, t)) => {
                push_header!(b, org, &t.header)
                    .push_bind(t.title.clone())
                    .push_bind(t.description.clone())
                    .push_bind(t.metadata.clone())
                    .push_bind(t.output.clone())
                    .push_bind(chain.last_of(*org, t.header.task_id));
            }
            None => push_nulls(&mut b, HEADER_BINDS + 5),
        });
        qb.push(") AS v WHERE v.column1 IS NOT NULL");
    }
    // Tasks that were open (claims, completions, most updates) and tasks
    // that were finished get statements of their own: only the second
    // names `finished_rank`, so only it maintains the open and finished
    // indexes. A settled task keeps a finished rank while it stays
    // finished; one not yet settled is left to the settle.
    let (crossing, staying): (Vec<&PlannedHeader<'_>>, Vec<_>) = plan
        .headers
        .values()
        .partition(|p| p.writes_finished_rank());
    for (headers, finished) in [
        (staying, ""),
        (
            crossing,
            ", finished_rank = CASE WHEN tasks.finished_rank IS NULL THEN NULL ELSE v.column17 END",
        ),
    ] {
        for rows in padded(&headers) {
            let qb = next_statement(
                one,
                &format!(
                    "UPDATE tasks SET status = v.column3, status_rank = v.column4, \
                     priority = v.column5, assignee = v.column6, tags = v.column7, \
                     blocked_by = v.column8, updated_at = v.column11, \
                     lease_id = v.column12, lease_expires_at = v.column13, \
                     lease_seconds = v.column14, attempts = v.column15, \
                     run_at = v.column18, retry = v.column19, retries = v.column20, \
                     last_event_id = COALESCE(v.column23, tasks.last_event_id), \
                     slack = NULL{finished} FROM ("
                ),
            );
            qb.push_values(rows, |mut b, row| match row {
                Some(p) => {
                    push_header!(b, p.org, p.header)
                        .push_bind(chain.last_of(p.org, p.header.task_id));
                }
                None => push_nulls(&mut b, HEADER_BINDS + 1),
            });
            qb.push(") AS v WHERE tasks.org_id = v.column1 AND tasks.task_id = v.column2");
        }
    }
    for (field, values) in &plan.content {
        let column = match field {
            ContentField::Title => "title",
            ContentField::Description => "description",
            ContentField::Metadata => "metadata",
            ContentField::Output => "output",
            ContentField::Note => continue,
        };
        let values: Vec<_> = values.iter().collect();
        for rows in padded(&values) {
            let qb = next_statement(
                one,
                &format!("UPDATE tasks SET {column} = v.column3 FROM ("),
            );
            qb.push_values(&rows, |mut b, row| match row {
                Some(((org, task), value)) => {
                    b.push_bind(org.to_string())
                        .push_bind(task.to_string())
                        .push_bind((**value).clone());
                }
                None => push_nulls(&mut b, 3),
            });
            qb.push(") AS v WHERE tasks.org_id = v.column1 AND tasks.task_id = v.column2");
            // A vector made from the old words no longer says what
            // the task is about; without it the task is embedded again.
            if matches!(field, ContentField::Title | ContentField::Description) {
                let qb = next_statement(
                    one,
                    "DELETE FROM task_vectors WHERE (org_id, task_id) IN (VALUES ",
                );
                let mut keys = qb.separated(", ");
                for ((org, task), _) in rows.iter().flatten() {
                    keys.push("(")
                        .push_bind_unseparated(org.to_string())
                        .push_unseparated(", ")
                        .push_bind_unseparated(task.to_string())
                        .push_unseparated(")");
                }
                qb.push(")");
            }
        }
    }
    // A task with events and neither inserted nor given a header by the
    // commit still takes its latest event.
    let inserted: HashSet<(OrgId, TaskId)> = plan
        .inserts
        .iter()
        .map(|(org, t)| (*org, t.header.task_id))
        .collect();
    let unlinked: Vec<_> = chain
        .last
        .iter()
        .filter(|(key, _)| !plan.headers.contains_key(key) && !inserted.contains(key))
        .collect();
    for rows in padded(&unlinked) {
        let qb = next_statement(one, "UPDATE tasks SET last_event_id = v.column3 FROM (");
        qb.push_values(rows, |mut b, row| match row {
            Some(((org, task), id)) => {
                b.push_bind(org.to_string())
                    .push_bind(task.to_string())
                    .push_bind(**id);
            }
            None => push_nulls(&mut b, 3),
        });
        qb.push(") AS v WHERE tasks.org_id = v.column1 AND tasks.task_id = v.column2");
    }
}

/// How often a SQLite writer settles: moves the finished tasks its commits
/// added since into the index that orders them per org, as part of its
/// next commit (migration `0011_settled_indexes`). A commit rewrites every
/// page it touches, and that index has pages of its own per org; settled
/// together, a page takes the rows of many commits at once. Readers look
/// in both places, so nothing waits for a settle. A longer interval writes
/// fewer pages per row but makes the commit that settles longer, and every
/// request in the next commit waits for it: under `taskq bench --orgs 16`,
/// 50 ms moved claim p99 from 7.7 to 11.8 ms, 10 ms left it where it was.
pub(super) const SETTLE_EVERY: Duration = Duration::from_millis(10);

/// The statement of a settle: what `tasks_unsettled` holds moves to
/// `tasks_finished_order`.
pub(super) fn settle_statements() -> String {
    format!(
        "UPDATE tasks INDEXED BY tasks_unsettled SET finished_rank = status_rank \
         WHERE finished_rank IS NULL AND status_rank >= {first}",
        first = TaskStatus::FIRST_FINISHED_RANK
    )
}

/// Appends the delivery worker's turns, if the plan has any: the attempts
/// logged and the log trimmed to what it keeps, the rows delivered
/// deleted, the rows to retry given their next attempt, the new rows, and
/// the cursors moved; a turn's rows and move only if its cursor is still
/// where the turn found it (so the rows go before the moves). Each a
/// statement over a JSON array, one text whatever the count.
fn push_settled(one: &mut QueryBuilder<'_, Sqlite>, plan: &CommitPlan<'_>) {
    if plan.settled.is_empty() {
        return;
    }
    let args = SettleArgs::new(&plan.settled);
    if let Some(log) = args.log {
        next_statement(
            one,
            "INSERT INTO webhook_deliveries (delivery_id, org_id, webhook_id, event_id, type, \
             attempt, status_code, error, response, at, next_attempt_at) \
             SELECT json_extract(value, '$.delivery_id'), json_extract(value, '$.org_id'), \
             json_extract(value, '$.webhook_id'), json_extract(value, '$.event_id'), \
             json_extract(value, '$.type'), json_extract(value, '$.attempt'), \
             json_extract(value, '$.status_code'), json_extract(value, '$.error'), \
             json_extract(value, '$.response'), json_extract(value, '$.at'), \
             json_extract(value, '$.next_attempt_at') FROM json_each(",
        )
        .push_bind(log)
        .push(")");
    }
    if let Some(trim) = args.trim {
        next_statement(
            one,
            "DELETE FROM webhook_deliveries WHERE delivery_id IN (SELECT delivery_id FROM \
             (SELECT delivery_id, ROW_NUMBER() OVER (PARTITION BY webhook_id \
               ORDER BY at DESC, delivery_id DESC) AS place FROM webhook_deliveries \
               WHERE webhook_id IN (SELECT value FROM json_each(",
        )
        .push_bind(trim)
        .push(format!("))) WHERE place > {LOG_KEPT})"));
    }
    if let Some(done) = args.done {
        next_statement(
            one,
            "DELETE FROM webhook_outbox WHERE outbox_id IN (SELECT value FROM json_each(",
        )
        .push_bind(done)
        .push("))");
    }
    if let Some(retry) = args.retry {
        next_statement(
            one,
            "UPDATE webhook_outbox SET sent = json_extract(v.value, '$.sent'), \
             attempts = json_extract(v.value, '$.attempts'), \
             next_attempt_at = json_extract(v.value, '$.at') FROM json_each(",
        )
        .push_bind(retry)
        .push(") AS v WHERE webhook_outbox.outbox_id = json_extract(v.value, '$.outbox_id')");
    }
    if let Some(rows) = args.rows {
        next_statement(
            one,
            "INSERT INTO webhook_outbox (org_id, webhook_id, event_id, types, sent, task_key, \
             from_status, to_status, agent_id, created_at, attempts, next_attempt_at) \
             SELECT json_extract(value, '$.org_id'), json_extract(value, '$.webhook_id'), \
             json_extract(value, '$.event_id'), json_extract(value, '$.types'), \
             json_extract(value, '$.sent'), json_extract(value, '$.task_key'), \
             json_extract(value, '$.from_status'), json_extract(value, '$.to_status'), \
             json_extract(value, '$.agent_id'), json_extract(value, '$.created_at'), \
             json_extract(value, '$.attempts'), json_extract(value, '$.next_attempt_at') \
             FROM json_each(",
        )
        .push_bind(rows)
        .push(
            ") WHERE EXISTS (SELECT 1 FROM webhook_cursors c \
             WHERE c.webhook_id = json_extract(value, '$.webhook_id') \
             AND c.event_id = json_extract(value, '$.cursor')) ORDER BY key",
        );
    }
    if let Some(moves) = args.moves {
        next_statement(
            one,
            "UPDATE webhook_cursors SET event_id = json_extract(v.value, '$.through') \
             FROM json_each(",
        )
        .push_bind(moves)
        .push(
            ") AS v WHERE webhook_cursors.webhook_id = json_extract(v.value, '$.webhook_id') \
             AND webhook_cursors.event_id = json_extract(v.value, '$.from')",
        );
    }
}

/// The id of the last event written, read by a writer under the write
/// lock before it numbers events of its own. `sqlite_sequence` holds the
/// largest id ever given (`AUTOINCREMENT`), which deleted events do not
/// lower.
const LAST_EVENT_ID: &str = "SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence \
     WHERE name = 'task_events'), 0), COALESCE((SELECT MAX(event_id) FROM task_events), 0))";

/// Commits a plan on SQLite in one round trip to the connection's thread
/// in the common case: BEGIN, every task statement and COMMIT run as one
/// multi-statement query, its binds taken in order. sqlx runs each SQLite
/// connection on a thread of its own and every query is a hand-off there
/// and back; under load each hand-off waits for a core, and one writer's
/// commit is what every claim waits for. Account changes (rare) run
/// before it, one statement each, and so does reading the last event id
/// when the connection does not know it yet (once per connection).
pub(super) async fn commit(
    conn: &mut SqliteConnection,
    plan: &CommitPlan<'_>,
    settle: bool,
    last_event_id: &mut Option<i64>,
) -> Result<()> {
    let mut one = QueryBuilder::<Sqlite>::new("");
    let reads_last_event = !plan.events.is_empty() && last_event_id.is_none();
    if plan.accounts.is_empty() && !reads_last_event {
        one.push("BEGIN IMMEDIATE");
    } else {
        sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
        account_statements!(&mut *conn, plan);
        if reads_last_event {
            let last: i64 = sqlx::query_scalar(LAST_EVENT_ID)
                .fetch_one(&mut *conn)
                .await?;
            *last_event_id = Some(last);
        }
    }
    let first_id = last_event_id.unwrap_or(0) + 1;
    let chain = EventChain::new(plan, first_id);
    push_task_statements(&mut one, plan, &chain);
    push_settled(&mut one, plan);
    if settle {
        next_statement(&mut one, &settle_statements());
    }
    one.push(if one.sql().is_empty() {
        "COMMIT"
    } else {
        "; COMMIT"
    });
    one.build().execute(&mut *conn).await?;
    if !plan.events.is_empty() {
        *last_event_id = Some(first_id - 1 + plan.events.len() as i64);
    }
    Ok(())
}
