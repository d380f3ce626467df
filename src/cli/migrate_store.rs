//! `taskq migrate-store --from URL --to URL`: a stopped store copied whole
//! into an empty one, SQLite to PostgreSQL or back (the engine crate's
//! `store::migrate` says how), with a progress bar per table on the
//! terminal and every table's rows counted on both sides.

use std::time::Instant;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use taskq_actors::CopyProgress;

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

/// One bar per table on stderr, drawn only when stderr is a terminal.
struct Bars {
    style: ProgressStyle,
    current: Option<ProgressBar>,
}

impl Bars {
    fn new() -> Self {
        let style = ProgressStyle::with_template(
            "{prefix:>24} [{bar:32}] {pos:>10}/{len:<10} rows {per_sec:>12} {eta:>4}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        Self {
            style,
            current: None,
        }
    }

    fn finish(&mut self) {
        if let Some(bar) = self.current.take() {
            bar.finish();
        }
    }
}

impl CopyProgress for Bars {
    fn table(&mut self, table: &str, rows: u64) {
        self.finish();
        let bar = ProgressBar::with_draw_target(Some(rows), ProgressDrawTarget::stderr())
            .with_style(self.style.clone())
            .with_prefix(table.to_owned());
        self.current = Some(bar);
    }

    fn copied(&mut self, rows: u64) {
        if let Some(bar) = &self.current {
            bar.inc(rows);
        }
    }
}

pub async fn run(args: MigrateStoreArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut bars = Bars::new();
    let migrated = taskq_actors::migrate_store(&args.from, &args.to, &mut bars).await;
    bars.finish();
    let migrated = migrated.context("migrate-store")?;
    let secs = started.elapsed().as_secs_f64();
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
        "copied {rows} rows in {} tables in {secs:.1} s ({:.0} rows/s); every table's count matches the source's",
        migrated.tables.len(),
        rows as f64 / secs.max(1e-9)
    );
    Ok(())
}
