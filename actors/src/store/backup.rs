//! An online copy of a SQLite store (`taskq backup`): `VACUUM INTO` on a
//! read-only connection of its own, beside a running server. The copy is
//! one read transaction's snapshot, so it holds every write committed
//! before it began; in WAL mode the server's writer goes on meanwhile.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};

use super::{Result, StoreError};

/// Copies the SQLite database at `database_url` into `to`, which must not
/// exist yet, and checks the copy (`PRAGMA integrity_check`).
pub async fn backup_sqlite(database_url: &str, to: &Path) -> Result<()> {
    if !database_url.starts_with("sqlite:") {
        return Err(StoreError::Held(
            "taskq backup copies a SQLite store; for PostgreSQL use pg_dump".into(),
        ));
    }
    if to.exists() {
        return Err(StoreError::Held(format!(
            "{} exists already; name a new file",
            to.display()
        )));
    }
    let target = to
        .to_str()
        .ok_or_else(|| StoreError::Held(format!("{} is not a UTF-8 path", to.display())))?;
    let mut source = SqliteConnectOptions::from_str(database_url)?
        .read_only(true)
        .create_if_missing(false)
        .busy_timeout(Duration::from_secs(30))
        .connect()
        .await?;
    sqlx::query("VACUUM INTO $1")
        .bind(target)
        .execute(&mut source)
        .await?;
    source.close().await?;
    let mut copy = SqliteConnectOptions::new()
        .filename(to)
        .read_only(true)
        .connect()
        .await?;
    let check: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&mut copy)
        .await?;
    copy.close().await?;
    if check != "ok" {
        return Err(StoreError::Corrupt(format!(
            "the copy at {} fails its integrity check: {check}",
            to.display()
        )));
    }
    Ok(())
}
