use std::io::IsTerminal as _;

use clap::Parser as _;
use taskq::cli::{backup, keys, mcp, migrate_store, models, serve, Cli, Command};
use tracing_subscriber::EnvFilter;

// Many small, short-lived allocations per request (JSON, rows, messages):
// mimalloc serves them with less contention than the system allocator. Its
// `override` feature makes it C's malloc too, so SQLite's allocations on
// the commit path (the one serial step under load) use it as well.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn init_tracing() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour only for a terminal: a file or a pipe gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if std::env::var("TASKQ_LOG_FORMAT").is_ok_and(|f| f == "json") {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn main() -> anyhow::Result<()> {
    // While the process has one thread, before the runtime starts.
    taskq::embed::confine_inference_threads();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    taskq::install_crypto_provider();
    match cli.command {
        Command::Serve(args) => {
            init_tracing();
            serve::run(*args).await
        }
        // stdout carries the protocol: no logging there.
        Command::Mcp(args) => mcp::run(args).await,
        Command::Keys(args) => {
            init_tracing();
            keys::run(args).await
        }
        Command::Models(args) => {
            init_tracing();
            models::run(args).await
        }
        Command::Backup(args) => {
            init_tracing();
            backup::run(args).await
        }
        Command::MigrateStore(args) => {
            init_tracing();
            migrate_store::run(args).await
        }
    }
}
