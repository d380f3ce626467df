//! Subcommands: `serve` runs the service, `mcp` bridges an MCP client on
//! stdin/stdout to a running one, `keys` rotates the master key, `backup`
//! copies a live SQLite store, `migrate-store` copies a stopped store to
//! the other backend, `models` installs the builtin embedding model (and
//! serves it as an endpoint).
//! The load tool is a binary of its own, `taskq-bench`.

pub mod backup;
pub mod keys;
pub mod mcp;
pub mod migrate_store;
pub mod models;
pub mod serve;

#[derive(clap::Parser, Debug)]
#[command(
    name = "taskq",
    version,
    about = "A task queue for fleets of AI agents and the people beside them"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Run the service.
    Serve(Box<serve::ServeArgs>),
    /// Speak MCP on stdin/stdout, relaying tools to a running server.
    Mcp(mcp::McpArgs),
    /// Manage the master key that wraps every org's data key.
    Keys(keys::KeysArgs),
    /// Install the embedding model that search runs on, or serve it.
    Models(models::ModelsArgs),
    /// Copy a running SQLite server's database into a file, consistently.
    Backup(backup::BackupArgs),
    /// Copy a stopped store into an empty one, SQLite to PostgreSQL or back.
    MigrateStore(migrate_store::MigrateStoreArgs),
}
