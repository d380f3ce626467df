//! A small OpenAI-compatible chat endpoint for the tests: every call is
//! answered with the text a test set, or that a test's closure computes
//! from the prompt, so the server's planner and report writers see a model
//! whose answers are known. It counts calls, remembers what the server
//! sent, and can be taken down (503) or slowed.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

/// Computes an answer from the text of all the messages of a call.
pub type AnswerFn = Arc<dyn Fn(&str) -> String + Send + Sync>;

#[derive(Default)]
pub struct Seen {
    pub calls: AtomicUsize,
    pub down: AtomicBool,
    pub delay: Mutex<Duration>,
    pub answer: Mutex<String>,
    pub answer_by: Mutex<Option<AnswerFn>>,
    pub authorization: Mutex<Option<String>>,
    pub requests: Mutex<Vec<Value>>,
}

pub struct ChatStub {
    /// The base URL, `http://<addr>/v1`.
    pub url: String,
    pub seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ChatStub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ChatStub {
    pub async fn start() -> ChatStub {
        let seen = Arc::new(Seen::default());
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        ChatStub {
            url: format!("http://{addr}/v1"),
            seen,
            task,
        }
    }

    /// The content every call answers (unless `answer_by` is set).
    pub fn answer(&self, text: impl Into<String>) {
        *self.seen.answer.lock().unwrap() = text.into();
    }

    /// Answers each call with `f` of its messages' text, joined by newlines.
    pub fn answer_by(&self, f: impl Fn(&str) -> String + Send + Sync + 'static) {
        *self.seen.answer_by.lock().unwrap() = Some(Arc::new(f));
    }

    /// While down, every call is answered 503.
    pub fn down(&self, down: bool) {
        self.seen.down.store(down, Ordering::SeqCst);
    }

    /// How long each call waits before it is answered.
    pub fn delay(&self, delay: Duration) {
        *self.seen.delay.lock().unwrap() = delay;
    }

    /// Calls received, answered or not.
    pub fn calls(&self) -> usize {
        self.seen.calls.load(Ordering::SeqCst)
    }

    /// The bodies of the calls received, oldest first.
    pub fn requests(&self) -> Vec<Value> {
        self.seen.requests.lock().unwrap().clone()
    }

    /// The last call's Authorization header.
    pub fn authorization(&self) -> Option<String> {
        self.seen.authorization.lock().unwrap().clone()
    }
}

async fn completions(
    State(seen): State<Arc<Seen>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    seen.calls.fetch_add(1, Ordering::SeqCst);
    *seen.authorization.lock().unwrap() = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    seen.requests.lock().unwrap().push(body.clone());
    let delay = *seen.delay.lock().unwrap();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if seen.down.load(Ordering::SeqCst) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": "down"})),
        );
    }
    let prompt: Vec<&str> = body["messages"]
        .as_array()
        .map(|a| a.iter().filter_map(|m| m["content"].as_str()).collect())
        .unwrap_or_default();
    let answer_by = seen.answer_by.lock().unwrap().clone();
    let content = match answer_by {
        Some(f) => f(&prompt.join("\n")),
        None => seen.answer.lock().unwrap().clone(),
    };
    (
        StatusCode::OK,
        Json(json!({
            "id": "x",
            "object": "chat.completion",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop"
            }]
        })),
    )
}
