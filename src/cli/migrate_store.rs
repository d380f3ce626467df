//! `taskq migrate-store --from URL --to URL`: a stopped store copied whole
//! into an empty one, SQLite to PostgreSQL or back (the engine crate's
//! `store::migrate` says how), with every table's rows counted on both
//! sides.

use anyhow::Context as _;

#[derive(clap::Args, Debug)]
pub struct MigrateStoreArgs {
    /// The store to copy, with no server running on it: a SQLite file's
    /// path or `sqlite://PATH`, or `postgres://...`.
    #[arg(long)]
    pub from: String,
    /// The empty store to copy into, in the same forms; a new SQLite file
    /// or an empty PostgreSQL database, on which no server has run.
    #[arg(long)]
    pub to: String,
}

pub async fn run(args: MigrateStoreArgs) -> anyhow::Result<()> {
    let migrated = taskq_actors::migrate_store(&args.from, &args.to)
        .await
        .context("migrate-store")?;
    let width = migrated
        .tables
        .iter()
        .map(|t| t.table.len())
        .max()
        .unwrap_or(0);
    println!(
        "{:width$}  {:>12}  {:>12}",
        "table", "source", "destination"
    );
    for t in &migrated.tables {
        println!(
            "{:width$}  {:>12}  {:>12}",
            t.table, t.source, t.destination
        );
    }
    for c in &migrated.counters {
        println!("{}.{} continues after {}", c.table, c.column, c.after);
    }
    let rows: u64 = migrated.tables.iter().map(|t| t.destination).sum();
    println!(
        "copied {rows} rows in {} tables; every table's count matches the source's",
        migrated.tables.len()
    );
    Ok(())
}
