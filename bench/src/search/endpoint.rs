//! The OpenAI-compatible embeddings endpoints (`POST /v1/embeddings` on a
//! loopback port) that a spawned server is pointed at with
//! `TASKQ_EMBEDDINGS=http://…/v1`:
//! - the builtin model, served by `taskq models serve` from the server
//!   binary (`--server-bin`) as a child of the bench: the server's
//!   endpoint code path with the same vectors as `builtin`, so their
//!   relevance figures should agree. A child rather than in process, so
//!   the bench links no model;
//! - a bag of words served by the bench itself (each lowercase
//!   alphanumeric token hashed with FNV-1a into one of 384 buckets,
//!   counted): deterministic, and so cheap that filling an index of
//!   100,000 tasks takes seconds, not the minutes the model would need.
//!   Its vectors say little about meaning; it is there for the latency of
//!   search at scale, not for relevance.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use taskq_process::{ServeCommand, ServerProcess};
use tokio::task::JoinHandle;

use super::keyword::tokens;
use crate::server::{server_binary, start_error, temp_dir};
use crate::BenchArgs;

/// How long `taskq models serve` may take to load the model and listen.
const MODEL_STARTUP_TIMEOUT: Duration = Duration::from_secs(120);
/// How long it may take to exit after SIGTERM.
const MODEL_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// MiniLM's width, kept by the bag of words so vectors cost the same.
pub(super) const DIMENSIONS: usize = 384;

/// The bag-of-words endpoint, served in the bench until it is dropped.
pub(super) struct LocalEndpoint {
    /// The base URL a server is given (`…/v1`).
    url: String,
    task: JoinHandle<()>,
}

impl LocalEndpoint {
    pub(super) async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the bench's embeddings endpoint")?;
        let address = listener.local_addr()?;
        let app = Router::new().route("/v1/embeddings", post(embeddings));
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("warning: the bench's embeddings endpoint stopped: {e}");
            }
        });
        Ok(LocalEndpoint {
            url: format!("http://{address}/v1"),
            task,
        })
    }

    pub(super) fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for LocalEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Deserialize)]
struct EmbeddingsRequest {
    #[serde(default)]
    model: String,
    input: Input,
}

/// OpenAI accepts one text or a list.
#[derive(Deserialize)]
#[serde(untagged)]
enum Input {
    One(String),
    Many(Vec<String>),
}

async fn embeddings(Json(request): Json<EmbeddingsRequest>) -> Json<Value> {
    let texts = match request.input {
        Input::One(text) => vec![text],
        Input::Many(texts) => texts,
    };
    let data: Vec<_> = texts
        .iter()
        .enumerate()
        .map(|(index, text)| {
            json!({ "object": "embedding", "index": index, "embedding": bag_of_words(text) })
        })
        .collect();
    Json(json!({ "object": "list", "model": request.model, "data": data }))
}

/// `taskq models serve` with the builtin model, in a temporary directory
/// of its own (its log); stopped by `stop`, killed if dropped.
pub(super) struct ModelEndpoint {
    process: ServerProcess,
    dir: PathBuf,
}

impl ModelEndpoint {
    pub(super) async fn start(args: &BenchArgs, model_dir: &Path) -> anyhow::Result<Self> {
        let binary = server_binary(args)?;
        let dir = temp_dir("model-").await?;
        let log = dir.join("models-serve.log");
        let command_line = [
            OsStr::new("models"),
            OsStr::new("serve"),
            OsStr::new("--listen"),
            OsStr::new("127.0.0.1:0"),
            OsStr::new("--model-dir"),
            model_dir.as_os_str(),
        ];
        let command =
            ServeCommand::subcommand(&binary, command_line, &dir, &log, MODEL_STARTUP_TIMEOUT);
        match command.spawn().await {
            Ok(process) => Ok(ModelEndpoint { process, dir }),
            Err(e) => {
                let error = start_error(e, "the embeddings endpoint (taskq models serve)", &log);
                let _ = tokio::fs::remove_dir_all(&dir).await;
                Err(error)
            }
        }
    }

    /// The base URL a server is given (`…/v1`).
    pub(super) fn url(&self) -> String {
        format!("{}/v1", self.process.url())
    }

    /// SIGTERM, a short wait, then SIGKILL; the model's memory is not the
    /// next servers' business.
    pub(super) async fn stop(mut self) {
        if self.process.terminate().is_ok() {
            let _ = self.process.wait_for_exit(MODEL_SHUTDOWN_TIMEOUT).await;
        }
        if let Err(e) = self.process.kill().await {
            eprintln!("warning: stopping the embeddings endpoint: {e}");
        }
    }
}

impl Drop for ModelEndpoint {
    fn drop(&mut self) {
        if self.dir.exists() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Token counts in `DIMENSIONS` buckets chosen by FNV-1a.
pub(super) fn bag_of_words(text: &str) -> Vec<f32> {
    let mut vector = vec![0.0; DIMENSIONS];
    for token in tokens(text) {
        vector[(fnv1a(token.as_bytes()) % DIMENSIONS as u64) as usize] += 1.0;
    }
    vector
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_its_reference_values() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn bag_of_words_counts_tokens_case_blind() {
        let v = bag_of_words("Deploy deploy, DEPLOY the fix");
        assert_eq!(v.len(), DIMENSIONS);
        assert_eq!(v.iter().sum::<f32>(), 5.0);
        assert_eq!(v, bag_of_words("deploy the fix deploy deploy"));
    }

    #[tokio::test]
    async fn answers_like_an_openai_endpoint() {
        crate::install_crypto_provider();
        let endpoint = LocalEndpoint::start().await.unwrap();
        let answer: serde_json::Value = reqwest::Client::new()
            .post(format!("{}/embeddings", endpoint.url()))
            .json(&json!({ "model": "m", "input": ["one two", "three"] }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let data = answer["data"].as_array().unwrap();
        assert_eq!(data.len(), 2);
        assert_eq!(data[1]["index"], 1);
        assert_eq!(data[0]["embedding"].as_array().unwrap().len(), DIMENSIONS);
    }
}
