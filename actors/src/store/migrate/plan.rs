//! The rules of a store's copy that need no database: which tables are
//! copied and in which order, how a table is paged and inserted, how a
//! value crosses from one dialect to the other, which counter continues
//! which ids, and whether the counts agree. `conn.rs` runs what these say.

use std::collections::{BTreeMap, BTreeSet};

/// sqlx's record of the migrations applied: written by migrating the
/// destination, never copied.
pub(super) const MIGRATIONS_TABLE: &str = "_sqlx_migrations";

/// PostgreSQL's cluster directory (migration `0017_cluster`): which nodes
/// are live, which owns each org, the key a rotation makes wraps with. It
/// describes the servers on a database, not its data, so it is not copied:
/// the servers started on the destination write their own.
pub(super) const NODE_STATE: [&str; 3] = ["cluster_nodes", "cluster_settings", "org_owners"];

/// PostgreSQL sequences that no column owns, each with the column whose
/// ids it hands out (the writers take event ids in blocks from it).
pub(super) const FREE_SEQUENCES: [(&str, &str, &str); 1] =
    [("task_event_ids", "task_events", "event_id")];

/// Columns of one dialect only that hold no data, as (table, column):
/// not read from a source that has them, left NULL in a destination that
/// has them. SQLite's `tasks.slack` (migration `0014_row_slack`) is room a
/// task row grows into; a copied row without it only grows on its claim.
const LAYOUT_ONLY: [(&str, &str); 1] = [("tasks", "slack")];

/// Rows read from the source at a time: what is held in memory.
pub(super) const PAGE_ROWS: usize = 500;

/// Values one INSERT binds at most (SQLite allows 32,766, PostgreSQL 65,535).
const MAX_BINDS: usize = 30_000;

/// A table of the store, not of its database's own bookkeeping.
pub(super) fn is_store_table(name: &str) -> bool {
    name != MIGRATIONS_TABLE && !name.starts_with("sqlite_")
}

/// The tables to copy, parents before the tables whose foreign keys
/// (`references`: child, parent) name them: the store's tables of either
/// side but the node state, which must be the same on both.
pub(super) fn tables_to_copy(
    source: &[String],
    destination: &[String],
    references: &[(String, String)],
) -> Result<Vec<String>, String> {
    let copied = |tables: &[String]| -> BTreeSet<String> {
        tables
            .iter()
            .filter(|t| is_store_table(t) && !NODE_STATE.contains(&t.as_str()))
            .cloned()
            .collect()
    };
    let (source, destination) = (copied(source), copied(destination));
    if source != destination {
        let only = |a: &BTreeSet<String>, b: &BTreeSet<String>| {
            a.difference(b).cloned().collect::<Vec<_>>().join(", ")
        };
        return Err(format!(
            "the two stores' tables differ (only in the source: [{}]; only in the \
             destination: [{}]): both must be at this version's latest migration",
            only(&source, &destination),
            only(&destination, &source)
        ));
    }
    dependency_order(source, references)
}

/// `tables` ordered so that a table comes after every table it references;
/// ties by name. A cycle cannot be copied table by table.
fn dependency_order(
    tables: BTreeSet<String>,
    references: &[(String, String)],
) -> Result<Vec<String>, String> {
    let mut parents: BTreeMap<&str, BTreeSet<&str>> = tables
        .iter()
        .map(|t| (t.as_str(), BTreeSet::new()))
        .collect();
    for (child, parent) in references {
        if child != parent && tables.contains(parent) {
            if let Some(of) = parents.get_mut(child.as_str()) {
                of.insert(parent.as_str());
            }
        }
    }
    let mut order: Vec<String> = Vec::with_capacity(tables.len());
    while !parents.is_empty() {
        let ready: Vec<&str> = parents
            .iter()
            .filter(|(_, of)| of.is_empty())
            .map(|(t, _)| *t)
            .collect();
        if ready.is_empty() {
            let cycle: Vec<&str> = parents.keys().copied().collect();
            return Err(format!(
                "the foreign keys of [{}] form a cycle",
                cycle.join(", ")
            ));
        }
        for t in ready {
            parents.remove(t);
            for of in parents.values_mut() {
                of.remove(t);
            }
            order.push(t.to_string());
        }
    }
    Ok(order)
}

/// Whether a store whose applied migrations are `applied` is at this
/// build's latest (`known`, every migration this build has).
pub(super) fn schema_check(which: &str, applied: &[i64], known: &[i64]) -> Result<(), String> {
    let unknown: Vec<String> = applied
        .iter()
        .filter(|v| !known.contains(v))
        .map(|v| format!("{v:04}"))
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "the {which} has migrations this version of taskq does not know ({}): \
             use the version that wrote it",
            unknown.join(", ")
        ));
    }
    let missing: Vec<String> = known
        .iter()
        .filter(|v| !applied.contains(v))
        .map(|v| format!("{v:04}"))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the {which} lacks migrations of this version ({}): start this version's \
             `taskq serve` on it once (it applies them), stop it, then migrate",
            missing.join(", ")
        ));
    }
    Ok(())
}

/// What a column holds, as both dialects can carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Int,
    Text,
    Bytes,
    Bool,
}

/// A SQLite column's kind from its declared type (SQLite's affinity rules).
pub(super) fn sqlite_kind(declared: &str) -> Kind {
    let declared = declared.to_ascii_uppercase();
    if declared.contains("INT") || declared.contains("BOOL") {
        Kind::Int
    } else if ["CHAR", "CLOB", "TEXT"]
        .iter()
        .any(|t| declared.contains(t))
    {
        Kind::Text
    } else {
        Kind::Bytes
    }
}

/// A PostgreSQL column's kind from its `information_schema` data type.
pub(super) fn postgres_kind(data_type: &str) -> Option<Kind> {
    match data_type {
        "bigint" | "integer" | "smallint" => Some(Kind::Int),
        "text" | "character varying" | "character" => Some(Kind::Text),
        "bytea" => Some(Kind::Bytes),
        "boolean" => Some(Kind::Bool),
        _ => None,
    }
}

/// A column as a schema describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Column {
    pub name: String,
    /// `None`: a type no kind carries (the column cannot be copied).
    pub kind: Option<Kind>,
    /// Its place in the primary key, from 1.
    pub key: Option<i64>,
}

/// A table's columns as the copy reads and writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Columns {
    /// In the destination's order.
    pub names: Vec<String>,
    pub from: Vec<Kind>,
    pub to: Vec<Kind>,
    /// Indexes into `names` of the source's primary key, in key order.
    pub key: Vec<usize>,
}

/// Pairs a table's columns on both sides by name: the same names, but for
/// columns that hold no data, each of a kind both can carry, and a primary
/// key on the source to page by.
pub(super) fn matched_columns(
    table: &str,
    source: &[Column],
    destination: &[Column],
) -> Result<Columns, String> {
    let data = |cols: &[Column]| -> BTreeSet<String> {
        cols.iter()
            .map(|c| c.name.clone())
            .filter(|c| !LAYOUT_ONLY.contains(&(table, c.as_str())))
            .collect()
    };
    let (from, to) = (data(source), data(destination));
    if from != to {
        return Err(format!(
            "table {table} has columns [{}] in the source and [{}] in the destination",
            from.into_iter().collect::<Vec<_>>().join(", "),
            to.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    let mut out = Columns {
        names: Vec::new(),
        from: Vec::new(),
        to: Vec::new(),
        key: Vec::new(),
    };
    let mut keyed: Vec<(i64, usize)> = Vec::new();
    for to in destination {
        let Some(from) = source.iter().find(|c| c.name == to.name) else {
            continue;
        };
        let (Some(from_kind), Some(to_kind)) = (from.kind, to.kind) else {
            return Err(format!(
                "column {table}.{} has a type migrate-store does not copy",
                to.name
            ));
        };
        if let Some(place) = from.key {
            keyed.push((place, out.names.len()));
        }
        out.names.push(to.name.clone());
        out.from.push(from_kind);
        out.to.push(to_kind);
    }
    if keyed.is_empty() {
        return Err(format!("table {table} has no primary key to page by"));
    }
    keyed.sort();
    out.key = keyed.into_iter().map(|(_, i)| i).collect();
    Ok(out)
}

/// One stored value, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Value {
    Null,
    Int(i64),
    Text(String),
    Bytes(Vec<u8>),
    Bool(bool),
}

/// `value` as a column of kind `to` stores it, unchanged: text SQLite kept
/// in a BLOB column becomes the same bytes, bytes in a text column must be
/// UTF-8, a boolean is 0 or 1.
pub(super) fn fit(value: Value, to: Kind) -> Result<Value, String> {
    Ok(match (value, to) {
        (Value::Null, _) => Value::Null,
        (Value::Int(i), Kind::Int) => Value::Int(i),
        (Value::Int(i @ (0 | 1)), Kind::Bool) => Value::Bool(i == 1),
        (Value::Bool(b), Kind::Int) => Value::Int(i64::from(b)),
        (Value::Bool(b), Kind::Bool) => Value::Bool(b),
        (Value::Text(s), Kind::Text) => Value::Text(s),
        (Value::Text(s), Kind::Bytes) => Value::Bytes(s.into_bytes()),
        (Value::Bytes(b), Kind::Bytes) => Value::Bytes(b),
        (Value::Bytes(b), Kind::Text) => Value::Text(
            String::from_utf8(b).map_err(|_| "bytes that are not UTF-8 in a text column")?,
        ),
        (value, to) => return Err(format!("{value:?} does not fit a column of kind {to:?}")),
    })
}

/// `name` as a quoted identifier.
pub(super) fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The query of a page of `table`: the first one, or (`after`) the one
/// after the key bound to `$1...`, in key order. PostgreSQL integers are
/// read as 64-bit whatever their width.
pub(super) fn page_query(table: &str, columns: &Columns, after: bool, postgres: bool) -> String {
    let selected: Vec<String> = columns
        .names
        .iter()
        .zip(&columns.from)
        .map(|(name, kind)| match (postgres, kind) {
            (true, Kind::Int) => format!("CAST({0} AS int8) AS {0}", quoted(name)),
            _ => quoted(name),
        })
        .collect();
    let key: Vec<String> = columns
        .key
        .iter()
        .map(|&i| quoted(&columns.names[i]))
        .collect();
    let key = key.join(", ");
    let filter = if after {
        let binds: Vec<String> = (1..=columns.key.len()).map(|n| format!("${n}")).collect();
        format!(" WHERE ({key}) > ({})", binds.join(", "))
    } else {
        String::new()
    };
    format!(
        "SELECT {} FROM {}{filter} ORDER BY {key} LIMIT {PAGE_ROWS}",
        selected.join(", "),
        quoted(table)
    )
}

/// Rows one INSERT of `columns` columns carries.
pub(super) fn rows_per_insert(columns: usize) -> usize {
    (MAX_BINDS / columns.max(1)).clamp(1, PAGE_ROWS)
}

/// An INSERT of `rows` rows of `columns` into `table`. On PostgreSQL it
/// writes identity columns too (`OVERRIDING SYSTEM VALUE`); on SQLite its
/// binds are `?`, since SQLite finds a numbered bind's name by a walk of
/// the statement's list of names, which thousands of binds make slow.
pub(super) fn insert_statement(
    table: &str,
    columns: &[String],
    rows: usize,
    postgres: bool,
) -> String {
    let names: Vec<String> = columns.iter().map(|c| quoted(c)).collect();
    let mut n = 0;
    let tuples: Vec<String> = (0..rows)
        .map(|_| {
            let binds: Vec<String> = columns
                .iter()
                .map(|_| {
                    n += 1;
                    if postgres {
                        format!("${n}")
                    } else {
                        "?".to_string()
                    }
                })
                .collect();
            format!("({})", binds.join(", "))
        })
        .collect();
    format!(
        "INSERT INTO {} ({}){} VALUES {}",
        quoted(table),
        names.join(", "),
        if postgres {
            " OVERRIDING SYSTEM VALUE"
        } else {
            ""
        },
        tuples.join(", ")
    )
}

/// A table's rows on both sides once copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableCount {
    pub table: String,
    pub source: u64,
    pub destination: u64,
}

/// Each table whose counts differ, said as a sentence.
pub(super) fn count_mismatches(counts: &[TableCount]) -> Vec<String> {
    counts
        .iter()
        .filter(|c| c.source != c.destination)
        .map(|c| {
            format!(
                "{}: {} rows in the source, {} in the destination",
                c.table, c.source, c.destination
            )
        })
        .collect()
}

/// The column each PostgreSQL sequence numbers: those a column owns
/// (`owned`: sequence, table, column) and the free ones this module knows;
/// any other sequence is an error, so a new one is not silently left
/// behind the copied ids.
pub(super) fn sequence_columns(
    sequences: &[String],
    owned: &[(String, String, String)],
) -> Result<Vec<(String, String, String)>, String> {
    sequences
        .iter()
        .map(|seq| {
            if let Some(o) = owned.iter().find(|(s, _, _)| s == seq) {
                return Ok(o.clone());
            }
            FREE_SEQUENCES
                .iter()
                .find(|(s, _, _)| s == seq)
                .map(|(s, t, c)| (s.to_string(), t.to_string(), c.to_string()))
                .ok_or_else(|| format!("sequence {seq} numbers no column migrate-store knows of"))
        })
        .collect()
}

/// The last id a counter has handed out, so that the destination's next is
/// above it: the largest copied, or the source's counter when it went
/// further (ids of rows deleted since, which a client may have seen).
pub(super) fn last_id(copied_max: Option<i64>, source_counter: Option<i64>) -> i64 {
    copied_max.max(source_counter).unwrap_or(0).max(0)
}

/// A counter the destination continues from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continued {
    pub table: String,
    pub column: String,
    /// The next id is above this one.
    pub after: i64,
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
