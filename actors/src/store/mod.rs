//! Storage: the one boundary between the engine and SQL.
//!
//! `Store` speaks the domain (`apply` a batch of writes, load an org's open
//! tasks, read tasks by id, list a page) and hides the backend: SQLite, the
//! embedded default, or PostgreSQL, chosen once from the URL. The SQL is
//! shared where the dialects agree (both accept `$n` placeholders); the few
//! dialect-specific fragments match on the backend where they are used.
//! Every query is scoped by `org_id`. Only the engine crate touches this
//! module.
//!
//! The `impl Store` is spread by concern over `connect`, `commit`, `tasks`,
//! `accounts`, `abuse`, `usage` and `org_records`; `rows` holds the row
//! shapes. This file holds what they share: the types, the macros and the
//! helpers that run a query on either backend.

use std::sync::Arc;

use sqlx::postgres::{PgPool, PgRow};
use sqlx::sqlite::{SqlitePool, SqliteRow};
use sqlx::FromRow;

use crate::domain::OrgId;

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
    /// The store cannot be reached or cannot take writes (down, disk full).
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
    /// Another server holds the SQLite database file.
    #[error("{0}")]
    Held(String),
    /// A command refused a store as it stands (its schema, its rows, a
    /// server on it), saying why.
    #[error("{0}")]
    Refused(String),
    /// A commit's fence failed: another node owns one of its orgs now.
    #[error("an org of this commit is owned by another node")]
    Fenced,
}

impl StoreError {
    /// A commit's error: a failed fence (`TQ001`, migration
    /// `0017_cluster`) is told apart from the rest.
    pub(crate) fn from_commit(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(db) if db.code().as_deref() == Some("TQ001") => {
                StoreError::Fenced
            }
            _ => StoreError::Sql(e),
        }
    }

    /// A failure of the store itself (unreachable, shutting down, out of
    /// disk or locked), not of what was asked of it: retrying later helps.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Unavailable(_) => true,
            StoreError::Sql(e) => sql_unavailable(e),
            StoreError::Migrate(sqlx::migrate::MigrateError::Execute(e)) => sql_unavailable(e),
            StoreError::ReadFailed(_) => false,
            StoreError::Migrate(_)
            | StoreError::Corrupt(_)
            | StoreError::OrgReloading
            | StoreError::Fenced
            | StoreError::Held(_)
            | StoreError::Refused(_)
            | StoreError::WriterGone => false,
        }
    }
}

fn sql_unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                // Busy (5), read-only (8), I/O error (10), full (13), can't open (14).
                let primary = code.parse::<i32>().unwrap_or(0) & 0xff;
                matches!(primary, 5 | 8 | 10 | 13 | 14)
            } else {
                // Connection exceptions (08), insufficient resources such as a
                // full disk (53), operator intervention (57P), system errors (58).
                ["08", "53", "57P", "58"]
                    .iter()
                    .any(|class| code.starts_with(class))
            }
        }
        _ => false,
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// `synchronous=FULL` (durable against machine crashes) unless false.
    pub sqlite_full_sync: bool,
    pub max_connections: u32,
    /// Group-commit lanes on PostgreSQL (SQLite always has one).
    pub pg_writers: usize,
    /// The nice value of the SQLite writer's thread (0: the default).
    pub sqlite_writer_nice: i32,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            sqlite_full_sync: true,
            max_connections: 8,
            pg_writers: 4,
            sqlite_writer_nice: -10,
        }
    }
}

#[derive(Debug, Clone)]
pub enum Store {
    Sqlite(SqlitePool),
    /// With the event ids and links its writers share (`EventLinks`).
    Postgres(PgPool, Arc<EventLinks>),
}

/// Runs `$body` with `$pool` bound to whichever backend pool this store has.
/// The body is type-checked once per backend.
macro_rules! on_pool {
    ($store:expr, $pool:ident => $body:expr) => {
        match $store {
            Store::Sqlite($pool) => $body,
            Store::Postgres($pool, _) => $body,
        }
    };
}

/// A value bound into a query whose arguments are only known at run time.
#[derive(Clone)]
enum Arg {
    Text(String),
    Int(i64),
    /// A NULL of type text.
    NullText,
}

/// Binds `$args`, a `Vec<Arg>`, to `$query` in order.
macro_rules! bind_args {
    ($query:expr, $args:expr) => {{
        let mut q = $query;
        for a in $args {
            q = match a {
                Arg::Text(s) => q.bind(s),
                Arg::Int(i) => q.bind(i),
                Arg::NullText => q.bind(None::<String>),
            };
        }
        q
    }};
}

mod abuse;
mod accounts;
mod backup;
mod board_sessions;
mod cluster;
mod commit;
mod connect;
mod deletion;
mod events;
mod keys;
mod migrate;
mod org_records;
mod reports;
mod retention;
mod rows;
mod schedules;
mod sessions;
mod tasks;
#[cfg(test)]
mod tests;
mod usage;
mod vectors;
mod webhooks;
mod writer_thread;

pub use backup::backup_sqlite;
pub use cluster::{nodes_seen, NodeAddress, NodeRow, OwnerRow, TrafficCounts};
pub use commit::{EventLinks, Fence, WriteBatch, WriteOp, WriterConn};
pub use connect::hold_sqlite_file;
pub use events::LoggedEvent;
pub use keys::ClientDek;
pub use migrate::{migrate_store, Continued, CopyProgress, Migrated, TableCount};
pub use reports::ReportKey;
pub use webhooks::{
    AfterAttempt, DeliveryRecord, DueLog, DueRow, NewRow, Settled, Target, Turn, LOG_KEPT,
};

/// A row type that both backends can decode.
trait BackendRow: Send + Unpin + for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> {}

impl<R> BackendRow for R where
    R: Send + Unpin + for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow>
{
}

impl Store {
    /// The event ids and links the PostgreSQL writers share.
    pub(crate) fn event_links(&self) -> Option<Arc<EventLinks>> {
        match self {
            Store::Postgres(_, links) => Some(links.clone()),
            Store::Sqlite(_) => None,
        }
    }

    /// Every row `sql` returns with `args` bound to `$1, $2, ...`.
    async fn fetch_all<R: BackendRow>(&self, sql: &str, args: Vec<Arg>) -> Result<Vec<R>> {
        Ok(on_pool!(self, pool => {
            bind_args!(sqlx::query_as(sql), args).fetch_all(pool).await?
        }))
    }

    /// Every row a query keyed by one org (`$1`) returns.
    async fn org_rows<R: BackendRow>(&self, sql: &str, org: OrgId) -> Result<Vec<R>> {
        self.fetch_all(sql, vec![Arg::Text(org.to_string())]).await
    }

    /// The first row `sql` returns with `args` bound to `$1, $2, ...`, if any.
    async fn fetch_optional<R: BackendRow>(&self, sql: &str, args: Vec<Arg>) -> Result<Option<R>> {
        Ok(on_pool!(self, pool => {
            bind_args!(sqlx::query_as(sql), args).fetch_optional(pool).await?
        }))
    }

    /// A query of the events of the tasks `t` that match `tasks`, oldest
    /// first; `columns` are columns of `task_events`. No index finds a
    /// task's events (migrations `0013_event_chain` on SQLite,
    /// `0016_event_chain` on PostgreSQL): the query walks each task's chain
    /// back from the task row's `last_event_id`, one primary-key lookup per
    /// event.
    fn events_in_order(columns: &[&str], tasks: &str) -> String {
        let of_e: Vec<String> = columns.iter().map(|c| format!("e.{c}")).collect();
        let of_e = of_e.join(", ");
        let listed = columns.join(", ");
        format!(
            "WITH RECURSIVE chain (event_id, prev_event_id, {listed}) AS (\
             SELECT e.event_id, e.prev_event_id, {of_e} FROM tasks t \
             JOIN task_events e ON e.event_id = t.last_event_id WHERE {tasks} \
             UNION ALL \
             SELECT e.event_id, e.prev_event_id, {of_e} FROM chain c \
             JOIN task_events e ON e.event_id = c.prev_event_id\
             ) SELECT {listed} FROM chain ORDER BY event_id"
        )
    }
}

/// Converts rows to domain records, failing on the first malformed one.
fn records<R, T>(rows: Vec<R>) -> Result<Vec<T>>
where
    T: TryFrom<R, Error = StoreError>,
{
    rows.into_iter().map(T::try_from).collect()
}
