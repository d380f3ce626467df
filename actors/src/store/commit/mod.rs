//! Writes: the `WriteOp`s an org message produces, grouped in `WriteBatch`es,
//! and the group commit that coalesces many batches into a few multi-row
//! statements in one transaction. Here what both backends share: the
//! batches, their coalescing (`CommitPlan`), the events' numbering
//! (`EventChain`) and the writer's connection; `sqlite.rs` and
//! `postgres.rs` hold each backend's statements, `accounts.rs` the account
//! statements both run.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use sqlx::PgConnection;

use super::webhooks::Settled;
use super::{Result, Store};
use crate::crypto::SealedSecret;
use crate::domain::account::{KeyRecord, MemberRecord, OrgRecord};
use crate::domain::admin::{Membership, Tag, Team};
use crate::domain::mark::MarkedCounts;
use crate::domain::schedule::ScheduleRecord;
use crate::domain::usage::Usage;
use crate::domain::webhooks::{Endpoint, OutboxEvent};
use crate::domain::{
    ContentField, KeyId, OrgId, ScheduleId, StoredEvent, StoredTask, TaskHeader, TaskId, WebhookId,
};

mod accounts;
mod postgres;
mod prune;
pub(crate) mod purge;
mod sqlite;

pub use postgres::EventLinks;
use sqlite::SqliteConn;

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
    /// Webhook events made other than by a state change (a test event):
    /// outbox rows of their own. State changes are delivered from the
    /// event log itself (see `store::webhooks`).
    InsertOutbox(Vec<OutboxEvent>),
    InsertWebhook {
        endpoint: Endpoint,
        secret: SealedSecret,
    },
    /// A new secret; the current one becomes the previous, which signs
    /// until `previous_until`.
    RotateWebhookSecret {
        webhook_id: WebhookId,
        secret: SealedSecret,
        previous_until: i64,
    },
    /// No more deliveries: the endpoint stays, inactive, and its pending
    /// events go.
    DisableWebhook(WebhookId),
    /// The endpoint, its pending events and its delivery log go.
    DeleteWebhook(WebhookId),
    /// A schedule as it now stands (new, changed, or fired).
    UpsertSchedule(Box<ScheduleRecord>),
    DeleteSchedule(ScheduleId),
    /// A delivery worker's turns at an endpoint's log or outbox rows (on
    /// SQLite, whose one write lock the worker must not take itself): the
    /// cursor moves, rows delivered go, rows to retry get their next
    /// attempt, and the attempts are logged.
    SettleDeliveries(Vec<Settled>),
    /// The retention sweep: these tasks go with their history, vector,
    /// outbox and delivery rows, each only if it is still finished and
    /// last changed before `cutoff`.
    PruneTasks {
        task_ids: Vec<TaskId>,
        cutoff: i64,
    },
    /// The operator deleted the org: it is marked deleted at `at`, its data
    /// key destroyed, its keys, schedules, webhooks and sessions removed.
    ShredOrg {
        at: i64,
    },
    /// One step of the removal of a deleted org's rows (see `purge`).
    PurgeOrg,
    /// The deleted org's own row, last.
    DropOrg,
}

/// The writes of one org message: committed together or not at all.
#[derive(Debug, Clone)]
pub struct WriteBatch {
    pub org: OrgId,
    pub ops: Vec<WriteOp>,
    /// Whose actor wrote it, on PostgreSQL (`None` on SQLite, which has
    /// one server, and for an org's creation).
    pub fence: Option<Fence>,
    /// The org's change mark and open tasks per status once the message
    /// that wrote it was applied, for the org's boards: a notice of this
    /// commit tells them (`None` for writes no org actor made).
    pub marked: Option<MarkedCounts>,
    /// Whether it gives the webhook delivery worker work once committed:
    /// events of an org with an active endpoint, or a test event.
    pub wakes_deliveries: bool,
}

impl WriteBatch {
    pub fn new(org: OrgId, ops: Vec<WriteOp>) -> Self {
        WriteBatch {
            org,
            ops,
            fence: None,
            marked: None,
            wakes_deliveries: false,
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
fn padded<T>(items: &[T]) -> impl Iterator<Item = Vec<Option<&T>>> {
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
    /// Delivery workers' turns.
    settled: Vec<(OrgId, &'a Settled)>,
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
            settled: Vec::new(),
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
                    WriteOp::SettleDeliveries(settled) => {
                        plan.settled.extend(settled.iter().map(|s| (org, s)));
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

impl Store {
    /// A connection for a group-commit writer to keep.
    ///
    /// On SQLite it is a connection of its own, whose thread (sqlx runs
    /// each connection on one) is given the nice value `sqlite_nice`: every
    /// request waits for the writer's commits, one at a time, and under
    /// load the request threads held both cores while the commit's thread
    /// waited to run (see `writer_thread`).
    pub async fn writer_conn(&self, sqlite_nice: i32) -> Result<WriterConn> {
        match self {
            Store::Sqlite(pool) => sqlite::own_conn(pool, sqlite_nice).await,
            Store::Postgres(pool, links) => postgres::writer_conn(pool, links).await,
        }
    }

    /// A connection for one commit: see [`Store::apply`].
    async fn one_off_conn(&self) -> Result<WriterConn> {
        Ok(match self {
            Store::Sqlite(pool) => WriterConn::sqlite(SqliteConn::Pooled(pool.acquire().await?)),
            Store::Postgres(pool, links) => postgres::writer_conn(pool, links).await?,
        })
    }

    /// Settles what commits on connections of the pool left unsettled (on
    /// SQLite; PostgreSQL leaves nothing).
    #[cfg(test)]
    pub(crate) async fn settle(&self) -> Result<()> {
        if let Store::Sqlite(pool) = self {
            sqlx::query(&sqlite::settle_statements())
                .execute(pool)
                .await?;
        }
        Ok(())
    }

    /// Commits batches on a connection of the pool: see [`WriterConn::apply`].
    pub async fn apply(&self, batches: &[&WriteBatch]) -> Result<()> {
        self.one_off_conn().await?.apply(batches).await.map(drop)
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
    /// Answers the id of the commit's first event: its events are numbered
    /// on from there, batch after batch, in the order of their writes (the
    /// event stream's live events carry these ids).
    pub async fn apply(&mut self, batches: &[&WriteBatch]) -> Result<i64> {
        let plan = CommitPlan::new(batches);
        match self {
            WriterConn::Sqlite {
                conn,
                settled_at,
                last_event_id,
            } => {
                let settle = settled_at.elapsed() >= sqlite::SETTLE_EVERY;
                let result = sqlite::commit(conn, &plan, settle, last_event_id).await;
                let events = plan.events.len() as i64;
                let result = result.map(|()| last_event_id.map_or(1, |last| last - events + 1));
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
                let result = postgres::commit(conn, &plan, &linked).await;
                match result {
                    Ok(()) => links.committed(&plan, &linked),
                    // The commit may have happened all the same (an answer
                    // lost with the connection): the tasks' rows say.
                    Err(_) => links.forget(&plan),
                }
                result.map(|()| first_id)
            }
        }
    }
}
