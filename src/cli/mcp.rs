//! `taskq mcp`: the stdio bridge to a running server's MCP tools.

use anyhow::Context as _;

#[derive(clap::Args, Debug, Clone)]
pub struct McpArgs {
    /// Base URL of the running server (e.g. https://taskq.example.com).
    #[arg(long, env = "TASKQ_URL")]
    pub url: String,
    /// Name of the environment variable that holds the member's API key.
    #[arg(long, default_value = "TASKQ_API_KEY")]
    pub api_key_env: String,
}

pub async fn run(args: McpArgs) -> anyhow::Result<()> {
    let key = std::env::var(&args.api_key_env)
        .with_context(|| format!("the environment variable {} is not set", args.api_key_env))?;
    crate::mcp::bridge::run(&args.url, &key).await
}
