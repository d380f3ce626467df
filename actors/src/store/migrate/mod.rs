//! `taskq migrate-store`: a whole stopped store copied into an empty one,
//! SQLite to PostgreSQL or back, every value unchanged (ids, times,
//! ciphertext, JSON text), so that a server with the same master key
//! carries on where the old one stopped.
//!
//! The tables are read from both schemas, not listed here, so a table a
//! later migration adds is copied or, when the two dialects disagree, the
//! copy refuses to start. The source is read in one transaction (one
//! snapshot) a page at a time by primary key; the destination is written
//! in one transaction, so a copy that fails leaves it empty. The counters
//! that hand out ids (PostgreSQL sequences, SQLite's AUTOINCREMENT) then
//! continue above every id the source gave, and every table's rows are
//! counted on both sides before the commit.
//!
//! A server must not run on either store meanwhile: a SQLite file is held
//! as a server holds it; on PostgreSQL a node whose heartbeat is fresh is
//! waited for (a stopped node's lapses within the lease TTL), then refused.

mod conn;
mod plan;

use std::str::FromStr;
use std::time::{Duration, Instant};

use sqlx::sqlite::SqliteConnectOptions;

use self::conn::Db;
use self::plan::{
    count_mismatches, fit, insert_statement, is_store_table, last_id, matched_columns, page_query,
    rows_per_insert, schema_check, sequence_columns, tables_to_copy, Columns, Value, PAGE_ROWS,
};
pub use self::plan::{Continued, TableCount};
use super::connect::hold_sqlite_file;
use super::{Result, Store, StoreError, StoreOptions};

/// What a copy did: every table's rows on both sides, in the order copied,
/// and the counters the destination continues from.
#[derive(Debug, Clone)]
pub struct Migrated {
    pub tables: Vec<TableCount>,
    pub counters: Vec<Continued>,
}

/// What a copy tells as it goes, for a progress bar: each table as it
/// begins, with the rows the source holds, then the rows copied, a page
/// at a time.
pub trait CopyProgress: Send {
    fn table(&mut self, table: &str, rows: u64);
    fn copied(&mut self, rows: u64);
}

/// Copies the store at `from` into the empty store at `to` (created and
/// migrated when new). `node_ttl` is how long a PostgreSQL node's
/// heartbeat keeps it live.
pub async fn migrate_store(
    from: &str,
    to: &str,
    node_ttl: Duration,
    progress: &mut dyn CopyProgress,
) -> Result<Migrated> {
    let from_pg = backend_of(from)?;
    let to_pg = backend_of(to)?;
    if !from_pg && !to_pg && same_file(from, to)? {
        return Err(refused("the source and the destination are the same file"));
    }
    let _source_held = if from_pg {
        None
    } else {
        let path = sqlite_path(from)?;
        if !path.is_file() {
            return Err(refused(format!("no SQLite store at {}", path.display())));
        }
        Some(held(from, "source")?)
    };
    let mut source = open(from, from_pg, true, "source").await?;
    let tables = source.tables().await?;
    if !tables.iter().any(|t| t == plan::MIGRATIONS_TABLE) {
        return Err(refused(format!(
            "the source ({}) is not a taskq store: it records no migrations",
            redacted(from)
        )));
    }
    schema_check(
        "source",
        &source.applied_migrations().await?,
        &known(from_pg),
    )
    .map_err(refused)?;
    if from_pg {
        wait_for_nodes_to_stop(&mut source, node_ttl).await?;
    }

    let _destination_held = if to_pg {
        None
    } else {
        Some(held(to, "destination")?)
    };
    let mut probe = open(to, to_pg, !to_pg, "destination").await?;
    refuse_unless_empty(&mut probe, to_pg).await?;
    probe.close().await?;
    Store::connect(to, &StoreOptions::default())
        .await?
        .close()
        .await;
    let mut destination = open(to, to_pg, false, "destination").await?;

    source
        .execute(if from_pg {
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
        } else {
            "BEGIN"
        })
        .await?;
    destination
        .execute(if to_pg { "BEGIN" } else { "BEGIN IMMEDIATE" })
        .await?;
    match copy(&mut source, &mut destination, progress).await {
        Ok(migrated) => {
            destination.execute("COMMIT").await?;
            source.execute("ROLLBACK").await?;
            destination.close().await?;
            source.close().await?;
            Ok(migrated)
        }
        Err(e) => {
            let _ = destination.execute("ROLLBACK").await;
            Err(e)
        }
    }
}

/// Every table, page by page, then the counters and the counts.
async fn copy(
    source: &mut Db,
    destination: &mut Db,
    progress: &mut dyn CopyProgress,
) -> Result<Migrated> {
    // Again, inside the transaction: nothing wrote since the first look.
    refuse_unless_empty(destination, destination.is_postgres()).await?;
    let references = destination.references().await?;
    let order = tables_to_copy(
        &source.tables().await?,
        &destination.tables().await?,
        &references,
    )
    .map_err(refused)?;
    let mut tables = Vec::with_capacity(order.len());
    for table in &order {
        let started = Instant::now();
        let columns = matched_columns(
            table,
            &source.columns(table).await?,
            &destination.columns(table).await?,
        )
        .map_err(refused)?;
        // The source's count, read in its snapshot, holds after the copy too.
        let source_rows = source.count(table).await?;
        progress.table(table, source_rows);
        copy_table(source, destination, table, &columns, progress).await?;
        let count = TableCount {
            table: table.clone(),
            source: source_rows,
            destination: destination.count(table).await?,
        };
        tracing::info!(
            table = %table,
            rows = count.destination,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "table copied"
        );
        tables.push(count);
    }
    let counters = continue_counters(source, destination).await?;
    let mismatches = count_mismatches(&tables);
    if !mismatches.is_empty() {
        return Err(refused(format!(
            "the copy's row counts differ, nothing was kept: {}",
            mismatches.join("; ")
        )));
    }
    Ok(Migrated { tables, counters })
}

async fn copy_table(
    source: &mut Db,
    destination: &mut Db,
    table: &str,
    columns: &Columns,
    progress: &mut dyn CopyProgress,
) -> Result<()> {
    let first = page_query(table, columns, false, source.is_postgres());
    let next = page_query(table, columns, true, source.is_postgres());
    let key_kinds: Vec<_> = columns.key.iter().map(|&i| columns.from[i]).collect();
    let per_insert = rows_per_insert(columns.names.len());
    let mut after: Option<Vec<Value>> = None;
    loop {
        let (sql, bound) = match &after {
            None => (&first, &[][..]),
            Some(key) => (&next, key.as_slice()),
        };
        let page = source.page(sql, bound, &key_kinds, &columns.from).await?;
        let Some(last) = page.last() else {
            return Ok(());
        };
        let key: Vec<Value> = columns.key.iter().map(|&i| last[i].clone()).collect();
        if key.contains(&Value::Null) {
            return Err(refused(format!("a row of {table} has a NULL key")));
        }
        let full = page.len() == PAGE_ROWS;
        let rows = page
            .into_iter()
            .map(|row| {
                row.into_iter()
                    .zip(&columns.to)
                    .zip(&columns.names)
                    .map(|((v, &kind), name)| {
                        fit(v, kind).map_err(|e| refused(format!("{table}.{name}: {e}")))
                    })
                    .collect::<Result<Vec<Value>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        for chunk in rows.chunks(per_insert) {
            let sql = insert_statement(
                table,
                &columns.names,
                chunk.len(),
                destination.is_postgres(),
            );
            destination.insert(&sql, chunk, &columns.to).await?;
        }
        progress.copied(rows.len() as u64);
        if !full {
            return Ok(());
        }
        after = Some(key);
    }
}

/// Sets the destination's counters above every id the source gave.
async fn continue_counters(source: &mut Db, destination: &mut Db) -> Result<Vec<Continued>> {
    let (all, owned) = source.sequences().await?;
    let source_columns = sequence_columns(&all, &owned).map_err(refused)?;
    let given = source.counters(&source_columns).await?;
    let mut out = Vec::new();
    if destination.is_postgres() {
        let (all, owned) = destination.sequences().await?;
        for (seq, table, column) in sequence_columns(&all, &owned).map_err(refused)? {
            let after = last_id(
                destination.max(&table, &column).await?,
                given.get(&table).copied(),
            );
            destination.continue_sequence(&seq, after).await?;
            out.push(Continued {
                table,
                column,
                after,
            });
        }
    } else {
        for (table, column) in destination.autoincrement_keys().await? {
            let after = last_id(
                destination.max(&table, &column).await?,
                given.get(&table).copied(),
            );
            destination.continue_autoincrement(&table, after).await?;
            out.push(Continued {
                table,
                column,
                after,
            });
        }
    }
    Ok(out)
}

/// Refuses a destination that holds a row in any table, or records
/// migrations this build does not know.
async fn refuse_unless_empty(db: &mut Db, postgres: bool) -> Result<()> {
    let tables = db.tables().await?;
    if tables.iter().any(|t| t == plan::MIGRATIONS_TABLE) {
        let applied = db.applied_migrations().await?;
        let known = known(postgres);
        if let Some(v) = applied.iter().find(|v| !known.contains(v)) {
            return Err(refused(format!(
                "the destination has migration {v:04}, which this version of taskq does not know"
            )));
        }
    }
    let mut holding = Vec::new();
    for table in tables.iter().filter(|t| is_store_table(t)) {
        if db.has_rows(table).await? {
            holding.push(table.as_str());
        }
    }
    if holding.is_empty() {
        return Ok(());
    }
    Err(refused(format!(
        "the destination is not empty ({} hold rows): migrate-store copies into an empty \
         store only, on which no server has run; nothing was written",
        holding.join(", ")
    )))
}

/// Waits for the nodes whose heartbeat is fresh to stop (a stopped node's
/// lapses within `ttl`); refuses when one is still running after that.
async fn wait_for_nodes_to_stop(source: &mut Db, ttl: Duration) -> Result<()> {
    let deadline = Instant::now() + ttl + Duration::from_secs(1);
    loop {
        let live = source.live_nodes(ttl).await?;
        let Some((node, url, age_ms)) = live.first() else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            return Err(refused(format!(
                "a taskq server is running on the source: node {node} ({url}) sent a heartbeat \
                 {age_ms} ms ago; stop every node first"
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Whether `url` names a PostgreSQL store (else a SQLite one); anything
/// that is neither is refused.
fn backend_of(url: &str) -> Result<bool> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(true);
    }
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    if path.is_empty() || path.contains("://") || path.contains(":memory:") {
        return Err(refused(format!(
            "`{}` is not a store URL: give a SQLite file's path, a sqlite: URL or a \
             postgres:// URL",
            redacted(url)
        )));
    }
    Ok(false)
}

fn sqlite_path(url: &str) -> Result<std::path::PathBuf> {
    Ok(SqliteConnectOptions::from_str(url)?
        .get_filename()
        .to_path_buf())
}

fn same_file(a: &str, b: &str) -> Result<bool> {
    let (a, b) = (sqlite_path(a)?, sqlite_path(b)?);
    Ok(a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y))
}

/// Holds a SQLite file as a server does, so none runs on it meanwhile.
fn held(url: &str, which: &str) -> Result<Option<std::fs::File>> {
    hold_sqlite_file(url).map_err(|e| match e {
        StoreError::Held(_) => refused(format!(
            "a taskq server is running on the {which} ({}): stop it first",
            sqlite_path(url).map_or_else(|_| url.to_string(), |p| p.display().to_string())
        )),
        e => e,
    })
}

async fn open(url: &str, postgres: bool, read_only: bool, which: &str) -> Result<Db> {
    Db::open(url, postgres, read_only)
        .await
        .map_err(|e| refused(format!("cannot open the {which} ({}): {e}", redacted(url))))
}

/// The migrations this build applies to a store of that backend.
fn known(postgres: bool) -> Vec<i64> {
    let migrator = if postgres {
        sqlx::migrate!("../migrations/postgres")
    } else {
        sqlx::migrate!("../migrations/sqlite")
    };
    migrator
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .map(|m| m.version)
        .collect()
}

/// `url` without its password, for messages.
fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_string(),
    }
}

fn refused(why: impl Into<String>) -> StoreError {
    StoreError::Refused(why.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::{ScratchDatabase, TempDb};

    /// Both dialects' migrations make tables a copy can pair, column by
    /// column: a table or column one dialect's migration adds alone fails
    /// here before it fails a copy.
    #[tokio::test]
    #[cfg_attr(
        not(taskq_test_env = "postgres"),
        ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
    )]
    async fn both_backends_migrations_make_the_same_tables() {
        let scratch = ScratchDatabase::create().await;
        let file = TempDb::new();
        file.store().await.close().await;
        let sqlite_url = format!("sqlite://{}", file.0.display());
        Store::connect(&scratch.url, &StoreOptions::default())
            .await
            .unwrap()
            .close()
            .await;
        let mut sqlite = Db::open(&sqlite_url, false, true).await.unwrap();
        let mut postgres = Db::open(&scratch.url, true, true).await.unwrap();
        let order = tables_to_copy(
            &sqlite.tables().await.unwrap(),
            &postgres.tables().await.unwrap(),
            &postgres.references().await.unwrap(),
        )
        .unwrap();
        assert!(order.len() > 15, "{order:?}");
        for table in &order {
            let (s, p) = (
                sqlite.columns(table).await.unwrap(),
                postgres.columns(table).await.unwrap(),
            );
            matched_columns(table, &s, &p).unwrap();
            matched_columns(table, &p, &s).unwrap();
        }
        let (all, owned) = postgres.sequences().await.unwrap();
        let numbered = sequence_columns(&all, &owned).unwrap();
        assert!(
            numbered
                .iter()
                .any(|(_, t, c)| t == "task_events" && c == "event_id"),
            "{numbered:?}"
        );
        sqlite.close().await.unwrap();
        postgres.close().await.unwrap();
        scratch.drop().await;
    }

    #[test]
    fn urls_name_a_backend_or_are_refused() {
        assert!(backend_of("postgres://u@h/db").unwrap());
        assert!(backend_of("postgresql://u@h/db").unwrap());
        assert!(!backend_of("sqlite://taskq-data/taskq.db").unwrap());
        assert!(!backend_of("sqlite:taskq.db").unwrap());
        assert!(!backend_of("./taskq-data/taskq.db").unwrap());
        for bad in ["mysql://h/db", "", "sqlite://", "sqlite::memory:"] {
            let error = backend_of(bad).unwrap_err().to_string();
            assert!(error.contains("is not a store URL"), "{bad}: {error}");
        }
    }

    #[test]
    fn messages_hide_passwords() {
        assert_eq!(
            redacted("postgres://u:secret@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(redacted("sqlite://a/b.db"), "sqlite://a/b.db");
    }
}
