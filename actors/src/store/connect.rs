//! Opening a store: the backend is chosen from the URL, the pool is tuned
//! for it and its migrations run before anything else touches it.

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::migrate::{Migrate, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::{EventLinks, Result, Store, StoreError, StoreOptions};

/// Holds a SQLite database file for this server: one server per file
/// (several nodes need PostgreSQL). The lock is an advisory lock on the
/// file itself, kept while the answered handle lives and released by the
/// system when the process ends, however it ends; SQLite's own locks are
/// of another kind and do not see it. `None` for PostgreSQL.
pub fn hold_sqlite_file(url: &str) -> Result<Option<std::fs::File>> {
    if is_postgres(url) {
        return Ok(None);
    }
    let options = SqliteConnectOptions::from_str(url)?;
    let path = options.get_filename();
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir).map_err(sqlx::Error::Io)?;
        }
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(sqlx::Error::Io)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::Held(format!(
            "another taskq server is running on {}: a SQLite database has one server \
             (several nodes need PostgreSQL)",
            path.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(sqlx::Error::Io(e).into()),
    }
}

impl Store {
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self> {
        if is_postgres(url) {
            let pool = postgres_pool(options)
                .connect_with(postgres_options(url)?)
                .await?;
            let migrator = sqlx::migrate!("../migrations/postgres");
            let run = MigrationRun::start(&migrator, applied_migrations(&pool).await);
            migrator.run(&pool).await?;
            run.finish();
            Ok(Store::Postgres(pool, Arc::new(EventLinks::default())))
        } else {
            let connect = sqlite_options(url, options)?;
            if let Some(dir) = connect.get_filename().parent() {
                if !dir.as_os_str().is_empty() {
                    std::fs::create_dir_all(dir).map_err(sqlx::Error::Io)?;
                }
            }
            let pool = sqlite_pool(options)
                .min_connections(1)
                .connect_with(connect)
                .await?;
            let migrator = sqlx::migrate!("../migrations/sqlite");
            let run = MigrationRun::start(&migrator, applied_migrations(&pool).await);
            migrator.run(&pool).await?;
            run.finish();
            Ok(Store::Sqlite(pool))
        }
    }

    /// A second pool on a store [`Store::connect`] has opened (migrations
    /// run): it opens no connection until one is first asked for, so each
    /// connection is opened by the thread that first uses the pool. The
    /// reports' pool is one: its SQLite connections' threads then inherit
    /// the reports thread's idle priority, and a server whose cores are
    /// busy does not fail to start waiting for that thread to connect.
    pub fn connect_lazy(url: &str, options: &StoreOptions) -> Result<Self> {
        if is_postgres(url) {
            let pool = postgres_pool(options).connect_lazy_with(postgres_options(url)?);
            Ok(Store::Postgres(pool, Arc::new(EventLinks::default())))
        } else {
            let pool = sqlite_pool(options).connect_lazy_with(sqlite_options(url, options)?);
            Ok(Store::Sqlite(pool))
        }
    }

    /// The latest migration this build applies: what a list cursor is
    /// bound to, so a deployment that changes the schema refuses old ones.
    pub fn schema_version(&self) -> i64 {
        let migrator = match self {
            Store::Sqlite(_) => sqlx::migrate!("../migrations/sqlite"),
            Store::Postgres(..) => sqlx::migrate!("../migrations/postgres"),
        };
        migrator.iter().map(|m| m.version).max().unwrap_or(0)
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

    /// Runs `f` under a PostgreSQL advisory lock, so that nodes starting
    /// together do it one at a time (on SQLite, one server, it just runs).
    pub async fn exclusively<T>(
        &self,
        lock: i64,
        f: impl std::future::Future<Output = T>,
    ) -> Result<T> {
        let Store::Postgres(pool, _) = self else {
            return Ok(f.await);
        };
        let mut conn = pool.acquire().await?;
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(lock)
            .execute(&mut *conn)
            .await?;
        let out = f.await;
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(lock)
            .execute(&mut *conn)
            .await?;
        Ok(out)
    }

    /// Whether the store answers a trivial query.
    pub async fn ping(&self) -> Result<()> {
        on_pool!(self, pool => {
            sqlx::query("SELECT 1").execute(pool).await?;
        });
        Ok(())
    }
}

fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres:") || url.starts_with("postgresql:")
}

fn postgres_options(url: &str) -> Result<PgConnectOptions> {
    Ok(PgConnectOptions::from_str(url)?.options([("synchronous_commit", "on")]))
}

fn postgres_pool(options: &StoreOptions) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(options.max_connections.max(4) * 2)
        // An outage is noticed in seconds, not after a long wait.
        .acquire_timeout(Duration::from_secs(5))
}

fn sqlite_options(url: &str, options: &StoreOptions) -> Result<SqliteConnectOptions> {
    Ok(SqliteConnectOptions::from_str(url)?
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
        .pragma("temp_store", "memory")
        // SQLite never shrinks its write-ahead log by itself: after a
        // burst of deletes (a retention sweep) the log kept its peak
        // size. Once a checkpoint has emptied it, it is cut back to this.
        .pragma("journal_size_limit", "67108864"))
}

fn sqlite_pool(options: &StoreOptions) -> SqlitePoolOptions {
    SqlitePoolOptions::new()
        .max_connections(options.max_connections)
        // A connection is a file handle of this process: nothing on
        // the other side can drop it, so pinging it on every acquire
        // (a round trip to its thread) only costs.
        .test_before_acquire(false)
        .acquire_timeout(Duration::from_secs(10))
}

/// The versions the database records as applied; none when it records
/// nothing yet (a new database has no migrations table).
async fn applied_migrations<DB: sqlx::Database>(pool: &sqlx::Pool<DB>) -> Vec<i64>
where
    DB::Connection: Migrate,
{
    let Ok(mut conn) = pool.acquire().await else {
        return Vec::new();
    };
    match conn.list_applied_migrations().await {
        Ok(applied) => applied.into_iter().map(|m| m.version).collect(),
        Err(_) => Vec::new(),
    }
}

/// The migrations of `migrator` not in `applied`, as `0016 event chain`.
fn pending_migrations(migrator: &Migrator, applied: &[i64]) -> Vec<String> {
    migrator
        .iter()
        .filter(|m| !m.migration_type.is_down_migration() && !applied.contains(&m.version))
        .map(|m| format!("{:04} {}", m.version, m.description))
        .collect()
}

/// Migrations run before the server answers anything, and one that
/// rewrites a large table takes minutes (docs/guide/configuration.md, "Upgrades"): the log says
/// which ones run before they start and how long they took, so that a
/// silent start is not taken for a hang.
struct MigrationRun(Option<(usize, Instant)>);

impl MigrationRun {
    fn start(migrator: &Migrator, applied: Vec<i64>) -> Self {
        let pending = pending_migrations(migrator, &applied);
        if pending.is_empty() {
            return MigrationRun(None);
        }
        tracing::info!(
            count = pending.len(),
            migrations = %pending.join(", "),
            "applying database migrations; the server answers when they are done"
        );
        MigrationRun(Some((pending.len(), Instant::now())))
    }

    fn finish(self) {
        if let Some((count, started)) = self.0 {
            tracing::info!(
                count,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "database migrations applied"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_migrations_are_those_not_applied() {
        let migrator = sqlx::migrate!("../migrations/postgres");
        let all: Vec<i64> = migrator.iter().map(|m| m.version).collect();
        let last = migrator.iter().last().expect("migrations");
        assert_eq!(
            pending_migrations(&migrator, &all[..all.len() - 1]),
            [format!("{:04} {}", last.version, last.description)]
        );
        assert!(pending_migrations(&migrator, &all).is_empty());
        let fresh = pending_migrations(&migrator, &[]);
        assert_eq!(fresh.len(), all.len());
        assert_eq!(fresh[0], "0001 init");
    }
}
