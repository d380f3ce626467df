//! One connection to either side of a copy, and the few questions the
//! copy asks of it in each dialect: its tables, columns, keys and
//! counters, a page of rows, an insert.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgRow};
use sqlx::sqlite::{SqliteConnectOptions, SqliteRow};
use sqlx::{ConnectOptions, Connection, Row, TypeInfo, ValueRef};

use super::plan::{postgres_kind, quoted, sqlite_kind, Column, Kind, Value};
use crate::store::{Result, StoreError};

pub(super) enum Db {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

/// Binds `$value` to `$query`, a NULL typed as a column of `$kind`.
macro_rules! bind_value {
    ($query:expr, $value:expr, $kind:expr) => {
        match ($value, $kind) {
            (Value::Null, Kind::Int) => $query.bind(None::<i64>),
            (Value::Null, Kind::Text) => $query.bind(None::<String>),
            (Value::Null, Kind::Bytes) => $query.bind(None::<Vec<u8>>),
            (Value::Null, Kind::Bool) => $query.bind(None::<bool>),
            (Value::Int(i), _) => $query.bind(*i),
            (Value::Bool(b), _) => $query.bind(*b),
            (Value::Text(s), _) => $query.bind(s.as_str()),
            (Value::Bytes(b), _) => $query.bind(b.as_slice()),
        }
    };
}

impl Db {
    /// A connection to the store at `url`; read-only for a SQLite file.
    pub(super) async fn open(url: &str, postgres: bool, read_only: bool) -> Result<Self> {
        if postgres {
            let conn = PgConnectOptions::from_str(url)?.connect().await?;
            return Ok(Db::Postgres(conn));
        }
        let conn = SqliteConnectOptions::from_str(url)?
            .read_only(read_only)
            .create_if_missing(false)
            .busy_timeout(Duration::from_secs(10))
            .connect()
            .await?;
        Ok(Db::Sqlite(conn))
    }

    pub(super) fn is_postgres(&self) -> bool {
        matches!(self, Db::Postgres(_))
    }

    pub(super) async fn execute(&mut self, sql: &str) -> Result<()> {
        match self {
            Db::Sqlite(c) => sqlx::query(sql).execute(&mut *c).await.map(drop)?,
            Db::Postgres(c) => sqlx::query(sql).execute(&mut *c).await.map(drop)?,
        }
        Ok(())
    }

    pub(super) async fn close(self) -> Result<()> {
        match self {
            Db::Sqlite(c) => c.close().await?,
            Db::Postgres(c) => c.close().await?,
        }
        Ok(())
    }

    /// Every table of the database (of the connection's schema), by name.
    pub(super) async fn tables(&mut self) -> Result<Vec<String>> {
        Ok(match self {
            Db::Sqlite(c) => {
                sqlx::query_scalar(
                    "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
                )
                .fetch_all(&mut *c)
                .await?
            }
            Db::Postgres(c) => {
                sqlx::query_scalar(
                    "SELECT table_name::text FROM information_schema.tables \
                     WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' \
                     ORDER BY 1",
                )
                .fetch_all(&mut *c)
                .await?
            }
        })
    }

    /// The foreign keys between tables, as (child, parent).
    pub(super) async fn references(&mut self) -> Result<Vec<(String, String)>> {
        Ok(match self {
            Db::Sqlite(c) => {
                sqlx::query_as(
                    "SELECT m.name, f.\"table\" FROM sqlite_master m, \
                     pragma_foreign_key_list(m.name) f WHERE m.type = 'table'",
                )
                .fetch_all(&mut *c)
                .await?
            }
            Db::Postgres(c) => {
                sqlx::query_as(
                    "SELECT tc.table_name::text, ccu.table_name::text \
                     FROM information_schema.table_constraints tc \
                     JOIN information_schema.constraint_column_usage ccu \
                       ON ccu.constraint_name = tc.constraint_name \
                      AND ccu.constraint_schema = tc.constraint_schema \
                     WHERE tc.constraint_type = 'FOREIGN KEY' \
                       AND tc.table_schema = current_schema()",
                )
                .fetch_all(&mut *c)
                .await?
            }
        })
    }

    /// A table's columns in their order, with their kinds and key places.
    pub(super) async fn columns(&mut self, table: &str) -> Result<Vec<Column>> {
        Ok(match self {
            Db::Sqlite(c) => {
                let rows: Vec<(String, String, i64)> =
                    sqlx::query_as("SELECT name, type, pk FROM pragma_table_info($1) ORDER BY cid")
                        .bind(table)
                        .fetch_all(&mut *c)
                        .await?;
                rows.into_iter()
                    .map(|(name, declared, pk)| Column {
                        name,
                        kind: Some(sqlite_kind(&declared)),
                        key: (pk > 0).then_some(pk),
                    })
                    .collect()
            }
            Db::Postgres(c) => {
                let rows: Vec<(String, String, Option<i64>)> = sqlx::query_as(
                    "SELECT c.column_name::text, c.data_type::text, k.ordinal_position::int8 \
                     FROM information_schema.columns c LEFT JOIN ( \
                       SELECT kcu.column_name, kcu.ordinal_position \
                       FROM information_schema.table_constraints tc \
                       JOIN information_schema.key_column_usage kcu \
                         ON kcu.constraint_name = tc.constraint_name \
                        AND kcu.constraint_schema = tc.constraint_schema \
                       WHERE tc.constraint_type = 'PRIMARY KEY' \
                         AND tc.table_schema = current_schema() AND tc.table_name = $1 \
                     ) k ON k.column_name = c.column_name \
                     WHERE c.table_schema = current_schema() AND c.table_name = $1 \
                     ORDER BY c.ordinal_position",
                )
                .bind(table)
                .fetch_all(&mut *c)
                .await?;
                rows.into_iter()
                    .map(|(name, data_type, key)| Column {
                        name,
                        kind: postgres_kind(&data_type),
                        key,
                    })
                    .collect()
            }
        })
    }

    /// The versions sqlx recorded as applied successfully.
    pub(super) async fn applied_migrations(&mut self) -> Result<Vec<i64>> {
        let sql = "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version";
        Ok(match self {
            Db::Sqlite(c) => sqlx::query_scalar(sql).fetch_all(&mut *c).await?,
            Db::Postgres(c) => sqlx::query_scalar(sql).fetch_all(&mut *c).await?,
        })
    }

    pub(super) async fn count(&mut self, table: &str) -> Result<u64> {
        let sql = format!("SELECT count(*) FROM {}", quoted(table));
        let n: i64 = match self {
            Db::Sqlite(c) => sqlx::query_scalar(&sql).fetch_one(&mut *c).await?,
            Db::Postgres(c) => sqlx::query_scalar(&sql).fetch_one(&mut *c).await?,
        };
        Ok(u64::try_from(n).unwrap_or(0))
    }

    pub(super) async fn has_rows(&mut self, table: &str) -> Result<bool> {
        let sql = format!("SELECT 1 FROM {} LIMIT 1", quoted(table));
        Ok(match self {
            Db::Sqlite(c) => sqlx::query(&sql).fetch_optional(&mut *c).await?.is_some(),
            Db::Postgres(c) => sqlx::query(&sql).fetch_optional(&mut *c).await?.is_some(),
        })
    }

    /// The largest value of an integer column, if it has rows.
    pub(super) async fn max(&mut self, table: &str, column: &str) -> Result<Option<i64>> {
        let sql = format!(
            "SELECT CAST(MAX({}) AS BIGINT) FROM {}",
            quoted(column),
            quoted(table)
        );
        Ok(match self {
            Db::Sqlite(c) => sqlx::query_scalar(&sql).fetch_one(&mut *c).await?,
            Db::Postgres(c) => sqlx::query_scalar(&sql).fetch_one(&mut *c).await?,
        })
    }

    /// A page of rows: `sql` with `after` (the last key read) bound.
    pub(super) async fn page(
        &mut self,
        sql: &str,
        after: &[Value],
        key_kinds: &[Kind],
        kinds: &[Kind],
    ) -> Result<Vec<Vec<Value>>> {
        match self {
            Db::Sqlite(c) => {
                let mut q = sqlx::query(sql);
                for (v, k) in after.iter().zip(key_kinds) {
                    q = bind_value!(q, v, k);
                }
                let rows = q.fetch_all(&mut *c).await?;
                rows.iter().map(|r| sqlite_values(r, kinds.len())).collect()
            }
            Db::Postgres(c) => {
                let mut q = sqlx::query(sql);
                for (v, k) in after.iter().zip(key_kinds) {
                    q = bind_value!(q, v, k);
                }
                let rows = q.fetch_all(&mut *c).await?;
                rows.iter().map(|r| postgres_values(r, kinds)).collect()
            }
        }
    }

    /// Runs an INSERT with every row's values bound in order.
    pub(super) async fn insert(
        &mut self,
        sql: &str,
        rows: &[Vec<Value>],
        kinds: &[Kind],
    ) -> Result<()> {
        match self {
            Db::Sqlite(c) => {
                let mut q = sqlx::query(sql);
                for row in rows {
                    for (v, k) in row.iter().zip(kinds) {
                        q = bind_value!(q, v, k);
                    }
                }
                q.execute(&mut *c).await?;
            }
            Db::Postgres(c) => {
                let mut q = sqlx::query(sql);
                for row in rows {
                    for (v, k) in row.iter().zip(kinds) {
                        q = bind_value!(q, v, k);
                    }
                }
                q.execute(&mut *c).await?;
            }
        }
        Ok(())
    }

    /// The last id each table's counter handed out: SQLite's
    /// `sqlite_sequence`, or each PostgreSQL sequence that has given one,
    /// keyed by the table its column (`columns`: sequence, table, column)
    /// is in. A sequence that hands out blocks counts its last block as
    /// given whole.
    pub(super) async fn counters(
        &mut self,
        columns: &[(String, String, String)],
    ) -> Result<BTreeMap<String, i64>> {
        match self {
            Db::Sqlite(c) => {
                let has: Option<i64> = sqlx::query_scalar(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_sequence'",
                )
                .fetch_optional(&mut *c)
                .await?;
                if has.is_none() {
                    return Ok(BTreeMap::new());
                }
                let rows: Vec<(String, i64)> =
                    sqlx::query_as("SELECT name, seq FROM sqlite_sequence")
                        .fetch_all(&mut *c)
                        .await?;
                Ok(rows.into_iter().collect())
            }
            Db::Postgres(c) => {
                let mut out = BTreeMap::new();
                for (seq, table, _) in columns {
                    let last: Option<i64> = sqlx::query_scalar(
                        "SELECT last_value + increment_by - 1 FROM pg_sequences \
                         WHERE schemaname = current_schema() AND sequencename = $1",
                    )
                    .bind(seq)
                    .fetch_optional(&mut *c)
                    .await?
                    .flatten();
                    if let Some(last) = last {
                        out.insert(table.clone(), last);
                    }
                }
                Ok(out)
            }
        }
    }

    /// PostgreSQL: every sequence of the schema, and those a column owns
    /// (identity and serial columns) as (sequence, table, column).
    pub(super) async fn sequences(
        &mut self,
    ) -> Result<(Vec<String>, Vec<(String, String, String)>)> {
        let Db::Postgres(c) = self else {
            return Ok((Vec::new(), Vec::new()));
        };
        let all: Vec<String> = sqlx::query_scalar(
            "SELECT sequencename::text FROM pg_sequences \
             WHERE schemaname = current_schema() ORDER BY 1",
        )
        .fetch_all(&mut *c)
        .await?;
        let owned: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT s.relname::text, t.relname::text, a.attname::text \
             FROM pg_class s \
             JOIN pg_depend d ON d.objid = s.oid AND d.classid = 'pg_class'::regclass \
              AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i') \
             JOIN pg_class t ON t.oid = d.refobjid \
             JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = d.refobjsubid \
             WHERE s.relkind = 'S' AND s.relnamespace = current_schema()::text::regnamespace",
        )
        .fetch_all(&mut *c)
        .await?;
        Ok((all, owned))
    }

    /// PostgreSQL: the sequence's next value is `after + 1`.
    pub(super) async fn continue_sequence(&mut self, seq: &str, after: i64) -> Result<()> {
        if let Db::Postgres(c) = self {
            sqlx::query("SELECT setval($1::regclass, $2, false)")
                .bind(quoted(seq))
                .bind(after + 1)
                .execute(&mut *c)
                .await?;
        }
        Ok(())
    }

    /// SQLite: the AUTOINCREMENT tables with their key column.
    pub(super) async fn autoincrement_keys(&mut self) -> Result<Vec<(String, String)>> {
        let Db::Sqlite(c) = self else {
            return Ok(Vec::new());
        };
        Ok(sqlx::query_as(
            "SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p \
             WHERE m.type = 'table' AND m.sql LIKE '%AUTOINCREMENT%' AND p.pk = 1",
        )
        .fetch_all(&mut *c)
        .await?)
    }

    /// SQLite: the table's next AUTOINCREMENT id is above `after`.
    pub(super) async fn continue_autoincrement(&mut self, table: &str, after: i64) -> Result<()> {
        if let Db::Sqlite(c) = self {
            sqlx::query(
                "INSERT INTO sqlite_sequence (name, seq) SELECT $1, 0 \
                 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = $1)",
            )
            .bind(table)
            .execute(&mut *c)
            .await?;
            sqlx::query("UPDATE sqlite_sequence SET seq = MAX(seq, $2) WHERE name = $1")
                .bind(table)
                .bind(after)
                .execute(&mut *c)
                .await?;
        }
        Ok(())
    }

    /// PostgreSQL: the nodes whose heartbeat is younger than `ttl`, as
    /// (node, URL, age in ms).
    pub(super) async fn live_nodes(&mut self, ttl: Duration) -> Result<Vec<(String, String, i64)>> {
        let Db::Postgres(c) = self else {
            return Ok(Vec::new());
        };
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        Ok(sqlx::query_as(
            "SELECT node_id, advertise_url, \
             (extract(epoch FROM now() - last_seen) * 1000)::int8 \
             FROM cluster_nodes \
             WHERE last_seen > now() - make_interval(secs => $1::int8 / 1000.0) \
             ORDER BY node_id",
        )
        .bind(ttl_ms)
        .fetch_all(&mut *c)
        .await?)
    }
}

/// A SQLite row's values as stored: SQLite keeps each value's own type,
/// whatever its column declares.
fn sqlite_values(row: &SqliteRow, columns: usize) -> Result<Vec<Value>> {
    (0..columns)
        .map(|i| {
            let stored = {
                let raw = row.try_get_raw(i)?;
                if raw.is_null() {
                    return Ok(Value::Null);
                }
                raw.type_info().name().to_string()
            };
            Ok(match stored.as_str() {
                "INTEGER" => Value::Int(row.try_get_unchecked(i)?),
                "TEXT" => Value::Text(row.try_get_unchecked(i)?),
                "BLOB" => Value::Bytes(row.try_get_unchecked(i)?),
                other => {
                    return Err(StoreError::Refused(format!(
                        "a stored value of type {other} (column {}) is not copied",
                        row.columns()
                            .get(i)
                            .map(sqlx::Column::name)
                            .unwrap_or_default()
                    )))
                }
            })
        })
        .collect()
}

/// A PostgreSQL row's values, read as their columns' kinds.
fn postgres_values(row: &PgRow, kinds: &[Kind]) -> Result<Vec<Value>> {
    kinds
        .iter()
        .enumerate()
        .map(|(i, kind)| {
            Ok(match kind {
                Kind::Int => row.try_get::<Option<i64>, _>(i)?.map(Value::Int),
                Kind::Text => row.try_get::<Option<String>, _>(i)?.map(Value::Text),
                Kind::Bytes => row.try_get::<Option<Vec<u8>>, _>(i)?.map(Value::Bytes),
                Kind::Bool => row.try_get::<Option<bool>, _>(i)?.map(Value::Bool),
            }
            .unwrap_or(Value::Null))
        })
        .collect()
}
