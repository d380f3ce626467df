//! A small OpenAI-compatible embeddings endpoint for the tests: each text
//! becomes a bag of its words hashed into 256 dimensions, so equal texts
//! score 1, texts sharing words score between, and disjoint texts 0. It
//! counts the texts it embedded, remembers what the server sent, and can be
//! taken down (503) and brought back.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

const DIM: usize = 256;

#[derive(Default)]
pub struct Seen {
    pub texts: AtomicUsize,
    pub down: AtomicBool,
    pub authorization: Mutex<Option<String>>,
    pub model: Mutex<Option<String>>,
    pub inputs: Mutex<Vec<String>>,
}

pub struct Stub {
    pub url: String,
    pub seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Stub {
    pub async fn start() -> Stub {
        let seen = Arc::new(Seen::default());
        let app = Router::new()
            .route("/v1/embeddings", post(embeddings))
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Stub {
            url: format!("http://{addr}/v1"),
            seen,
            task,
        }
    }

    pub fn texts(&self) -> usize {
        self.seen.texts.load(Ordering::SeqCst)
    }

    pub fn set_down(&self, down: bool) {
        self.seen.down.store(down, Ordering::SeqCst);
    }

    /// Whether the server ever sent this text to be embedded.
    pub fn was_sent(&self, needle: &str) -> bool {
        self.seen
            .inputs
            .lock()
            .unwrap()
            .iter()
            .any(|t| t.contains(needle))
    }
}

/// The stub's vector of a text: word counts hashed into `DIM` buckets.
pub fn embed(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; DIM];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let mut h: u64 = 0xcbf29ce484222325;
        for b in word.to_lowercase().bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100000001b3);
        }
        v[(h % DIM as u64) as usize] += 1.0;
    }
    v
}

async fn embeddings(
    State(seen): State<Arc<Seen>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    if seen.down.load(Ordering::SeqCst) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": "down"})),
        );
    }
    *seen.authorization.lock().unwrap() = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    *seen.model.lock().unwrap() = body["model"].as_str().map(str::to_owned);
    let inputs: Vec<String> = body["input"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    seen.texts.fetch_add(inputs.len(), Ordering::SeqCst);
    seen.inputs.lock().unwrap().extend(inputs.iter().cloned());
    // Answered in reverse order, so the server must sort by `index`.
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .rev()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": embed(t)}))
        .collect();
    (
        StatusCode::OK,
        Json(json!({"object": "list", "data": data, "model": body["model"]})),
    )
}
