//! `--webhook`: what a webhook endpoint subscribed to every event costs
//! the claim path. The bench serves a receiver on loopback (one that
//! answers at once, or one that answers after 2 s), subscribes every org
//! to it once the tasks are created, so the cycles alone make events, and
//! counts the distinct events (`webhook-id`) that reach it: during the
//! cycles, and after them until the server has nothing more to send (the
//! outbox's backlog when the cycles ended), waiting at most [`DRAIN`].

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use clap::ValueEnum;
use serde::Serialize;
use serde_json::json;
use tokio::task::JoinHandle;

/// The longest the bench waits for the backlog after the cycles.
const DRAIN: Duration = Duration::from_secs(60);
/// How long no new event must arrive for the backlog to count as sent.
const QUIET: Duration = Duration::from_secs(3);
/// How long the slow receiver takes to answer.
const SLOW_ANSWER: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Receiver {
    /// Answers 200 at once.
    Fast,
    /// Answers 200 after 2 s.
    Slow,
}

#[derive(Default)]
struct Seen {
    ids: HashSet<String>,
    last: Option<Instant>,
}

/// The receiver, served until it is dropped.
pub(super) struct Sink {
    kind: Receiver,
    url: String,
    seen: Arc<Mutex<Seen>>,
    task: JoinHandle<()>,
}

impl Sink {
    pub(super) async fn start(kind: Receiver) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the bench's webhook receiver")?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state((kind, seen.clone()));
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("warning: the bench's webhook receiver stopped: {e}");
            }
        });
        Ok(Sink {
            kind,
            url,
            seen,
            task,
        })
    }

    /// `POST /webhooks` for every event, with each org's owner key.
    pub(super) async fn subscribe(&self, base: &str, owner_keys: &[String]) -> anyhow::Result<()> {
        let client = reqwest::Client::new();
        for key in owner_keys {
            let answer = client
                .post(format!("{base}/webhooks"))
                .header("x-api-key", key)
                .json(&json!({"url": self.url, "events": ["*"], "description": "taskq-bench"}))
                .send()
                .await
                .context("POST /webhooks")?;
            let status = answer.status();
            if status != StatusCode::CREATED {
                let body = answer.text().await.unwrap_or_default();
                return Err(anyhow!("POST /webhooks answered {status}: {body}"));
            }
        }
        Ok(())
    }

    fn delivered(&self) -> (usize, Option<Instant>) {
        let seen = self.seen.lock().expect("not poisoned");
        (seen.ids.len(), seen.last)
    }

    /// What arrived by the end of the cycles, then the backlog sent after.
    pub(super) async fn summary(&self, endpoints: usize) -> WebhookSummary {
        let (during, _) = self.delivered();
        let ended = Instant::now();
        let mut drained = false;
        eprintln!("[webhooks] waiting for the events sent after the cycles");
        while ended.elapsed() < DRAIN {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let last = self.delivered().1.unwrap_or(ended).max(ended);
            if last.elapsed() >= QUIET {
                drained = true;
                break;
            }
        }
        let (total, _) = self.delivered();
        WebhookSummary {
            receiver: self.kind,
            endpoints,
            delivered_during_cycles: during,
            backlog_after_cycles: total - during,
            backlog_drained: drained,
            drain_wait_secs: ended.elapsed().as_secs_f64(),
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(
    State((kind, seen)): State<(Receiver, Arc<Mutex<Seen>>)>,
    headers: HeaderMap,
) -> StatusCode {
    if kind == Receiver::Slow {
        tokio::time::sleep(SLOW_ANSWER).await;
    }
    if let Some(id) = headers.get("webhook-id").and_then(|v| v.to_str().ok()) {
        let mut seen = seen.lock().expect("not poisoned");
        seen.ids.insert(id.to_owned());
        seen.last = Some(Instant::now());
    }
    StatusCode::OK
}

#[derive(Debug, Serialize)]
pub(super) struct WebhookSummary {
    receiver: Receiver,
    endpoints: usize,
    /// Distinct events received while the cycles ran.
    delivered_during_cycles: usize,
    /// Distinct events received after the cycles ended: what the outbox
    /// still held then (all of it when `backlog_drained`).
    backlog_after_cycles: usize,
    backlog_drained: bool,
    drain_wait_secs: f64,
}

impl WebhookSummary {
    pub(super) fn render(&self) -> String {
        let receiver = match self.receiver {
            Receiver::Fast => "answering at once",
            Receiver::Slow => "answering after 2 s",
        };
        let backlog = if self.backlog_drained {
            format!(
                "{} events, sent within {:.1} s",
                self.backlog_after_cycles, self.drain_wait_secs
            )
        } else {
            format!(
                "at least {} events (still sending after {:.0} s)",
                self.backlog_after_cycles, self.drain_wait_secs
            )
        };
        format!(
            "webhooks: {} endpoint(s) taking every event, receiver {receiver}\n  \
             delivered during the cycles: {} events; backlog when they ended: {backlog}\n",
            self.endpoints, self.delivered_during_cycles
        )
    }
}
