//! Writes: the `WriteOp`s an org message produces, grouped in `WriteBatch`es,
//! and the group commit that coalesces many batches into a few multi-row
//! statements in one transaction.

use std::collections::{HashMap, HashSet};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::query_builder::Separated;
use sqlx::sqlite::SqliteConnection;
use sqlx::{ConnectOptions as _, PgConnection, QueryBuilder, Sqlite};

use super::rows::{self, OrgRow};
use super::writer_thread;
use super::{Result, Store, StoreError};
use crate::domain::account::{KeyRecord, MemberRecord, OrgRecord};
use crate::domain::admin::{Membership, Tag, Team};
use crate::domain::usage::Usage;
use crate::domain::{
    ContentField, KeyId, OrgId, StoredEvent, StoredTask, TaskHeader, TaskId, TaskStatus,
};

mod postgres;

pub use postgres::EventLinks;

#[cfg(test)]
pub(super) use postgres::plan_check;

/// One change to persist. A `WriteBatch` of these commits atomically.
#[derive(Debug, Clone)]
pub enum WriteOp {
    InsertOrg(OrgRecord),
    /// Overwrites an org's settings (tier, seats, suspension, limits,
    /// identity-provider enrollment): never its name, encryption or data
    /// key, which other paths own.
    UpdateOrgSettings(OrgRecord),
    InsertTasks(Vec<StoredTask>),
    /// Overwrites the header columns of an existing task that can change:
    /// all but its parent and creation (set once, at insert). A column left
    /// out of the UPDATE spares its indexes: the parent index is not
    /// rewritten on every claim and completion, and on SQLite the open and
    /// finished indexes only when a finished task changes, which is when
    /// its finished rank is written (`was_finished`: the task was finished
    /// before this change). A task that finishes is settled into the
    /// finished index later, with many others (`SETTLE_EVERY`).
    UpdateHeader {
        header: TaskHeader,
        was_finished: bool,
    },
    SetContent {
        task_id: TaskId,
        field: ContentField,
        value: Option<Vec<u8>>,
    },
    InsertEvents(Vec<StoredEvent>),
    InsertMember(MemberRecord),
    /// Overwrites a member's role, seat and profile tags.
    UpdateMember(MemberRecord),
    InsertKey(KeyRecord),
    DeactivateKey(KeyId),
    UpsertTag(Tag),
    DeleteTag(String),
    UpsertTeam(Team),
    /// Deletes a team and its memberships.
    DeleteTeam(String),
    UpsertMembership(Membership),
    DeleteMembership {
        team: String,
        email: String,
    },
    /// This month's counters and the rate buckets' state.
    SaveUsage(Usage),
}

/// The writes of one org message: committed together or not at all.
#[derive(Debug, Clone)]
pub struct WriteBatch {
    pub org: OrgId,
    pub ops: Vec<WriteOp>,
    /// Whose actor wrote it, on PostgreSQL (`None` on SQLite, which has
    /// one server, and for an org's creation).
    pub fence: Option<Fence>,
}

impl WriteBatch {
    pub fn new(org: OrgId, ops: Vec<WriteOp>) -> Self {
        WriteBatch {
            org,
            ops,
            fence: None,
        }
    }
}

/// The node whose actor made a batch and the epoch of its ownership of the
/// org: the commit lands only if the org's row still says both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub node: Arc<str>,
    pub epoch: i64,
}

/// Rows per multi-row statement: well under both backends' bind limits
/// (SQLite 32766, PostgreSQL 65535) at 20 columns.
const ROWS_PER_STATEMENT: usize = 256;

/// The rows of each multi-row statement (`Some`), padded with `None` rows
/// (bound as NULLs) to the next power of two. A statement's text depends only on its number
/// of rows, so padding leaves nine texts per statement kind: each is
/// prepared once per connection and then comes from the statement cache,
/// where unpadded statements of every size from 1 to 256 would evict each
/// other and be parsed again on most commits. The NULL rows match nothing
/// (`WHERE v.column1 IS NOT NULL`, or a join on `column1`).
pub(super) fn padded<T>(items: &[T]) -> impl Iterator<Item = Vec<Option<&T>>> {
    items.chunks(ROWS_PER_STATEMENT).map(|chunk| {
        let mut rows: Vec<Option<&T>> = chunk.iter().map(Some).collect();
        rows.resize(chunk.len().next_power_of_two(), None);
        rows
    })
}

/// The latest value of one content field, per task.
type ContentValues<'a> = HashMap<(OrgId, TaskId), &'a Option<Vec<u8>>>;

/// The changes of a group commit, coalesced. Per task, the last header and
/// the last value of each content field win, which is what applying the
/// batches one by one would leave; inserts run before updates and events
/// keep their order, so the result is the same as applying them in turn.
struct CommitPlan<'a> {
    /// Each fenced org's fence.
    fences: HashMap<OrgId, &'a Fence>,
    accounts: Vec<(OrgId, &'a WriteOp)>,
    /// The latest counters of each org.
    usage: HashMap<OrgId, &'a Usage>,
    inserts: Vec<(OrgId, &'a StoredTask)>,
    headers: HashMap<(OrgId, TaskId), PlannedHeader<'a>>,
    content: Vec<(ContentField, ContentValues<'a>)>,
    events: Vec<(OrgId, &'a StoredEvent)>,
}

impl<'a> CommitPlan<'a> {
    fn new(batches: &[&'a WriteBatch]) -> Self {
        let mut plan = CommitPlan {
            fences: HashMap::new(),
            accounts: Vec::new(),
            usage: HashMap::new(),
            inserts: Vec::new(),
            headers: HashMap::new(),
            content: Vec::new(),
            events: Vec::new(),
        };
        for batch in batches {
            let org = batch.org;
            if let Some(fence) = &batch.fence {
                plan.fences.insert(org, fence);
            }
            for op in &batch.ops {
                match op {
                    WriteOp::InsertTasks(tasks) => {
                        plan.inserts.extend(tasks.iter().map(|t| (org, t)));
                    }
                    WriteOp::UpdateHeader {
                        header,
                        was_finished,
                    } => {
                        let was_finished = *was_finished
                            || plan
                                .headers
                                .get(&(org, header.task_id))
                                .is_some_and(|p| p.was_finished);
                        plan.headers.insert(
                            (org, header.task_id),
                            PlannedHeader {
                                org,
                                header,
                                was_finished,
                            },
                        );
                    }
                    WriteOp::SetContent {
                        task_id,
                        field,
                        value,
                    } => {
                        let slot = match plan.content.iter().position(|(f, _)| f == field) {
                            Some(i) => i,
                            None => {
                                plan.content.push((*field, HashMap::new()));
                                plan.content.len() - 1
                            }
                        };
                        plan.content[slot].1.insert((org, *task_id), value);
                    }
                    WriteOp::InsertEvents(events) => {
                        plan.events.extend(events.iter().map(|e| (org, e)));
                    }
                    WriteOp::SaveUsage(usage) => {
                        plan.usage.insert(org, usage);
                    }
                    other => plan.accounts.push((org, other)),
                }
            }
        }
        plan
    }
}

/// The latest header of a task in a commit. `was_finished` holds if any of
/// the commit's changes to the task found it finished.
#[derive(Clone, Copy)]
struct PlannedHeader<'a> {
    org: OrgId,
    header: &'a TaskHeader,
    was_finished: bool,
}

impl PlannedHeader<'_> {
    /// Whether the task's finished rank may have to change on SQLite: it
    /// was finished, and so may be settled. A task that finishes leaves it
    /// NULL until the writer settles it (see `SETTLE_EVERY`).
    fn writes_finished_rank(&self) -> bool {
        self.was_finished
    }
}

/// Binds an org id and the stored form of a task header, in the column
/// order of `tasks` (`org_id, task_id, status, status_rank, priority,
/// assignee, tags, blocked_by, parent_task_id, created_at, updated_at,
/// lease_id, lease_expires_at, lease_seconds, attempts, max_attempts`),
/// then its `finished_rank`.
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
    }};
}

/// Columns `push_header!` binds.
const HEADER_BINDS: usize = 17;

/// Binds a padding row of `columns` NULLs (see `padded`). A NULL has no
/// type in SQLite, so one bind type serves every column.
fn push_nulls(b: &mut Separated<'_, '_, Sqlite, &'static str>, columns: usize) {
    for _ in 0..columns {
        b.push_bind(None::<i64>);
    }
}

/// The account statements of a `CommitPlan` (orgs, members, keys, tags,
/// teams: rare, one statement each), each executed on `$exec`, for either
/// backend.
macro_rules! account_statements {
    ($exec:expr, $plan:ident) => {{
        {
            for (org, op) in &$plan.accounts {
                let org = org.to_string();
                match op {
                    WriteOp::InsertOrg(record) => {
                        let o = OrgRow::from(record);
                        sqlx::query(
                            "INSERT INTO orgs (org_id, name, tier, encryption, seats, suspended, \
                             limits, wrapped_dek, master_key_id, created_at, idp_enrolled) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                        )
                        .bind(o.org_id)
                        .bind(o.name)
                        .bind(o.tier)
                        .bind(o.encryption)
                        .bind(o.seats)
                        .bind(o.suspended)
                        .bind(o.limits)
                        .bind(o.wrapped_dek)
                        .bind(o.master_key_id)
                        .bind(o.created_at)
                        .bind(o.idp_enrolled)
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::UpdateOrgSettings(record) => {
                        let o = OrgRow::from(record);
                        sqlx::query(
                            "UPDATE orgs SET tier = $2, seats = $3, suspended = $4, limits = $5, \
                             idp_enrolled = $6 WHERE org_id = $1",
                        )
                        .bind(o.org_id)
                        .bind(o.tier)
                        .bind(o.seats)
                        .bind(o.suspended)
                        .bind(o.limits)
                        .bind(o.idp_enrolled)
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::InsertMember(m) => {
                        sqlx::query(
                            "INSERT INTO members (org_id, email, role, seated, profile_tags, joined_at) \
                             VALUES ($1, $2, $3, $4, $5, $6)",
                        )
                        .bind(&org)
                        .bind(&m.email)
                        .bind(m.role.as_str())
                        .bind(i64::from(m.seated))
                        .bind(serde_json::to_string(&m.profile_tags).unwrap_or_default())
                        .bind(m.joined_at)
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::InsertKey(k) => {
                        sqlx::query(
                            "INSERT INTO api_keys (key_id, org_id, email, name, secret_hash, active, created_at) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7)",
                        )
                        .bind(k.key_id.to_string())
                        .bind(&org)
                        .bind(&k.email)
                        .bind(&k.name)
                        .bind(k.secret_hash.clone())
                        .bind(i64::from(k.active))
                        .bind(k.created_at)
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::DeactivateKey(key_id) => {
                        sqlx::query("UPDATE api_keys SET active = 0 WHERE org_id = $1 AND key_id = $2")
                            .bind(&org)
                            .bind(key_id.to_string())
                            .execute($exec)
                            .await?;
                    }
                    WriteOp::UpdateMember(m) => {
                        sqlx::query(
                            "UPDATE members SET role = $3, seated = $4, profile_tags = $5 \
                             WHERE org_id = $1 AND email = $2",
                        )
                        .bind(&org)
                        .bind(&m.email)
                        .bind(m.role.as_str())
                        .bind(i64::from(m.seated))
                        .bind(serde_json::to_string(&m.profile_tags).unwrap_or_default())
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::UpsertTag(t) => {
                        sqlx::query(
                            "INSERT INTO tags (org_id, name, strict, is_default, description, created_by, created_at) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (org_id, name) DO UPDATE SET \
                             strict = excluded.strict, is_default = excluded.is_default, \
                             description = excluded.description",
                        )
                        .bind(&org)
                        .bind(&t.name)
                        .bind(i64::from(t.strict))
                        .bind(i64::from(t.is_default))
                        .bind(t.description.clone())
                        .bind(&t.created_by)
                        .bind(t.created_at)
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::DeleteTag(name) => {
                        sqlx::query("DELETE FROM tags WHERE org_id = $1 AND name = $2")
                            .bind(&org)
                            .bind(name)
                            .execute($exec)
                            .await?;
                    }
                    WriteOp::UpsertTeam(t) => {
                        sqlx::query(
                            "INSERT INTO teams (org_id, name, tags, description, idp_only, created_by, created_at) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (org_id, name) DO UPDATE SET \
                             tags = excluded.tags, description = excluded.description, \
                             idp_only = excluded.idp_only",
                        )
                        .bind(&org)
                        .bind(&t.name)
                        .bind(serde_json::to_string(&t.tags).unwrap_or_default())
                        .bind(t.description.clone())
                        .bind(i64::from(t.idp_only))
                        .bind(&t.created_by)
                        .bind(t.created_at)
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::DeleteTeam(name) => {
                        sqlx::query("DELETE FROM team_members WHERE org_id = $1 AND team = $2")
                            .bind(&org)
                            .bind(name)
                            .execute($exec)
                            .await?;
                        sqlx::query("DELETE FROM teams WHERE org_id = $1 AND name = $2")
                            .bind(&org)
                            .bind(name)
                            .execute($exec)
                            .await?;
                    }
                    WriteOp::UpsertMembership(m) => {
                        sqlx::query(
                            "INSERT INTO team_members (org_id, team, email, manual, idp, added_by, added_at) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (org_id, team, email) DO UPDATE SET \
                             manual = excluded.manual, idp = excluded.idp",
                        )
                        .bind(&org)
                        .bind(&m.team)
                        .bind(&m.email)
                        .bind(i64::from(m.manual))
                        .bind(i64::from(m.idp))
                        .bind(&m.added_by)
                        .bind(m.added_at)
                        .execute($exec)
                        .await?;
                    }
                    WriteOp::DeleteMembership { team, email } => {
                        sqlx::query("DELETE FROM team_members WHERE org_id = $1 AND team = $2 AND email = $3")
                            .bind(&org)
                            .bind(team)
                            .bind(email)
                            .execute($exec)
                            .await?;
                    }
                    WriteOp::InsertTasks(_)
                    | WriteOp::SaveUsage(_)
                    | WriteOp::UpdateHeader { .. }
                    | WriteOp::SetContent { .. }
                    | WriteOp::InsertEvents(_) => unreachable!("task ops are planned apart"),
                }
            }
        }
    }};
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

/// The events of a commit with the ids the SQLite writer gives them, and
/// each task's event chain (migration `0013_event_chain`): an event names
/// the task's event before it, a task row its latest event. PostgreSQL's
/// writers number events from the counter they share (`EventLinks`).
struct EventChain<'a> {
    /// `(event_id, prev_event_id, org, event)`, in commit order. The first
    /// event of a task in the commit has no `prev_event_id` here: its
    /// statement reads it from the task row, before any statement of the
    /// commit changes that row.
    events: Vec<(i64, Option<i64>, OrgId, &'a StoredEvent)>,
    /// Each task's latest event in the commit: its new `last_event_id`.
    last: HashMap<(OrgId, TaskId), i64>,
}

impl<'a> EventChain<'a> {
    /// Numbers the plan's events from `first_id`, in order.
    fn new(plan: &CommitPlan<'a>, first_id: i64) -> Self {
        let mut last = HashMap::new();
        let events = (first_id..)
            .zip(&plan.events)
            .map(|(id, &(org, event))| (id, last.insert((org, event.task_id), id), org, event))
            .collect();
        EventChain { events, last }
    }

    fn last_of(&self, org: OrgId, task: TaskId) -> Option<i64> {
        self.last.get(&(org, task)).copied()
    }
}

/// Bytes a new task row reserves for its first header change to take
/// (migration `0014_row_slack`): more than a claim adds to a row.
const ROW_SLACK: usize = 64;

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
                     agent_id, at, note, prev_event_id) SELECT v.column1, v.column2, v.column3, \
                     v.column4, v.column5, v.column6, v.column7, v.column8, \
                     COALESCE(v.column9, (SELECT t.last_event_id FROM tasks t \
                     WHERE t.org_id = v.column2 AND t.task_id = v.column3)) FROM (",
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
                    .push_bind(*prev);
            }
            None => push_nulls(&mut b, 9),
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
                     finished_rank, title, description, metadata, output, last_event_id, \
                     slack) SELECT *, zeroblob({ROW_SLACK}) FROM ("
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
                     last_event_id = COALESCE(v.column18, tasks.last_event_id), \
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

/// A connection a group-commit writer keeps from one commit to the next.
/// With SQLite, a connection's page cache stays valid across its own
/// commits but is dropped whenever another connection has written, so a
/// writer that took any idle connection for each commit read most of the
/// pages it changed back from the file.
///
/// With PostgreSQL, its prepared statement stays with it, and so does the
/// statement's plan: the writer's connection always uses the generic plan
/// (`plan_cache_mode = force_generic_plan`). Planning the commit statement
/// for each commit cost a fifth of PostgreSQL's CPU under `taskq bench`.
/// A generic plan is made once, often while the tables are still small,
/// and may then be a hash join over a sequential scan of `tasks` that
/// stays as the table grows (seen: 130 cycles/s instead of 6,400). So the
/// connection also turns off sequential scans and hash and merge joins:
/// the only plan left is the one wanted whatever the tables' size, a
/// nested loop over each table's primary key (no other index of `tasks`
/// can find a row by org and id; `postgres::plan_check` shows the plan,
/// and a store test asserts it). It is taken out of the pool so that these
/// settings never reach a reader's connection, and one that failed is
/// closed when dropped.
pub enum WriterConn {
    Sqlite {
        conn: SqliteConn,
        /// When this writer last settled (see `SETTLE_EVERY`).
        settled_at: Instant,
        /// The id of the last event this connection wrote, or read as the
        /// last one under the write lock; `None` until then. The writer
        /// numbers events itself, to chain them in the statement that
        /// inserts them (`EventChain`). SQLite has one writer lane, and
        /// the pool's one-off commits (`Store::apply`: new orgs) carry no
        /// events, so no other connection moves the last id. Were one to,
        /// the next commit here would fail on a taken id, and its batches
        /// would be retried on a new connection, which reads the id again.
        last_event_id: Option<i64>,
    },
    Postgres {
        conn: PgConnection,
        /// Shared by the store's PostgreSQL writers: see `EventLinks`.
        links: Arc<EventLinks>,
    },
}

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

/// How often a SQLite writer settles: moves the finished tasks its commits
/// added since into the index that orders them per org, as part of its
/// next commit (migration `0011_settled_indexes`). A commit rewrites every
/// page it touches, and that index has pages of its own per org; settled
/// together, a page takes the rows of many commits at once. Readers look
/// in both places, so nothing waits for a settle. A longer interval writes
/// fewer pages per row but makes the commit that settles longer, and every
/// request in the next commit waits for it: under `taskq bench --orgs 16`,
/// 50 ms moved claim p99 from 7.7 to 11.8 ms, 10 ms left it where it was.
const SETTLE_EVERY: Duration = Duration::from_millis(10);

/// The statement of a settle: what `tasks_unsettled` holds moves to
/// `tasks_finished_order`.
fn settle_statements() -> String {
    format!(
        "UPDATE tasks INDEXED BY tasks_unsettled SET finished_rank = status_rank \
         WHERE finished_rank IS NULL AND status_rank >= {first}",
        first = TaskStatus::FIRST_FINISHED_RANK
    )
}

/// The id of the last event written, read by a writer under the write
/// lock before it numbers events of its own. `sqlite_sequence` holds the
/// largest id ever given (`AUTOINCREMENT`), which deleted events do not
/// lower.
const LAST_EVENT_ID: &str = "SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence \
     WHERE name = 'task_events'), 0), COALESCE((SELECT MAX(event_id) FROM task_events), 0))";

impl Store {
    /// A connection for a group-commit writer to keep.
    ///
    /// On SQLite it is a connection of its own, whose thread (sqlx runs
    /// each connection on one) is given the nice value `sqlite_nice`: every
    /// request waits for the writer's commits, one at a time, and under
    /// load the request threads held both cores while the commit's thread
    /// waited to run (see `writer_thread`).
    pub async fn writer_conn(&self, sqlite_nice: i32) -> Result<WriterConn> {
        Ok(match self {
            Store::Sqlite(pool) => {
                let options = (*pool.connect_options())
                    .clone()
                    .thread_name(|_| writer_thread::NAME.to_owned());
                let conn = options.connect().await?;
                writer_thread::renice(sqlite_nice);
                WriterConn::sqlite(SqliteConn::Own(conn))
            }
            Store::Postgres(..) => self.postgres_writer_conn().await?,
        })
    }

    /// A connection for one commit: see [`Store::apply`].
    async fn one_off_conn(&self) -> Result<WriterConn> {
        Ok(match self {
            Store::Sqlite(pool) => WriterConn::sqlite(SqliteConn::Pooled(pool.acquire().await?)),
            Store::Postgres(..) => self.postgres_writer_conn().await?,
        })
    }

    async fn postgres_writer_conn(&self) -> Result<WriterConn> {
        let Store::Postgres(pool, links) = self else {
            unreachable!("called for PostgreSQL stores only");
        };
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

    /// Settles what commits on connections of the pool left unsettled (on
    /// SQLite; PostgreSQL leaves nothing).
    #[cfg(test)]
    pub(crate) async fn settle(&self) -> Result<()> {
        if let Store::Sqlite(pool) = self {
            sqlx::query(&settle_statements()).execute(pool).await?;
        }
        Ok(())
    }

    /// Commits batches on a connection of the pool: see [`WriterConn::apply`].
    pub async fn apply(&self, batches: &[&WriteBatch]) -> Result<()> {
        self.one_off_conn().await?.apply(batches).await
    }
}

impl WriterConn {
    /// Closes the connection and waits until it is closed (a pool's
    /// connection goes back to its pool).
    pub async fn close(self) {
        let closed = match self {
            WriterConn::Sqlite {
                conn: SqliteConn::Own(conn),
                ..
            } => sqlx::Connection::close(conn).await,
            WriterConn::Sqlite {
                conn: SqliteConn::Pooled(_),
                ..
            } => Ok(()),
            WriterConn::Postgres { conn, .. } => sqlx::Connection::close(conn).await,
        };
        if let Err(e) = closed {
            tracing::warn!(error = %e, "closing a writer's connection failed");
        }
    }

    fn sqlite(conn: SqliteConn) -> Self {
        WriterConn::Sqlite {
            conn,
            settled_at: Instant::now(),
            last_event_id: None,
        }
    }

    /// Commits every batch in one transaction. The batches' changes are
    /// coalesced first (see `CommitPlan`), so a group commit of many
    /// requests costs a handful of statements, not a few per request.
    pub async fn apply(&mut self, batches: &[&WriteBatch]) -> Result<()> {
        let plan = CommitPlan::new(batches);
        match self {
            WriterConn::Sqlite {
                conn,
                settled_at,
                last_event_id,
            } => {
                let settle = settled_at.elapsed() >= SETTLE_EVERY;
                let result = commit_sqlite(conn, &plan, settle, last_event_id).await;
                if settle && result.is_ok() {
                    *settled_at = Instant::now();
                }
                if result.is_err() {
                    // The transaction may still be open: closing the
                    // connection rolls it back, where a pooled one would
                    // carry it to its next user. The writer drops its own.
                    if let SqliteConn::Pooled(conn) = conn {
                        conn.close_on_drop();
                    }
                    *last_event_id = None;
                }
                result
            }
            WriterConn::Postgres { conn, links } => {
                let first_id = links.reserve(plan.events.len(), conn).await?;
                let linked = links.link(&plan, first_id);
                let result = commit_postgres(conn, &plan, &linked).await;
                match result {
                    Ok(()) => links.committed(&plan, &linked),
                    // The commit may have happened all the same (an answer
                    // lost with the connection): the tasks' rows say.
                    Err(_) => links.forget(&plan),
                }
                result
            }
        }
    }
}

/// Commits a plan on PostgreSQL: its task changes as one statement, in
/// its own implicit transaction unless account changes (rare) come with
/// it.
async fn commit_postgres(
    conn: &mut PgConnection,
    plan: &CommitPlan<'_>,
    linked: &postgres::LinkedEvents<'_>,
) -> Result<()> {
    let statement = postgres::task_statement(plan, linked);
    let run = async {
        if plan.accounts.is_empty() {
            if let Some(statement) = statement {
                statement.execute(&mut *conn).await?;
            }
        } else {
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            if !plan.fences.is_empty() {
                postgres::fence_statement(plan).execute(&mut *tx).await?;
            }
            account_statements!(&mut *tx, plan);
            if let Some(statement) = statement {
                statement.execute(&mut *tx).await?;
            }
            tx.commit().await?;
        }
        Ok::<(), sqlx::Error>(())
    };
    run.await.map_err(StoreError::from_commit)
}

/// Commits a plan on SQLite in one round trip to the connection's thread
/// in the common case: BEGIN, every task statement and COMMIT run as one
/// multi-statement query, its binds taken in order. sqlx runs each SQLite
/// connection on a thread of its own and every query is a hand-off there
/// and back; under load each hand-off waits for a core, and one writer's
/// commit is what every claim waits for. Account changes (rare) run
/// before it, one statement each, and so does reading the last event id
/// when the connection does not know it yet (once per connection).
async fn commit_sqlite(
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
