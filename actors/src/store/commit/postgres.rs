//! A group commit's task changes on PostgreSQL as one statement.
//!
//! The extended protocol takes one statement per round trip, and a commit
//! of usage, headers, content and events took six of them with BEGIN and
//! COMMIT, each a wake-up of the server's backend and of the writer. Here
//! every table's rows travel as arrays, one per column, expanded by
//! `UNNEST` in data-modifying CTEs, so the commit is one statement in its
//! own implicit transaction: one round trip, and one text, parsed once per
//! connection whatever the number of rows (and planned for each commit:
//! see `WriterConn`). Its event ids and links are the writers' own
//! (`links.rs`).
//!
//! The CTEs of one statement all see the snapshot taken before it, and a
//! row changed by two of them keeps only one change. So each task appears
//! in exactly one of them: a task inserted by this commit is inserted with
//! its latest header and content, and every other task changed by it gets
//! one UPDATE row carrying its new header (if any) and each content field
//! that was set.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{PgConnection, PgPool, Postgres};

use super::accounts::account_statements;
use super::{CommitPlan, WriterConn};
use crate::domain::{ContentField, OrgId, StoredTask, TaskHeader, TaskId};
use crate::store::rows::HeaderColumns;
use crate::store::webhooks::settle_in;
use crate::store::{Result, StoreError};

mod links;

pub use links::EventLinks;
use links::LinkedEvents;

/// The fence of a commit (migration `0017_cluster`): the orgs written
/// (parameter `$orgs`, text) whose row still names this node (`$node`) at
/// the epoch its actor holds (`$epochs`), each locked `FOR SHARE`, so a
/// takeover waits for this commit and a takeover that committed first
/// leaves its org out.
macro_rules! fence_cte {
    ($orgs:literal, $epochs:literal, $node:literal) => {
        concat!(
            "fence AS (
  SELECT o.org_id FROM org_owners o
  JOIN UNNEST($",
            $orgs,
            "::text[], $",
            $epochs,
            "::int8[]) AS f(org_id, epoch)
    ON o.org_id = f.org_id AND o.epoch = f.epoch
  WHERE o.node_id = $",
            $node,
            "
  FOR SHARE OF o
)"
        )
    };
}

/// The statement's answer: 1, or the error `TQ001` (`taskq_fenced`) when
/// an org left the fence, which rolls the whole statement back.
macro_rules! fence_check {
    ($orgs:literal) => {
        concat!(
            "SELECT CASE WHEN (SELECT count(*) FROM fence) = cardinality($",
            $orgs,
            "::text[]) THEN 1 ELSE taskq_fenced() END"
        )
    };
}

/// The fence alone, for a commit whose account changes run before its
/// task statement in one transaction.
const FENCE_STATEMENT: &str = concat!("WITH ", fence_cte!(1, 2, 3), " ", fence_check!(1));

/// The statement; its parameters are the columns bound by
/// [`task_statement`], in order (the finished ranks and the event links,
/// added later, last).
///
/// Every header row writes `finished_rank`, unlike on SQLite: PostgreSQL
/// compares old and new values, and an unchanged indexed column does not
/// keep an update from being heap-only. So a finished task is settled at
/// once: nothing is left for a settle.
///
/// Events are chained (migration `0016_event_chain`) with ids and links
/// the writer binds (see [`EventLinks`]): each event its id and the id of
/// its task's event before it, each task row its latest event's. Only an
/// event whose predecessor the writer does not know (`look_up`) reads it
/// from the task row, as the row was before the statement.
///
const TASK_STATEMENT: &str = concat!(
    "\
WITH ",
    fence_cte!(66, 67, 68),
    ", usage AS (
  INSERT INTO org_usage (org_id, month, requests, tasks, plans, read_tat, write_tat)
  SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::int8[], $5::int8[], $6::int8[], $7::int8[])
  ON CONFLICT (org_id) DO UPDATE SET month = excluded.month, requests = excluded.requests,
    tasks = excluded.tasks, plans = excluded.plans, read_tat = excluded.read_tat,
    write_tat = excluded.write_tat
), inserted AS (
  INSERT INTO tasks (org_id, task_id, status, status_rank, priority, assignee, tags, blocked_by,
    parent_task_id, created_at, updated_at, lease_id, lease_expires_at, lease_seconds, attempts,
    max_attempts, title, description, metadata, output, finished_rank, last_event_id, run_at,
    retry, retries, schedule_id, scheduled_for)
  SELECT v.org_id, v.task_id, v.status, v.status_rank, v.priority, v.assignee, v.tags,
    v.blocked_by, v.parent_task_id, v.created_at, v.updated_at, v.lease_id, v.lease_expires_at,
    v.lease_seconds, v.attempts, v.max_attempts, v.title, v.description, v.metadata, v.output,
    v.finished_rank, v.last_event_id, v.run_at, v.retry, v.retries, v.schedule_id,
    v.scheduled_for
  FROM UNNEST($8::text[], $9::text[], $10::text[], $11::int8[], $12::int8[], $13::text[],
    $14::text[], $15::text[], $16::text[], $17::int8[], $18::int8[], $19::text[], $20::int8[],
    $21::int8[], $22::int8[], $23::int8[], $24::bytea[], $25::bytea[], $26::bytea[], $27::bytea[],
    $59::int8[], $64::int8[], $70::int8[], $71::text[], $72::int8[], $73::text[], $74::int8[])
    AS v(org_id, task_id, status, status_rank, priority, assignee, tags, blocked_by,
      parent_task_id, created_at, updated_at, lease_id, lease_expires_at, lease_seconds, attempts,
      max_attempts, title, description, metadata, output, finished_rank, last_event_id, run_at,
      retry, retries, schedule_id, scheduled_for)
), updated AS (
  UPDATE tasks SET
    status = CASE WHEN v.header THEN v.status ELSE tasks.status END,
    status_rank = CASE WHEN v.header THEN v.status_rank ELSE tasks.status_rank END,
    priority = CASE WHEN v.header THEN v.priority ELSE tasks.priority END,
    assignee = CASE WHEN v.header THEN v.assignee ELSE tasks.assignee END,
    tags = CASE WHEN v.header THEN v.tags ELSE tasks.tags END,
    blocked_by = CASE WHEN v.header THEN v.blocked_by ELSE tasks.blocked_by END,
    updated_at = CASE WHEN v.header THEN v.updated_at ELSE tasks.updated_at END,
    lease_id = CASE WHEN v.header THEN v.lease_id ELSE tasks.lease_id END,
    lease_expires_at = CASE WHEN v.header THEN v.lease_expires_at ELSE tasks.lease_expires_at END,
    lease_seconds = CASE WHEN v.header THEN v.lease_seconds ELSE tasks.lease_seconds END,
    attempts = CASE WHEN v.header THEN v.attempts ELSE tasks.attempts END,
    run_at = CASE WHEN v.header THEN v.run_at ELSE tasks.run_at END,
    retry = CASE WHEN v.header THEN v.retry ELSE tasks.retry END,
    retries = CASE WHEN v.header THEN v.retries ELSE tasks.retries END,
    finished_rank = CASE WHEN v.header THEN v.finished_rank ELSE tasks.finished_rank END,
    title = CASE WHEN v.set_title THEN v.title ELSE tasks.title END,
    description = CASE WHEN v.set_description THEN v.description ELSE tasks.description END,
    metadata = CASE WHEN v.set_metadata THEN v.metadata ELSE tasks.metadata END,
    output = CASE WHEN v.set_output THEN v.output ELSE tasks.output END,
    last_event_id = COALESCE(v.last_event_id, tasks.last_event_id)
  FROM UNNEST($28::text[], $29::text[], $30::bool[], $31::text[], $32::int8[], $33::int8[],
    $34::text[], $35::text[], $36::text[], $37::int8[], $38::text[], $39::int8[], $40::int8[],
    $41::int8[], $42::bool[], $43::bytea[], $44::bool[], $45::bytea[], $46::bool[], $47::bytea[],
    $48::bool[], $49::bytea[], $60::int8[], $65::int8[], $75::int8[], $76::text[], $77::int8[])
    AS v(org_id, task_id, header, status, status_rank, priority, assignee, tags, blocked_by,
      updated_at, lease_id, lease_expires_at, lease_seconds, attempts, set_title, title,
      set_description, description, set_metadata, metadata, set_output, output, finished_rank,
      last_event_id, run_at, retry, retries)
  WHERE tasks.org_id = v.org_id AND tasks.task_id = v.task_id
), unembedded AS (
  DELETE FROM task_vectors USING UNNEST($50::text[], $51::text[]) AS v(org_id, task_id)
  WHERE task_vectors.org_id = v.org_id AND task_vectors.task_id = v.task_id
), events AS (
  INSERT INTO task_events (event_id, org_id, task_id, from_status, to_status, agent_id, at, note,
    prev_event_id, lease_expired)
  SELECT v.event_id, v.org_id, v.task_id, v.from_status, v.to_status, v.agent_id, v.at, v.note,
    CASE WHEN v.look_up
      THEN (SELECT t.last_event_id FROM tasks t WHERE t.org_id = v.org_id AND t.task_id = v.task_id)
      ELSE v.prev_event_id END,
    v.lease_expired
  FROM UNNEST($61::int8[], $52::text[], $53::text[], $54::text[], $55::text[], $56::text[],
    $57::int8[], $58::bytea[], $62::int8[], $63::bool[], $69::int8[])
    WITH ORDINALITY AS v(event_id, org_id, task_id, from_status, to_status, agent_id, at, note,
      prev_event_id, look_up, lease_expired, n)
  ORDER BY v.n
)
",
    fence_check!(66)
);

/// The statements that show the plan a connection makes for the commit
/// statement: a `PREPARE` of it, then an `EXPLAIN` of its execution with
/// every parameter NULL.
#[cfg(test)]
pub(crate) fn plan_check() -> (String, String) {
    let parameters = TASK_STATEMENT
        .split('$')
        .skip(1)
        .filter_map(|rest| {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            rest[..digits].parse::<usize>().ok()
        })
        .max()
        .unwrap_or(0);
    (
        format!("PREPARE taskq_commit AS {TASK_STATEMENT}"),
        format!(
            "EXPLAIN EXECUTE taskq_commit({})",
            vec!["NULL"; parameters].join(", ")
        ),
    )
}

/// The content fields stored in `tasks`, in the statement's order.
const CONTENT: [ContentField; 4] = [
    ContentField::Title,
    ContentField::Description,
    ContentField::Metadata,
    ContentField::Output,
];

/// Header columns as arrays. Every column is nullable here: an UPDATE row
/// without a new header binds NULLs that its `header` flag leaves unread.
#[derive(Default)]
struct HeaderArrays {
    org: Vec<String>,
    task: Vec<String>,
    status: Vec<Option<&'static str>>,
    status_rank: Vec<Option<i64>>,
    priority: Vec<Option<i64>>,
    assignee: Vec<Option<String>>,
    tags: Vec<Option<String>>,
    blocked_by: Vec<Option<String>>,
    parent: Vec<Option<String>>,
    created_at: Vec<Option<i64>>,
    updated_at: Vec<Option<i64>>,
    lease_id: Vec<Option<String>>,
    lease_expires_at: Vec<Option<i64>>,
    lease_seconds: Vec<Option<i64>>,
    attempts: Vec<Option<i64>>,
    max_attempts: Vec<Option<i64>>,
    finished_rank: Vec<Option<i64>>,
    run_at: Vec<Option<i64>>,
    retry: Vec<Option<String>>,
    retries: Vec<Option<i64>>,
    schedule_id: Vec<Option<String>>,
    scheduled_for: Vec<Option<i64>>,
}

impl HeaderArrays {
    fn push(&mut self, org: OrgId, task: TaskId, header: Option<HeaderColumns>) {
        self.org.push(org.to_string());
        self.task.push(task.to_string());
        let h = header.as_ref();
        self.status.push(h.map(|h| h.status));
        self.status_rank.push(h.map(|h| h.status_rank));
        self.priority.push(h.map(|h| h.priority));
        self.assignee.push(h.and_then(|h| h.assignee.clone()));
        self.tags.push(h.map(|h| h.tags.clone()));
        self.blocked_by.push(h.map(|h| h.blocked_by.clone()));
        self.parent.push(h.and_then(|h| h.parent.clone()));
        self.created_at.push(h.map(|h| h.created_at));
        self.updated_at.push(h.map(|h| h.updated_at));
        self.lease_id.push(h.and_then(|h| h.lease_id.clone()));
        self.lease_expires_at
            .push(h.and_then(|h| h.lease_expires_at));
        self.lease_seconds.push(h.and_then(|h| h.lease_seconds));
        self.attempts.push(h.map(|h| h.attempts));
        self.max_attempts.push(h.map(|h| h.max_attempts));
        self.finished_rank.push(h.and_then(|h| h.finished_rank));
        self.run_at.push(h.and_then(|h| h.run_at));
        self.retry.push(h.and_then(|h| h.retry.clone()));
        self.retries.push(h.map(|h| h.retries));
        self.schedule_id.push(h.and_then(|h| h.schedule_id.clone()));
        self.scheduled_for.push(h.and_then(|h| h.scheduled_for));
    }
}

/// The latest value set for each content field of each task in a plan.
type SetContent<'a> = HashMap<(OrgId, TaskId), [Option<&'a Option<Vec<u8>>>; 4]>;

fn set_content<'a>(plan: &CommitPlan<'a>) -> SetContent<'a> {
    let mut set: SetContent<'a> = HashMap::new();
    for (field, values) in &plan.content {
        let Some(slot) = CONTENT.iter().position(|f| f == field) else {
            continue;
        };
        for (key, value) in values {
            set.entry(*key).or_default()[slot] = Some(*value);
        }
    }
    set
}

/// The header an inserted task is stored with: its latest, but with the
/// columns set once at insert taken from the insert, as an insert followed
/// by an UPDATE would leave them.
fn inserted_header(task: &StoredTask, latest: Option<&TaskHeader>) -> HeaderColumns {
    let first = HeaderColumns::from(&task.header);
    match latest {
        None => first,
        Some(latest) => HeaderColumns {
            parent: first.parent,
            created_at: first.created_at,
            max_attempts: first.max_attempts,
            schedule_id: first.schedule_id,
            scheduled_for: first.scheduled_for,
            ..HeaderColumns::from(latest)
        },
    }
}

/// One column of `rows`, as the array bound for it.
fn column<T, U>(rows: &[T], value: impl Fn(&T) -> U) -> Vec<U> {
    rows.iter().map(value).collect()
}

/// The task changes of `plan` as one statement, or `None` if it has none.
fn task_statement(
    plan: &CommitPlan<'_>,
    linked: &LinkedEvents<'_>,
) -> Option<Query<'static, Postgres, PgArguments>> {
    if plan.usage.is_empty()
        && plan.inserts.is_empty()
        && plan.headers.is_empty()
        && plan.content.is_empty()
        && plan.events.is_empty()
    {
        return None;
    }
    let content = set_content(plan);
    let chain = &linked.chain;

    let usage: Vec<_> = plan.usage.iter().collect();
    let tat = |ns: u64| i64::try_from(ns).unwrap_or(i64::MAX);
    let mut inserted = HeaderArrays::default();
    let mut inserted_last = Vec::with_capacity(plan.inserts.len());
    let mut inserted_content: [Vec<Option<Vec<u8>>>; 4] = Default::default();
    for (org, task) in &plan.inserts {
        let key = (*org, task.header.task_id);
        inserted_last.push(chain.last_of(key.0, key.1));
        let latest = plan.headers.get(&key).map(|p| p.header);
        inserted.push(*org, key.1, Some(inserted_header(task, latest)));
        let set = content.get(&key);
        let stored = [
            Some(task.title.clone()),
            task.description.clone(),
            task.metadata.clone(),
            task.output.clone(),
        ];
        for (slot, value) in stored.into_iter().enumerate() {
            inserted_content[slot].push(match set.and_then(|s| s[slot]) {
                Some(value) => value.clone(),
                None => value,
            });
        }
    }

    let mut updated = HeaderArrays::default();
    let mut updated_last = Vec::new();
    let mut has_header = Vec::new();
    let mut set_flags: [Vec<bool>; 4] = Default::default();
    let mut set_values: [Vec<Option<Vec<u8>>>; 4] = Default::default();
    let changed = plan
        .headers
        .keys()
        .chain(content.keys())
        .chain(chain.last.keys())
        .filter(|key| !linked.inserted.contains(key))
        .collect::<HashSet<_>>();
    for key in changed {
        let header = plan.headers.get(key).map(|p| HeaderColumns::from(p.header));
        has_header.push(header.is_some());
        updated.push(key.0, key.1, header);
        updated_last.push(chain.last_of(key.0, key.1));
        let set = content.get(key);
        for slot in 0..CONTENT.len() {
            let value = set.and_then(|s| s[slot]);
            set_flags[slot].push(value.is_some());
            set_values[slot].push(value.and_then(Clone::clone));
        }
    }

    // A vector made from the old words no longer says what the task is
    // about; without it the task is embedded again.
    let (unembedded_org, unembedded_task): (Vec<String>, Vec<String>) = content
        .iter()
        .filter(|(_, set)| set[0].is_some() || set[1].is_some())
        .map(|((org, task), _)| (org.to_string(), task.to_string()))
        .unzip();

    let events = &plan.events;
    let (fence_orgs, fence_epochs, fence_node) = fences(plan);
    let [title, description, metadata, output] = inserted_content;
    let [set_title, set_description, set_metadata, set_output] = set_flags;
    let [new_title, new_description, new_metadata, new_output] = set_values;
    let query = sqlx::query(TASK_STATEMENT)
        .bind(column(&usage, |(org, _)| org.to_string()))
        .bind(column(&usage, |(_, u)| u.month.clone()))
        .bind(column(&usage, |(_, u)| u.requests))
        .bind(column(&usage, |(_, u)| u.tasks))
        .bind(column(&usage, |(_, u)| u.plans))
        .bind(column(&usage, |(_, u)| tat(u.read_tat)))
        .bind(column(&usage, |(_, u)| tat(u.write_tat)))
        .bind(inserted.org)
        .bind(inserted.task)
        .bind(inserted.status)
        .bind(inserted.status_rank)
        .bind(inserted.priority)
        .bind(inserted.assignee)
        .bind(inserted.tags)
        .bind(inserted.blocked_by)
        .bind(inserted.parent)
        .bind(inserted.created_at)
        .bind(inserted.updated_at)
        .bind(inserted.lease_id)
        .bind(inserted.lease_expires_at)
        .bind(inserted.lease_seconds)
        .bind(inserted.attempts)
        .bind(inserted.max_attempts)
        .bind(title)
        .bind(description)
        .bind(metadata)
        .bind(output)
        .bind(updated.org)
        .bind(updated.task)
        .bind(has_header)
        .bind(updated.status)
        .bind(updated.status_rank)
        .bind(updated.priority)
        .bind(updated.assignee)
        .bind(updated.tags)
        .bind(updated.blocked_by)
        .bind(updated.updated_at)
        .bind(updated.lease_id)
        .bind(updated.lease_expires_at)
        .bind(updated.lease_seconds)
        .bind(updated.attempts)
        .bind(set_title)
        .bind(new_title)
        .bind(set_description)
        .bind(new_description)
        .bind(set_metadata)
        .bind(new_metadata)
        .bind(set_output)
        .bind(new_output)
        .bind(unembedded_org)
        .bind(unembedded_task)
        .bind(column(events, |(org, _)| org.to_string()))
        .bind(column(events, |(_, e)| e.task_id.to_string()))
        .bind(column(events, |(_, e)| e.from_status.map(|s| s.as_str())))
        .bind(column(events, |(_, e)| e.to_status.as_str()))
        .bind(column(events, |(_, e)| e.agent_id.clone()))
        .bind(column(events, |(_, e)| e.at))
        .bind(column(events, |(_, e)| e.note.clone()))
        .bind(inserted.finished_rank)
        .bind(updated.finished_rank)
        .bind(column(&chain.events, |(id, _, _, _)| *id))
        .bind(linked.prev.clone())
        .bind(linked.look_up.clone())
        .bind(inserted_last)
        .bind(updated_last)
        .bind(fence_orgs)
        .bind(fence_epochs)
        .bind(fence_node)
        .bind(column(events, |(_, e)| e.lease_expired.then_some(1_i64)))
        .bind(inserted.run_at)
        .bind(inserted.retry)
        .bind(inserted.retries)
        .bind(inserted.schedule_id)
        .bind(inserted.scheduled_for)
        .bind(updated.run_at)
        .bind(updated.retry)
        .bind(updated.retries);
    Some(query)
}

/// The fences of a plan as the statements bind them: org ids, epochs and
/// the node (empty when nothing is fenced, which passes).
fn fences(plan: &CommitPlan<'_>) -> (Vec<String>, Vec<i64>, String) {
    let node = plan
        .fences
        .values()
        .next()
        .map(|f| f.node.to_string())
        .unwrap_or_default();
    let (orgs, epochs) = plan
        .fences
        .iter()
        .map(|(org, f)| (org.to_string(), f.epoch))
        .unzip();
    (orgs, epochs, node)
}

/// The fence of `plan` as a statement of its own.
fn fence_statement(plan: &CommitPlan<'_>) -> Query<'static, Postgres, PgArguments> {
    let (orgs, epochs, node) = fences(plan);
    sqlx::query(FENCE_STATEMENT)
        .bind(orgs)
        .bind(epochs)
        .bind(node)
}

/// A writer's connection: see `WriterConn` for why these settings.
pub(super) async fn writer_conn(pool: &PgPool, links: &Arc<EventLinks>) -> Result<WriterConn> {
    let mut conn = pool.acquire().await?.detach();
    sqlx::query(
        "SELECT set_config('plan_cache_mode', 'force_generic_plan', false), \
         set_config('enable_seqscan', 'off', false), \
         set_config('enable_bitmapscan', 'off', false), \
         set_config('enable_hashjoin', 'off', false), \
         set_config('enable_mergejoin', 'off', false), \
         set_config('idle_in_transaction_session_timeout', '2000', false)",
    )
    .execute(&mut conn)
    .await?;
    Ok(WriterConn::Postgres {
        conn,
        links: Arc::clone(links),
    })
}

/// Commits a plan on PostgreSQL: its task changes as one statement, in
/// its own implicit transaction unless account changes (rare) come with
/// it.
pub(super) async fn commit(
    conn: &mut PgConnection,
    plan: &CommitPlan<'_>,
    linked: &LinkedEvents<'_>,
) -> Result<()> {
    let statement = task_statement(plan, linked);
    let run = async {
        if plan.accounts.is_empty() && plan.settled.is_empty() {
            if let Some(statement) = statement {
                statement.execute(&mut *conn).await?;
            }
        } else {
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            if !plan.fences.is_empty() {
                fence_statement(plan).execute(&mut *tx).await?;
            }
            account_statements!(&mut *tx, plan);
            settle_in(&mut tx, &plan.settled).await?;
            if let Some(statement) = statement {
                statement.execute(&mut *tx).await?;
            }
            tx.commit().await?;
        }
        Ok::<(), sqlx::Error>(())
    };
    run.await.map_err(StoreError::from_commit)
}
