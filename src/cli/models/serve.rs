//! `taskq models serve`: the builtin model behind an OpenAI-compatible
//! `POST /v1/embeddings`, for processes that should not load it themselves.
//!
//! The load tool (`taskq-bench`) measures search through a server's
//! embeddings-endpoint code path with the builtin model's vectors, so that
//! the endpoint's relevance can be compared with `builtin`'s. It links no
//! model: it starts this command from the server binary instead. Like
//! `taskq serve`, it prints `taskq listening on http://ADDR` on stdout once
//! it accepts requests (`ADDR/v1` is the base URL to give
//! `TASKQ_EMBEDDINGS`), and stops on SIGTERM or SIGINT.
//!
//! No authentication and no limits beyond the request body's: it is meant
//! for loopback and for tests, not for exposure.

use std::net::SocketAddr;
use std::path::PathBuf;
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

use crate::cli::serve::{announce, shutdown_signal};
use crate::embed::{BuiltinEmbedder, DEFAULT_MODEL_DIR};

#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port (the readiness line
    /// on stdout says which).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// The model's folder, as installed by `taskq models fetch`.
    #[arg(long, env = "TASKQ_EMBEDDINGS_MODEL_DIR", default_value = DEFAULT_MODEL_DIR)]
    pub model_dir: PathBuf,
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let dir = args.model_dir.clone();
    let embedder = tokio::task::spawn_blocking(move || BuiltinEmbedder::load(&dir))
        .await?
        .with_context(|| format!("loading the model from {}", args.model_dir.display()))?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let app = Router::new()
        .route("/v1/embeddings", post(embeddings))
        .with_state(Arc::new(embedder));
    let signalled = shutdown_signal()?;
    tracing::info!(
        model = %args.model_dir.display(),
        "embeddings endpoint at http://{addr}/v1"
    );
    announce("http", addr)?;
    axum::serve(listener, app)
        .with_graceful_shutdown(signalled)
        .await
        .context("serving embeddings")
}

#[derive(Deserialize)]
struct EmbeddingsRequest {
    /// Echoed back: the builtin model answers whatever name is asked for.
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
    State(model): State<Arc<BuiltinEmbedder>>,
    Json(request): Json<EmbeddingsRequest>,
) -> Response {
    let texts = match request.input {
        Input::One(text) => vec![text],
        Input::Many(texts) => texts,
    };
    match model.embed(texts).await {
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
