//! `taskq keys rotate-master`: re-wraps every org's data key under a new
//! master key, through a running server's operator API or, with the server
//! stopped, against the store directly. Both run `keyfiles::rotate`.

use std::path::PathBuf;

use anyhow::Context as _;
use taskq_actors::{Engine, EngineConfig};

use super::serve::StoreArgs;
use crate::keyfiles::{rotate, KeySource};
use crate::outbound::{self, Proxies};

#[derive(clap::Args, Debug, Clone)]
pub struct KeysArgs {
    #[command(subcommand)]
    pub command: KeysCommand,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum KeysCommand {
    /// Make a new master key current and re-wrap every org's data key with
    /// it. Safe to run again after a crash: it finishes what is left.
    RotateMaster(RotateArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct RotateArgs {
    /// File holding the new master key: base64 of 32 random bytes.
    #[arg(long)]
    pub new_key_file: PathBuf,
    /// A running server's base URL: rotate through its operator API (with
    /// TASKQ_ADMIN_TOKEN). Without it the server must be stopped.
    #[arg(long)]
    pub url: Option<String>,
    /// The server's store and data directory, used when it is stopped.
    #[command(flatten)]
    pub store: StoreArgs,
}

pub async fn run(args: KeysArgs) -> anyhow::Result<()> {
    let KeysCommand::RotateMaster(args) = args.command;
    let new_key = std::fs::read_to_string(&args.new_key_file)
        .with_context(|| format!("reading {}", args.new_key_file.display()))?;
    let new_key = new_key.trim();
    let answer = match &args.url {
        Some(url) => rotate_online(url, new_key).await?,
        None => {
            let source = KeySource::of(&args.store.data_dir);
            let config = EngineConfig::with_keyring(args.store.database_url, source.load()?);
            let engine = Engine::start(config).await.context("opening the store")?;
            let report = rotate(&engine, &source, new_key).await;
            engine.shutdown().await;
            serde_json::to_value(report?)?
        }
    };
    println!("{answer}");
    anyhow::ensure!(
        answer["previous_keys_retired"] == true,
        "some data keys are still wrapped by a previous master key: run the rotation again"
    );
    Ok(())
}

async fn rotate_online(url: &str, new_key: &str) -> anyhow::Result<serde_json::Value> {
    let token = std::env::var("TASKQ_ADMIN_TOKEN")
        .context("TASKQ_ADMIN_TOKEN must hold the operator token to rotate through --url")?;
    outbound::check_tls(url)?;
    let response = outbound::client_builder(Proxies::FromEnvironment)
        .build()?
        .post(format!(
            "{}/admin/master-key/rotate",
            url.trim_end_matches('/')
        ))
        .bearer_auth(token)
        .json(&serde_json::json!({ "new_key": new_key }))
        .send()
        .await
        .with_context(|| format!("calling {url}"))?;
    let status = response.status();
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    anyhow::ensure!(status.is_success(), "the server answered {status}: {body}");
    Ok(body)
}
