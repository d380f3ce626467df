//! An OpenAI-compatible embeddings endpoint served by the bench itself
//! (`POST /v1/embeddings` on a loopback port), so a spawned server can be
//! pointed at it with `TASKQ_EMBEDDINGS=http://…/v1`. Two backends:
//! - the builtin model, loaded in the bench's process: the server's
//!   endpoint code path with the same vectors as `builtin`, so their
//!   relevance figures should agree;
//! - a bag of words (each lowercase alphanumeric token hashed with FNV-1a
//!   into one of 384 buckets, counted): deterministic, and so cheap that
//!   filling an index of 100,000 tasks takes seconds, not the minutes the
//!   model would need. Its vectors say little about meaning; it is there
//!   for the latency of search at scale, not for relevance.

use std::sync::Arc;

use anyhow::Context as _;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use taskq_actors::embed::Embedder;
use tokio::task::JoinHandle;

use super::keyword::tokens;
use crate::embed::BuiltinEmbedder;

/// MiniLM's width, kept by the bag of words so vectors cost the same.
pub(super) const DIMENSIONS: usize = 384;

pub(super) enum Backend {
    Model(BuiltinEmbedder),
    BagOfWords,
}

/// The endpoint, served until it is dropped.
pub(super) struct LocalEndpoint {
    /// The base URL a server is given (`…/v1`).
    url: String,
    task: JoinHandle<()>,
}

impl LocalEndpoint {
    pub(super) async fn start(backend: Backend) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the bench's embeddings endpoint")?;
        let address = listener.local_addr()?;
        let app = Router::new()
            .route("/v1/embeddings", post(embeddings))
            .with_state(Arc::new(backend));
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

async fn embeddings(
    State(backend): State<Arc<Backend>>,
    Json(request): Json<EmbeddingsRequest>,
) -> Response {
    let texts = match request.input {
        Input::One(text) => vec![text],
        Input::Many(texts) => texts,
    };
    let vectors = match &*backend {
        Backend::Model(model) => model.embed(texts).await,
        Backend::BagOfWords => Ok(texts.iter().map(|t| bag_of_words(t)).collect()),
    };
    match vectors {
        Ok(vectors) => {
            let data: Vec<_> = vectors
                .into_iter()
                .enumerate()
                .map(|(index, embedding)| {
                    json!({ "object": "embedding", "index": index, "embedding": embedding })
                })
                .collect();
            Json(json!({ "object": "list", "model": request.model, "data": data })).into_response()
        }
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "error": { "message": e.to_string() } })),
        )
            .into_response(),
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
        let endpoint = LocalEndpoint::start(Backend::BagOfWords).await.unwrap();
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
