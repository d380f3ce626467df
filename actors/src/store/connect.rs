//! Opening a store: the backend is chosen from the URL, the pool is tuned
//! for it and its migrations run before anything else touches it.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::{EventLinks, Result, Store, StoreOptions};

impl Store {
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self> {
        if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            let connect = PgConnectOptions::from_str(url)?.options([("synchronous_commit", "on")]);
            let pool = PgPoolOptions::new()
                .max_connections(options.max_connections.max(4) * 2)
                // An outage is noticed in seconds, not after a long wait.
                .acquire_timeout(Duration::from_secs(5))
                .connect_with(connect)
                .await?;
            sqlx::migrate!("../migrations/postgres").run(&pool).await?;
            let last_event: i64 =
                sqlx::query_scalar("SELECT COALESCE(MAX(event_id), 0) FROM task_events")
                    .fetch_one(&pool)
                    .await?;
            Ok(Store::Postgres(
                pool,
                Arc::new(EventLinks::after(last_event)),
            ))
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
                // Statement journals (a multi-row UPDATE keeps one, to undo
                // itself alone) in memory rather than in temporary files.
                // The page cache stays at SQLite's default (2 MiB): a
                // connection's cache is emptied whenever another one has
                // written, and the writer's every commit walks its cache's
                // hash table (`pcache1Truncate`), so a larger cache cost
                // the one serial step more than it saved.
                .pragma("temp_store", "memory");
            if let Some(dir) = connect.get_filename().parent() {
                if !dir.as_os_str().is_empty() {
                    std::fs::create_dir_all(dir).map_err(sqlx::Error::Io)?;
                }
            }
            let pool = SqlitePoolOptions::new()
                .max_connections(options.max_connections)
                .min_connections(1)
                // A connection is a file handle of this process: nothing on
                // the other side can drop it, so pinging it on every acquire
                // (a round trip to its thread) only costs.
                .test_before_acquire(false)
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
            Store::Postgres(..) => "postgres",
        }
    }

    /// How many group-commit writers this backend benefits from. SQLite has
    /// one writer whatever we do; PostgreSQL commits in parallel, on
    /// `pg_writers` lanes.
    pub fn writer_count(&self, pg_writers: usize) -> usize {
        match self {
            Store::Sqlite(_) => 1,
            Store::Postgres(..) => pg_writers,
        }
    }

    pub async fn close(&self) {
        on_pool!(self, pool => pool.close().await)
    }

    /// Whether the store answers a trivial query.
    pub async fn ping(&self) -> Result<()> {
        on_pool!(self, pool => {
            sqlx::query("SELECT 1").execute(pool).await?;
        });
        Ok(())
    }
}
