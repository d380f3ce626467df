//! Storage: the one boundary between the engine and SQL.
//!
//! `Store` speaks the domain (`apply` a batch of writes, load an org's open
//! tasks, read tasks by id, list a page) and hides the backend: SQLite, the
//! embedded default, or PostgreSQL, chosen once from the URL. The SQL is
//! shared where the dialects agree (both accept `$n` placeholders); the few
//! dialect-specific fragments live in `Dialect`. Every query is scoped by
//! `org_id`. Only the engine crate touches this module.

mod rows;

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::QueryBuilder;

use crate::api::ListTasks;
use crate::domain::account::{KeyRecord, MemberRecord, OrgRecord};
use crate::domain::admin::{Membership, Tag, Team};
use crate::domain::order::ListKey;
use crate::domain::usage::Usage;
use crate::domain::{
    ContentField, KeyId, OrgId, StoredEvent, StoredTask, TaskHeader, TaskId, TaskStatus,
};
use rows::{
    EventRow, FullRow, HeaderRow, KeyRow, MemberRow, MembershipRow, OrgRow, TagRow, TeamRow,
};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Sql(#[from] sqlx::Error),
    #[error(transparent)]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored row is malformed: {0}")]
    Corrupt(String),
    #[error("an earlier write of this org failed; the org is reloading")]
    OrgReloading,
    #[error("the writer has stopped")]
    WriterGone,
    #[error("grouped read failed: {0}")]
    ReadFailed(String),
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// One change to persist. A `WriteBatch` of these commits atomically.
#[derive(Debug, Clone)]
pub enum WriteOp {
    InsertOrg(OrgRecord),
    InsertTasks(Vec<StoredTask>),
    /// Overwrites every header column of an existing task.
    UpdateHeader(TaskHeader),
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
}

#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// `synchronous=FULL` (durable against machine crashes) unless false.
    pub sqlite_full_sync: bool,
    pub max_connections: u32,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            sqlite_full_sync: true,
            max_connections: 8,
        }
    }
}

#[derive(Debug, Clone)]
pub enum Store {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Runs `$body` with `$pool` bound to whichever backend pool this store has.
/// The body is type-checked once per backend.
macro_rules! on_pool {
    ($store:expr, $pool:ident => $body:expr) => {
        match $store {
            Store::Sqlite($pool) => $body,
            Store::Postgres($pool) => $body,
        }
    };
}

/// A value bound into a dynamically built query.
enum Arg {
    Text(String),
    Int(i64),
}

macro_rules! bind_all {
    ($query:expr, $args:expr) => {{
        let mut q = $query;
        for a in $args {
            q = match a {
                Arg::Text(s) => q.bind(s.clone()),
                Arg::Int(i) => q.bind(*i),
            };
        }
        q
    }};
}

/// Rows per multi-row statement: well under both backends' bind limits
/// (SQLite 32766, PostgreSQL 65535) at 18 columns.
const ROWS_PER_STATEMENT: usize = 500;

/// The changes of a group commit, coalesced. Per task, the last header and
/// the last value of each content field win, which is what applying the
/// batches one by one would leave; inserts run before updates and events
/// keep their order, so the result is the same as applying them in turn.
type ContentValues<'a> = HashMap<(OrgId, TaskId), &'a Option<Vec<u8>>>;

struct CommitPlan<'a> {
    accounts: Vec<(OrgId, &'a WriteOp)>,
    inserts: Vec<(OrgId, &'a StoredTask)>,
    headers: HashMap<(OrgId, TaskId), (OrgId, &'a TaskHeader)>,
    content: Vec<(ContentField, ContentValues<'a>)>,
    events: Vec<(OrgId, &'a StoredEvent)>,
}

impl<'a> CommitPlan<'a> {
    fn new(batches: &[&'a WriteBatch]) -> Self {
        let mut plan = CommitPlan {
            accounts: Vec::new(),
            inserts: Vec::new(),
            headers: HashMap::new(),
            content: Vec::new(),
            events: Vec::new(),
        };
        for batch in batches {
            let org = batch.org;
            for op in &batch.ops {
                match op {
                    WriteOp::InsertTasks(tasks) => {
                        plan.inserts.extend(tasks.iter().map(|t| (org, t)));
                    }
                    WriteOp::UpdateHeader(h) => {
                        plan.headers.insert((org, h.task_id), (org, h));
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
                    WriteOp::SaveUsage(_) => {
                        // Only the latest counters of an org matter.
                        plan.accounts
                            .retain(|(o, op)| !(*o == org && matches!(op, WriteOp::SaveUsage(_))));
                        plan.accounts.push((org, op));
                    }
                    other => plan.accounts.push((org, other)),
                }
            }
        }
        plan
    }
}

/// Binds an org id and the stored form of a task header, in the column
/// order of `tasks` (`org_id, task_id, status, status_rank, priority,
/// assignee, tags, blocked_by, parent_task_id, created_at, updated_at,
/// lease_id, lease_expires_at, lease_seconds`).
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
    }};
}

const HEADER_COLUMNS: &str = "task_id, status, priority, assignee, tags, blocked_by, \
     parent_task_id, created_at, updated_at, lease_id, lease_expires_at, lease_seconds";
const FULL_COLUMNS: &str = "task_id, status, priority, assignee, tags, blocked_by, \
     parent_task_id, created_at, updated_at, lease_id, lease_expires_at, lease_seconds, \
     title, description, metadata, output";

fn placeholders(start: usize, n: usize) -> String {
    (start..start + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Store {
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self> {
        if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            let connect = PgConnectOptions::from_str(url)?.options([("synchronous_commit", "on")]);
            let pool = PgPoolOptions::new()
                .max_connections(options.max_connections.max(4) * 2)
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(connect)
                .await?;
            sqlx::migrate!("../migrations/postgres").run(&pool).await?;
            Ok(Store::Postgres(pool))
        } else {
            let connect = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(if options.sqlite_full_sync {
                    SqliteSynchronous::Full
                } else {
                    SqliteSynchronous::Normal
                })
                .busy_timeout(Duration::from_secs(10))
                .pragma("cache_size", "-32768");
            if let Some(dir) = connect.get_filename().parent() {
                if !dir.as_os_str().is_empty() {
                    std::fs::create_dir_all(dir).map_err(sqlx::Error::Io)?;
                }
            }
            let pool = SqlitePoolOptions::new()
                .max_connections(options.max_connections)
                .min_connections(1)
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(connect)
                .await?;
            sqlx::migrate!("../migrations/sqlite").run(&pool).await?;
            Ok(Store::Sqlite(pool))
        }
    }

    pub fn backend(&self) -> &'static str {
        match self {
            Store::Sqlite(_) => "sqlite",
            Store::Postgres(_) => "postgres",
        }
    }

    /// How many group-commit writers this backend benefits from. SQLite has
    /// one writer whatever we do; PostgreSQL commits in parallel.
    pub fn writer_count(&self) -> usize {
        match self {
            Store::Sqlite(_) => 1,
            Store::Postgres(_) => 4,
        }
    }

    pub async fn close(&self) {
        on_pool!(self, pool => pool.close().await)
    }

    /// Commits every batch in one transaction. The batches' changes are
    /// coalesced first (see `CommitPlan`), so a group commit of many requests
    /// costs a handful of statements, not a few per request.
    pub async fn apply(&self, batches: &[&WriteBatch]) -> Result<()> {
        let plan = CommitPlan::new(batches);
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            for (org, op) in &plan.accounts {
                let org = org.to_string();
                match op {
                    WriteOp::InsertOrg(record) => {
                        let o = OrgRow::from(record);
                        sqlx::query(
                            "INSERT INTO orgs (org_id, name, tier, encryption, seats, suspended, \
                             limits, wrapped_dek, created_at, idp_enrolled) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                        )
                        .bind(o.0).bind(o.1).bind(o.2).bind(o.3).bind(o.4).bind(o.5).bind(o.6).bind(o.7).bind(o.8).bind(o.9)
                        .execute(&mut *tx)
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
                        .execute(&mut *tx)
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
                        .execute(&mut *tx)
                        .await?;
                    }
                    WriteOp::DeactivateKey(key_id) => {
                        sqlx::query("UPDATE api_keys SET active = 0 WHERE org_id = $1 AND key_id = $2")
                            .bind(&org)
                            .bind(key_id.to_string())
                            .execute(&mut *tx)
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
                        .execute(&mut *tx)
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
                        .execute(&mut *tx)
                        .await?;
                    }
                    WriteOp::DeleteTag(name) => {
                        sqlx::query("DELETE FROM tags WHERE org_id = $1 AND name = $2")
                            .bind(&org)
                            .bind(name)
                            .execute(&mut *tx)
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
                        .execute(&mut *tx)
                        .await?;
                    }
                    WriteOp::DeleteTeam(name) => {
                        sqlx::query("DELETE FROM team_members WHERE org_id = $1 AND team = $2")
                            .bind(&org)
                            .bind(name)
                            .execute(&mut *tx)
                            .await?;
                        sqlx::query("DELETE FROM teams WHERE org_id = $1 AND name = $2")
                            .bind(&org)
                            .bind(name)
                            .execute(&mut *tx)
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
                        .execute(&mut *tx)
                        .await?;
                    }
                    WriteOp::DeleteMembership { team, email } => {
                        sqlx::query("DELETE FROM team_members WHERE org_id = $1 AND team = $2 AND email = $3")
                            .bind(&org)
                            .bind(team)
                            .bind(email)
                            .execute(&mut *tx)
                            .await?;
                    }
                    WriteOp::SaveUsage(u) => {
                        sqlx::query(
                            "INSERT INTO org_usage (org_id, month, requests, tasks, plans, read_tat, write_tat) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (org_id) DO UPDATE SET \
                             month = excluded.month, requests = excluded.requests, tasks = excluded.tasks, \
                             plans = excluded.plans, read_tat = excluded.read_tat, write_tat = excluded.write_tat",
                        )
                        .bind(&org)
                        .bind(&u.month)
                        .bind(u.requests)
                        .bind(u.tasks)
                        .bind(u.plans)
                        .bind(i64::try_from(u.read_tat).unwrap_or(i64::MAX))
                        .bind(i64::try_from(u.write_tat).unwrap_or(i64::MAX))
                        .execute(&mut *tx)
                        .await?;
                    }
                    WriteOp::InsertTasks(_)
                    | WriteOp::UpdateHeader(_)
                    | WriteOp::SetContent { .. }
                    | WriteOp::InsertEvents(_) => unreachable!("task ops are planned apart"),
                }
            }
            for chunk in plan.inserts.chunks(ROWS_PER_STATEMENT) {
                let mut qb = QueryBuilder::new(
                    "INSERT INTO tasks (org_id, task_id, status, status_rank, priority, \
                     assignee, tags, blocked_by, parent_task_id, created_at, updated_at, \
                     lease_id, lease_expires_at, lease_seconds, title, description, \
                     metadata, output) ",
                );
                qb.push_values(chunk, |mut b, (org, t)| {
                    push_header!(b, org, &t.header)
                        .push_bind(t.title.clone())
                        .push_bind(t.description.clone())
                        .push_bind(t.metadata.clone())
                        .push_bind(t.output.clone());
                });
                qb.build().execute(&mut *tx).await?;
            }
            let headers: Vec<_> = plan.headers.values().collect();
            for chunk in headers.chunks(ROWS_PER_STATEMENT) {
                let mut qb = QueryBuilder::new(
                    "UPDATE tasks SET status = v.column3, status_rank = v.column4, \
                     priority = v.column5, assignee = v.column6, tags = v.column7, \
                     blocked_by = v.column8, parent_task_id = v.column9, updated_at = v.column11, \
                     lease_id = v.column12, lease_expires_at = v.column13, \
                     lease_seconds = v.column14 FROM (",
                );
                qb.push_values(chunk, |mut b, (org, header)| {
                    push_header!(b, org, *header);
                });
                qb.push(") AS v WHERE tasks.org_id = v.column1 AND tasks.task_id = v.column2");
                qb.build().execute(&mut *tx).await?;
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
                for chunk in values.chunks(ROWS_PER_STATEMENT) {
                    let mut qb = QueryBuilder::new(format!("UPDATE tasks SET {column} = v.column3 FROM ("));
                    qb.push_values(chunk, |mut b, ((org, task), value)| {
                        b.push_bind(org.to_string())
                            .push_bind(task.to_string())
                            .push_bind((**value).clone());
                    });
                    qb.push(") AS v WHERE tasks.org_id = v.column1 AND tasks.task_id = v.column2");
                    qb.build().execute(&mut *tx).await?;
                }
            }
            for chunk in plan.events.chunks(ROWS_PER_STATEMENT) {
                let mut qb = QueryBuilder::new(
                    "INSERT INTO task_events (org_id, task_id, from_status, to_status, \
                     agent_id, at, note) ",
                );
                qb.push_values(chunk, |mut b, (org, e)| {
                    b.push_bind(org.to_string())
                        .push_bind(e.task_id.to_string())
                        .push_bind(e.from_status.map(|s| s.as_str()))
                        .push_bind(e.to_status.as_str())
                        .push_bind(e.agent_id.clone())
                        .push_bind(e.at)
                        .push_bind(e.note.clone());
                });
                qb.build().execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    // ---- orgs, members, keys -------------------------------------------

    /// Creates an org with its owner and the owner's first key, atomically.
    pub async fn insert_org(
        &self,
        org: &OrgRecord,
        owner: &MemberRecord,
        key: &KeyRecord,
    ) -> Result<()> {
        let batch = WriteBatch {
            org: org.org_id,
            ops: vec![
                WriteOp::InsertOrg(org.clone()),
                WriteOp::InsertMember(owner.clone()),
                WriteOp::InsertKey(key.clone()),
            ],
        };
        self.apply(&[&batch]).await
    }

    pub async fn update_org(&self, org: &OrgRecord) -> Result<()> {
        let o = OrgRow::from(org);
        on_pool!(self, pool => {
            sqlx::query(
                "UPDATE orgs SET name = $2, tier = $3, encryption = $4, seats = $5, suspended = $6, \
                 limits = $7, wrapped_dek = $8, idp_enrolled = $9 WHERE org_id = $1",
            )
            .bind(o.0).bind(o.1).bind(o.2).bind(o.3).bind(o.4).bind(o.5).bind(o.6).bind(o.7).bind(o.9)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    pub async fn get_org(&self, org: OrgId) -> Result<Option<OrgRecord>> {
        let row: Option<OrgRow> = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT org_id, name, tier, encryption, seats, suspended, limits, wrapped_dek, \
                 created_at, idp_enrolled FROM orgs WHERE org_id = $1",
            )
            .bind(org.to_string())
            .fetch_optional(pool)
            .await?
        });
        row.map(OrgRecord::try_from).transpose()
    }

    pub async fn get_key(&self, key_id: KeyId) -> Result<Option<KeyRecord>> {
        let row: Option<KeyRow> = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT key_id, org_id, email, name, secret_hash, active, created_at FROM api_keys WHERE key_id = $1",
            )
            .bind(key_id.to_string())
            .fetch_optional(pool)
            .await?
        });
        row.map(KeyRecord::try_from).transpose()
    }

    /// Every row a query keyed by one org returns, on either backend.
    async fn org_rows<R>(&self, sql: &str, org: OrgId) -> Result<Vec<R>>
    where
        R: Send
            + Unpin
            + for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>
            + for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>,
    {
        Ok(on_pool!(self, pool => {
            sqlx::query_as(sql).bind(org.to_string()).fetch_all(pool).await?
        }))
    }

    pub async fn org_keys(&self, org: OrgId) -> Result<Vec<KeyRecord>> {
        let rows: Vec<KeyRow> = self
            .org_rows(
                "SELECT key_id, org_id, email, name, secret_hash, active, created_at FROM api_keys \
                 WHERE org_id = $1 ORDER BY created_at, key_id",
                org,
            )
            .await?;
        rows.into_iter().map(KeyRecord::try_from).collect()
    }

    pub async fn org_members(&self, org: OrgId) -> Result<Vec<MemberRecord>> {
        let rows: Vec<MemberRow> = self
            .org_rows(
                "SELECT org_id, email, role, seated, profile_tags, joined_at FROM members \
                 WHERE org_id = $1 ORDER BY joined_at, email",
                org,
            )
            .await?;
        rows.into_iter().map(MemberRecord::try_from).collect()
    }

    pub async fn org_tags(&self, org: OrgId) -> Result<Vec<Tag>> {
        let rows: Vec<TagRow> = self
            .org_rows(
                "SELECT name, strict, is_default, description, created_by, created_at FROM tags \
                 WHERE org_id = $1",
                org,
            )
            .await?;
        Ok(rows.into_iter().map(Tag::from).collect())
    }

    pub async fn org_teams(&self, org: OrgId) -> Result<Vec<Team>> {
        let rows: Vec<TeamRow> = self
            .org_rows(
                "SELECT name, tags, description, idp_only, created_by, created_at FROM teams \
                 WHERE org_id = $1",
                org,
            )
            .await?;
        rows.into_iter().map(Team::try_from).collect()
    }

    pub async fn org_memberships(&self, org: OrgId) -> Result<Vec<Membership>> {
        let rows: Vec<MembershipRow> = self
            .org_rows(
                "SELECT team, email, manual, idp, added_by, added_at FROM team_members \
                 WHERE org_id = $1",
                org,
            )
            .await?;
        Ok(rows.into_iter().map(Membership::from).collect())
    }

    pub async fn org_usage(&self, org: OrgId) -> Result<Option<Usage>> {
        let row: Option<(String, i64, i64, i64, i64, i64)> = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT month, requests, tasks, plans, read_tat, write_tat FROM org_usage WHERE org_id = $1",
            )
            .bind(org.to_string())
            .fetch_optional(pool)
            .await?
        });
        Ok(row.map(
            |(month, requests, tasks, plans, read_tat, write_tat)| Usage {
                month,
                requests,
                tasks,
                plans,
                read_tat: read_tat.max(0) as u64,
                write_tat: write_tat.max(0) as u64,
            },
        ))
    }

    // ---- abuse ----------------------------------------------------------

    /// Records a strike; answers the member's and the org's strike totals.
    pub async fn record_strike(&self, email: &str, org: OrgId, at: i64) -> Result<(i64, i64)> {
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query("INSERT INTO strikes (email, org_id, at) VALUES ($1, $2, $3)")
                .bind(email)
                .bind(org.to_string())
                .bind(at)
                .execute(&mut *tx)
                .await?;
            let (member,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM strikes WHERE email = $1")
                .bind(email)
                .fetch_one(&mut *tx)
                .await?;
            let (org_total,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM strikes WHERE org_id = $1")
                .bind(org.to_string())
                .fetch_one(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok((member, org_total))
        })
    }

    pub async fn block_member(&self, email: &str, at: i64) -> Result<()> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO blocked_members (email, blocked_at) VALUES ($1, $2) ON CONFLICT (email) DO NOTHING",
            )
            .bind(email)
            .bind(at)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    pub async fn is_blocked(&self, email: &str) -> Result<bool> {
        let row: Option<(String,)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT email FROM blocked_members WHERE email = $1")
                .bind(email)
                .fetch_optional(pool)
                .await?
        });
        Ok(row.is_some())
    }

    /// Lifts a block and clears the member's strikes; false if not blocked.
    pub async fn unblock_member(&self, email: &str) -> Result<bool> {
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            let lifted = sqlx::query("DELETE FROM blocked_members WHERE email = $1")
                .bind(email)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            sqlx::query("DELETE FROM strikes WHERE email = $1")
                .bind(email)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(lifted > 0)
        })
    }

    /// Every org the email is a member of.
    pub async fn member_orgs(&self, email: &str) -> Result<Vec<OrgId>> {
        let rows: Vec<(String,)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT org_id FROM members WHERE email = $1")
                .bind(email)
                .fetch_all(pool)
                .await?
        });
        rows.into_iter()
            .map(|(s,)| {
                s.parse()
                    .map_err(|_| StoreError::Corrupt(format!("org id {s}")))
            })
            .collect()
    }

    // ---- tasks ----------------------------------------------------------

    /// Headers of every task not yet finished: what an org actor holds.
    pub async fn open_task_headers(&self, org: OrgId) -> Result<Vec<TaskHeader>> {
        let sql = format!(
            "SELECT {HEADER_COLUMNS} FROM tasks WHERE org_id = $1 AND status_rank <= {}",
            TaskStatus::Blocked.rank()
        );
        let rows: Vec<HeaderRow> = self.org_rows(&sql, org).await?;
        rows.into_iter().map(TaskHeader::try_from).collect()
    }

    pub async fn task_headers(&self, org: OrgId, ids: &[TaskId]) -> Result<Vec<TaskHeader>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {HEADER_COLUMNS} FROM tasks WHERE org_id = $1 AND task_id IN ({})",
            placeholders(2, ids.len())
        );
        let rows: Vec<HeaderRow> = on_pool!(self, pool => {
            let mut q = sqlx::query_as(&sql).bind(org.to_string());
            for id in ids {
                q = q.bind(id.to_string());
            }
            q.fetch_all(pool).await?
        });
        rows.into_iter().map(TaskHeader::try_from).collect()
    }

    pub async fn tasks(&self, org: OrgId, ids: &[TaskId]) -> Result<Vec<StoredTask>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {FULL_COLUMNS} FROM tasks WHERE org_id = $1 AND task_id IN ({})",
            placeholders(2, ids.len())
        );
        let rows: Vec<FullRow> = on_pool!(self, pool => {
            let mut q = sqlx::query_as(&sql).bind(org.to_string());
            for id in ids {
                q = q.bind(id.to_string());
            }
            q.fetch_all(pool).await?
        });
        rows.into_iter().map(StoredTask::try_from).collect()
    }

    /// Tasks of several orgs in one query, for grouped reads.
    pub async fn tasks_by_keys(
        &self,
        keys: &[(OrgId, TaskId)],
    ) -> Result<Vec<(OrgId, StoredTask)>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let pairs: Vec<String> = (0..keys.len())
            .map(|i| format!("(${}, ${})", 2 * i + 1, 2 * i + 2))
            .collect();
        // A join with the key list, not `(org_id, task_id) IN (...)`, which
        // SQLite answers with a scan of the whole table.
        let sql = format!(
            "SELECT t.org_id, {} FROM (VALUES {}) AS v \
             JOIN tasks AS t ON t.org_id = v.column1 AND t.task_id = v.column2",
            FULL_COLUMNS
                .split(", ")
                .map(|c| format!("t.{}", c.trim()))
                .collect::<Vec<_>>()
                .join(", "),
            pairs.join(", ")
        );
        let rows: Vec<(String, FullRow)> = on_pool!(self, pool => {
            use sqlx::Row as _;
            let mut q = sqlx::query(&sql);
            for (org, task) in keys {
                q = q.bind(org.to_string()).bind(task.to_string());
            }
            let rows = q.fetch_all(pool).await?;
            rows.iter()
                .map(|r| {
                    Ok((
                        r.try_get(0)?,
                        (
                            r.try_get(1)?, r.try_get(2)?, r.try_get(3)?, r.try_get(4)?,
                            r.try_get(5)?, r.try_get(6)?, r.try_get(7)?, r.try_get(8)?,
                            r.try_get(9)?, r.try_get(10)?, r.try_get(11)?, r.try_get(12)?,
                            r.try_get(13)?, r.try_get(14)?, r.try_get(15)?, r.try_get(16)?,
                        ),
                    ))
                })
                .collect::<std::result::Result<Vec<_>, sqlx::Error>>()?
        });
        rows.into_iter()
            .map(|(org, row)| {
                let org = org
                    .parse()
                    .map_err(|_| StoreError::Corrupt(format!("org id {org}")))?;
                Ok((org, StoredTask::try_from(row)?))
            })
            .collect()
    }

    pub async fn task_events(&self, org: OrgId, task: TaskId) -> Result<Vec<StoredEvent>> {
        let rows: Vec<EventRow> = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT task_id, from_status, to_status, agent_id, at, note FROM task_events \
                 WHERE org_id = $1 AND task_id = $2 ORDER BY event_id",
            )
            .bind(org.to_string())
            .bind(task.to_string())
            .fetch_all(pool)
            .await?
        });
        rows.into_iter().map(StoredEvent::try_from).collect()
    }

    /// One page of `GET /tasks` in list order, strictly after `after`.
    pub async fn list_tasks(
        &self,
        org: OrgId,
        query: &ListTasks,
        after: Option<ListKey>,
        limit: u32,
    ) -> Result<Vec<StoredTask>> {
        let mut args = vec![Arg::Text(org.to_string())];
        let mut sql = format!("SELECT {FULL_COLUMNS} FROM tasks WHERE org_id = $1");
        let mut push = |sql: &mut String, fragment: &str, a: Arg| {
            args.push(a);
            sql.push_str(&fragment.replace("$?", &format!("${}", args.len())));
        };
        if !query.statuses.is_empty() {
            sql.push_str(" AND status IN (");
            for (i, s) in query.statuses.iter().enumerate() {
                push(
                    &mut sql,
                    if i == 0 { "$?" } else { ", $?" },
                    Arg::Text(s.as_str().to_owned()),
                );
            }
            sql.push(')');
        }
        if let Some(parent) = query.parent {
            push(
                &mut sql,
                " AND parent_task_id = $?",
                Arg::Text(parent.to_string()),
            );
        }
        if let Some(assignee) = &query.assignee {
            push(&mut sql, " AND assignee = $?", Arg::Text(assignee.clone()));
        }
        if let Some(p) = query.priority_max {
            push(&mut sql, " AND priority <= $?", Arg::Int(i64::from(p)));
        }
        if !query.tags.is_empty() {
            sql.push_str(match self {
                Store::Sqlite(_) => " AND EXISTS (SELECT 1 FROM json_each(tasks.tags) AS t WHERE t.value IN (",
                Store::Postgres(_) => " AND EXISTS (SELECT 1 FROM jsonb_array_elements_text(tasks.tags::jsonb) AS t(value) WHERE t.value IN (",
            });
            for (i, t) in query.tags.iter().enumerate() {
                push(
                    &mut sql,
                    if i == 0 { "$?" } else { ", $?" },
                    Arg::Text(t.clone()),
                );
            }
            sql.push_str("))");
        }
        if let Some(k) = after {
            push(
                &mut sql,
                " AND (status_rank, priority, created_at, task_id) > ($?",
                Arg::Int(k.rank),
            );
            push(&mut sql, ", $?", Arg::Int(i64::from(k.priority)));
            push(&mut sql, ", $?", Arg::Int(k.created_at));
            push(&mut sql, ", $?)", Arg::Text(k.task_id.to_string()));
        }
        sql.push_str(" ORDER BY status_rank, priority, created_at, task_id");
        push(&mut sql, " LIMIT $?", Arg::Int(i64::from(limit)));
        let rows: Vec<FullRow> = on_pool!(self, pool => {
            bind_all!(sqlx::query_as(&sql), &args).fetch_all(pool).await?
        });
        rows.into_iter().map(StoredTask::try_from).collect()
    }

    /// Orgs that hold a lease: their actors must run so leases can expire.
    pub async fn orgs_with_leases(&self) -> Result<Vec<OrgId>> {
        let rows: Vec<(String,)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT DISTINCT org_id FROM tasks WHERE lease_expires_at IS NOT NULL")
                .fetch_all(pool)
                .await?
        });
        rows.into_iter()
            .map(|(s,)| {
                s.parse()
                    .map_err(|_| StoreError::Corrupt(format!("org id {s}")))
            })
            .collect()
    }

    /// The first org with this name, if any (used for the feedback org).
    pub async fn org_by_name(&self, name: &str) -> Result<Option<OrgId>> {
        let row: Option<(String,)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT org_id FROM orgs WHERE name = $1 ORDER BY created_at LIMIT 1")
                .bind(name)
                .fetch_optional(pool)
                .await?
        });
        row.map(|(s,)| {
            s.parse()
                .map_err(|_| StoreError::Corrupt(format!("org id {s}")))
        })
        .transpose()
    }
}
