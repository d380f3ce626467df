//! `taskq backup --to FILE`: a consistent copy of a SQLite store while its
//! server keeps serving, found as `serve` finds it.

use std::path::PathBuf;

use anyhow::Context as _;

use super::serve::StoreArgs;

#[derive(clap::Args, Debug)]
pub struct BackupArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The file to write the copy to; it must not exist.
    #[arg(long)]
    pub to: PathBuf,
}

pub async fn run(args: BackupArgs) -> anyhow::Result<()> {
    taskq_actors::backup_sqlite(&args.store.database_url, &args.to)
        .await
        .with_context(|| format!("backing up {}", args.store.database_url))?;
    println!(
        "backed up {} to {}",
        args.store.database_url,
        args.to.display()
    );
    Ok(())
}
