//! A group commit's task changes on PostgreSQL as one statement.
//!
//! The extended protocol takes one statement per round trip, and a commit
//! of usage, headers, content and events took six of them with BEGIN and
//! COMMIT, each a wake-up of the server's backend and of the writer. Here
//! every table's rows travel as arrays, one per column, expanded by
//! `UNNEST` in data-modifying CTEs, so the commit is one statement in its
//! own implicit transaction: one round trip, and one text, parsed once per
//! connection whatever the number of rows (and planned for each commit:
//! see `WriterConn`).
//!
//! The CTEs of one statement all see the snapshot taken before it, and a
//! row changed by two of them keeps only one change. So each task appears
//! in exactly one of them: a task inserted by this commit is inserted with
//! its latest header and content, and every other task changed by it gets
//! one UPDATE row carrying its new header (if any) and each content field
//! that was set.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use dashmap::DashMap;

use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::Postgres;

use super::rows::HeaderColumns;
use super::{CommitPlan, EventChain};
use crate::domain::{ContentField, OrgId, StoredTask, TaskHeader, TaskId};

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
pub(super) const FENCE_STATEMENT: &str =
    concat!("WITH ", fence_cte!(1, 2, 3), " ", fence_check!(1));

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
    max_attempts, title, description, metadata, output, finished_rank, last_event_id)
  SELECT v.org_id, v.task_id, v.status, v.status_rank, v.priority, v.assignee, v.tags,
    v.blocked_by, v.parent_task_id, v.created_at, v.updated_at, v.lease_id, v.lease_expires_at,
    v.lease_seconds, v.attempts, v.max_attempts, v.title, v.description, v.metadata, v.output,
    v.finished_rank, v.last_event_id
  FROM UNNEST($8::text[], $9::text[], $10::text[], $11::int8[], $12::int8[], $13::text[],
    $14::text[], $15::text[], $16::text[], $17::int8[], $18::int8[], $19::text[], $20::int8[],
    $21::int8[], $22::int8[], $23::int8[], $24::bytea[], $25::bytea[], $26::bytea[], $27::bytea[],
    $59::int8[], $64::int8[])
    AS v(org_id, task_id, status, status_rank, priority, assignee, tags, blocked_by,
      parent_task_id, created_at, updated_at, lease_id, lease_expires_at, lease_seconds, attempts,
      max_attempts, title, description, metadata, output, finished_rank, last_event_id)
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
    finished_rank = CASE WHEN v.header THEN v.finished_rank ELSE tasks.finished_rank END,
    title = CASE WHEN v.set_title THEN v.title ELSE tasks.title END,
    description = CASE WHEN v.set_description THEN v.description ELSE tasks.description END,
    metadata = CASE WHEN v.set_metadata THEN v.metadata ELSE tasks.metadata END,
    output = CASE WHEN v.set_output THEN v.output ELSE tasks.output END,
    last_event_id = COALESCE(v.last_event_id, tasks.last_event_id)
  FROM UNNEST($28::text[], $29::text[], $30::bool[], $31::text[], $32::int8[], $33::int8[],
    $34::text[], $35::text[], $36::text[], $37::int8[], $38::text[], $39::int8[], $40::int8[],
    $41::int8[], $42::bool[], $43::bytea[], $44::bool[], $45::bytea[], $46::bool[], $47::bytea[],
    $48::bool[], $49::bytea[], $60::int8[], $65::int8[])
    AS v(org_id, task_id, header, status, status_rank, priority, assignee, tags, blocked_by,
      updated_at, lease_id, lease_expires_at, lease_seconds, attempts, set_title, title,
      set_description, description, set_metadata, metadata, set_output, output, finished_rank,
      last_event_id)
  WHERE tasks.org_id = v.org_id AND tasks.task_id = v.task_id
), unembedded AS (
  DELETE FROM task_vectors USING UNNEST($50::text[], $51::text[]) AS v(org_id, task_id)
  WHERE task_vectors.org_id = v.org_id AND task_vectors.task_id = v.task_id
), events AS (
  INSERT INTO task_events (event_id, org_id, task_id, from_status, to_status, agent_id, at, note,
    prev_event_id)
  SELECT v.event_id, v.org_id, v.task_id, v.from_status, v.to_status, v.agent_id, v.at, v.note,
    CASE WHEN v.look_up
      THEN (SELECT t.last_event_id FROM tasks t WHERE t.org_id = v.org_id AND t.task_id = v.task_id)
      ELSE v.prev_event_id END
  FROM UNNEST($61::int8[], $52::text[], $53::text[], $54::text[], $55::text[], $56::text[],
    $57::int8[], $58::bytea[], $62::int8[], $63::bool[])
    WITH ORDINALITY AS v(event_id, org_id, task_id, from_status, to_status, agent_id, at, note,
      prev_event_id, look_up, n)
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
            ..HeaderColumns::from(latest)
        },
    }
}

/// One column of `rows`, as the array bound for it.
fn column<T, U>(rows: &[T], value: impl Fn(&T) -> U) -> Vec<U> {
    rows.iter().map(value).collect()
}

/// The task changes of `plan` as one statement, or `None` if it has none.
pub(super) fn task_statement(
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
    Some(
        sqlx::query(TASK_STATEMENT)
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
            .bind(fence_node),
    )
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
pub(super) fn fence_statement(plan: &CommitPlan<'_>) -> Query<'static, Postgres, PgArguments> {
    let (orgs, epochs, node) = fences(plan);
    sqlx::query(FENCE_STATEMENT)
        .bind(orgs)
        .bind(epochs)
        .bind(node)
}

/// Event ids and links on PostgreSQL (migration `0016_event_chain`).
///
/// A commit statement that numbered its own events and looked up each
/// task's latest cost PostgreSQL more than the index it replaced (see
/// docs/perf.md, twentieth step). So the writers number events before the
/// statement, from one counter for all lanes, and remember each task's
/// latest event from the commits they made; the statement binds every id
/// and link. An org's batches all commit on one lane, in order, so what a
/// lane remembers of a task is what its row holds. A task is forgotten
/// when it finishes, so this holds open tasks only, and when a commit with
/// its events fails (it may have committed all the same). The first event
/// of a task not remembered (created before the server started, reopened,
/// or after a failed commit) reads its predecessor from the task row.
///
/// The ids come in blocks of [`EVENT_ID_BLOCK`] from the sequence
/// `task_event_ids` (migration `0017_cluster`), one `nextval` a block, so
/// the nodes of a cluster never give one id twice. After its node takes an
/// org over ([`EventLinks::renew`]), a writer numbers from a block taken
/// later: the org's earlier owner took its blocks before it lost the org,
/// so an org's events keep rising, which is the order readers sort them in.
#[derive(Debug, Default)]
pub struct EventLinks {
    ids: Mutex<IdBlock>,
    latest: DashMap<(OrgId, TaskId), i64>,
}

/// The sequence's increment: the ids one `nextval` hands out.
pub const EVENT_ID_BLOCK: i64 = 1 << 20;

/// The ids left in the block in use, and the renewal it was taken after.
#[derive(Debug, Default)]
struct IdBlock {
    next: i64,
    end: i64,
    generation: u64,
}

/// A plan's events with their ids (`chain`) and, for each, the id of its
/// task's event before it when known (`prev`), or whether the statement
/// reads it from the task row (`look_up`), which a task the plan inserts
/// (`inserted`) never does.
pub(super) struct LinkedEvents<'a> {
    inserted: HashSet<(OrgId, TaskId)>,
    chain: EventChain<'a>,
    prev: Vec<Option<i64>>,
    look_up: Vec<bool>,
}

impl EventLinks {
    /// Ids for `count` events, the first of them answered: from the block
    /// in use, or from a new one when it runs short or its node took an
    /// org over since it was taken. Ids a failed commit took are not given
    /// again.
    pub(super) async fn reserve(
        &self,
        count: usize,
        conn: &mut sqlx::PgConnection,
    ) -> Result<i64, sqlx::Error> {
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        loop {
            let generation = {
                let mut block = self.ids.lock().unwrap_or_else(|e| e.into_inner());
                if block.end - block.next >= count {
                    let first = block.next;
                    block.next += count;
                    return Ok(first);
                }
                block.generation
            };
            let start: i64 = sqlx::query_scalar("SELECT nextval('task_event_ids')")
                .fetch_one(&mut *conn)
                .await?;
            let mut block = self.ids.lock().unwrap_or_else(|e| e.into_inner());
            if block.generation == generation && count <= EVENT_ID_BLOCK {
                *block = IdBlock {
                    next: start + count,
                    end: start + EVENT_ID_BLOCK,
                    generation,
                };
                return Ok(start);
            }
            if count > EVENT_ID_BLOCK {
                return Err(sqlx::Error::Protocol(format!(
                    "a commit of {count} events is more than a block of ids"
                )));
            }
        }
    }

    /// This node just took an org over: the next ids come from a block
    /// taken after now.
    pub fn renew(&self) {
        let mut block = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        block.next = block.end;
        block.generation += 1;
    }

    /// Forgets what is remembered of an org this node no longer owns: its
    /// next owner appends events this node will not see.
    pub fn forget_org(&self, org: OrgId) {
        self.latest.retain(|(o, _), _| *o != org);
    }

    /// Gives the plan's events their ids, from `first_id` on, and links.
    pub(super) fn link<'a>(&self, plan: &CommitPlan<'a>, first_id: i64) -> LinkedEvents<'a> {
        let chain = EventChain::new(plan, first_id);
        let inserted: HashSet<(OrgId, TaskId)> = plan
            .inserts
            .iter()
            .map(|(org, task)| (*org, task.header.task_id))
            .collect();
        let (prev, look_up) = chain
            .events
            .iter()
            .map(|&(_, prev, org, event)| {
                let key = (org, event.task_id);
                match prev.or_else(|| self.latest.get(&key).map(|id| *id)) {
                    Some(id) => (Some(id), false),
                    None => (None, !inserted.contains(&key)),
                }
            })
            .unzip();
        LinkedEvents {
            inserted,
            chain,
            prev,
            look_up,
        }
    }

    /// Remembers what a committed plan left as each task's latest event.
    pub(super) fn committed(&self, plan: &CommitPlan<'_>, linked: &LinkedEvents<'_>) {
        for (key, id) in &linked.chain.last {
            self.latest.insert(*key, *id);
        }
        let finished = plan
            .headers
            .iter()
            .filter(|(_, p)| p.header.status.is_terminal())
            .map(|(key, _)| *key)
            .chain(
                plan.inserts
                    .iter()
                    .filter(|(_, t)| t.header.status.is_terminal())
                    .map(|(org, t)| (*org, t.header.task_id)),
            );
        for key in finished {
            self.latest.remove(&key);
        }
    }

    /// Forgets the latest event of every task a failed commit had events
    /// for: their next events read it from the task rows.
    pub(super) fn forget(&self, plan: &CommitPlan<'_>) {
        for (org, event) in &plan.events {
            self.latest.remove(&(*org, event.task_id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{StoredEvent, TaskStatus};
    use crate::store::tests::{header, task};
    use crate::store::{WriteBatch, WriteOp};

    fn event(task_id: TaskId) -> StoredEvent {
        StoredEvent {
            task_id,
            from_status: None,
            to_status: TaskStatus::Pending,
            agent_id: "agent".into(),
            at: 10,
            note: None,
        }
    }

    fn events(org: OrgId, tasks: &[TaskId]) -> WriteBatch {
        WriteBatch::new(
            org,
            vec![WriteOp::InsertEvents(
                tasks.iter().map(|t| event(*t)).collect(),
            )],
        )
    }

    fn ids(linked: &LinkedEvents<'_>) -> Vec<i64> {
        linked.chain.events.iter().map(|e| e.0).collect()
    }

    #[test]
    fn events_link_to_what_earlier_commits_left() {
        let links = EventLinks::default();
        let org = OrgId::new_v7();
        let (a, b) = (TaskId::new_v7(), TaskId::new_v7());

        let first = events(org, &[a, b, a]);
        let plan = CommitPlan::new(&[&first]);
        let linked = links.link(&plan, 42);
        assert_eq!(ids(&linked), [42, 43, 44]);
        // Neither task is known yet: their first events read the rows.
        assert_eq!(linked.prev, [None, None, Some(42)]);
        assert_eq!(linked.look_up, [true, true, false]);
        links.committed(&plan, &linked);

        let second = events(org, &[b, a]);
        let plan = CommitPlan::new(&[&second]);
        let linked = links.link(&plan, 45);
        assert_eq!(ids(&linked), [45, 46]);
        assert_eq!(linked.prev, [Some(43), Some(44)]);
        assert_eq!(linked.look_up, [false, false]);

        // After a failed commit the tasks' rows say what their latest is.
        links.forget(&plan);
        let linked = links.link(&plan, 47);
        assert_eq!(ids(&linked), [47, 48]);
        assert_eq!(linked.prev, [None, None]);
        assert_eq!(linked.look_up, [true, true]);
    }

    #[test]
    fn inserted_tasks_look_nothing_up_and_finished_ones_are_forgotten() {
        let links = EventLinks::default();
        let org = OrgId::new_v7();
        let open = header(TaskStatus::Pending, 10);
        let created = WriteBatch {
            org,
            ops: vec![
                WriteOp::InsertTasks(vec![task(open.clone())]),
                WriteOp::InsertEvents(vec![event(open.task_id)]),
            ],
            fence: None,
        };
        let plan = CommitPlan::new(&[&created]);
        let linked = links.link(&plan, 1);
        assert_eq!(
            (linked.prev.clone(), linked.look_up.clone()),
            (vec![None], vec![false])
        );
        links.committed(&plan, &linked);

        let done = TaskHeader {
            status: TaskStatus::Completed,
            ..open.clone()
        };
        let finished = WriteBatch {
            org,
            ops: vec![
                WriteOp::UpdateHeader {
                    header: done,
                    was_finished: false,
                },
                WriteOp::InsertEvents(vec![event(open.task_id)]),
            ],
            fence: None,
        };
        let plan = CommitPlan::new(&[&finished]);
        let linked = links.link(&plan, 1);
        assert_eq!(
            (linked.prev.clone(), linked.look_up.clone()),
            (vec![Some(1)], vec![false])
        );
        links.committed(&plan, &linked);

        // Reopened later: the finished task was forgotten, so its row says.
        let reopened = events(org, &[open.task_id]);
        let plan = CommitPlan::new(&[&reopened]);
        let linked = links.link(&plan, 1);
        assert_eq!(
            (linked.prev.clone(), linked.look_up.clone()),
            (vec![None], vec![true])
        );
    }
}
