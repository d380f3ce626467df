//! `/metrics` in Prometheus text format: requests by route and status, claim
//! latency, actors alive and restarted, requests refused by a limit, claims
//! waiting (long polls), queue depth by org. The same middleware logs each
//! request at debug level (`RUST_LOG=taskq=debug`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use dashmap::DashMap;

use super::error::ApiError;
use super::extract::Operator;
use super::AppState;

/// Upper bounds of the claim latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// A request's route template (`unmatched` when none matched), method and
/// status.
type RequestKey = (Box<str>, Method, u16);

#[derive(Default)]
pub struct Metrics {
    requests: DashMap<RequestKey, AtomicU64>,
    claim_buckets: [AtomicU64; BUCKETS.len()],
    claim_count: AtomicU64,
    claim_sum_micros: AtomicU64,
}

impl Metrics {
    /// Counts one request. The key is built once and moved into the map
    /// only for its first request: this runs for every request served.
    fn record(&self, key: RequestKey, elapsed_secs: f64) {
        let is_claim = &*key.0 == "/tasks/claim";
        if let Some(c) = self.requests.get(&key) {
            c.fetch_add(1, Ordering::Relaxed);
        } else {
            self.requests
                .entry(key)
                .or_default()
                .fetch_add(1, Ordering::Relaxed);
        }
        if is_claim {
            for (i, bound) in BUCKETS.iter().enumerate() {
                if elapsed_secs <= *bound {
                    self.claim_buckets[i].fetch_add(1, Ordering::Relaxed);
                }
            }
            self.claim_count.fetch_add(1, Ordering::Relaxed);
            self.claim_sum_micros
                .fetch_add((elapsed_secs * 1e6) as u64, Ordering::Relaxed);
        }
    }
}

/// Middleware: counts every request by its route template and status.
pub async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().cloned();
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    let method = request.method().clone();
    let start = Instant::now();
    let response = next.run(request).await;
    let elapsed = start.elapsed();
    let status = response.status().as_u16();
    tracing::debug!(%method, %route, status, elapsed_ms = elapsed.as_secs_f64() * 1e3, "request");
    state
        .metrics
        .record((route.into(), method, status), elapsed.as_secs_f64());
    response
}

pub async fn render(State(state): State<AppState>, _: Operator) -> Result<Response, ApiError> {
    let m = &state.metrics;
    let mut out = String::new();
    let _ = writeln!(out, "# TYPE taskq_http_requests_total counter");
    for e in m.requests.iter() {
        let (route, method, status) = e.key();
        let _ = writeln!(
            out,
            "taskq_http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}} {}",
            e.value().load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(out, "# TYPE taskq_claim_latency_seconds histogram");
    for (i, bound) in BUCKETS.iter().enumerate() {
        let _ = writeln!(
            out,
            "taskq_claim_latency_seconds_bucket{{le=\"{bound}\"}} {}",
            m.claim_buckets[i].load(Ordering::Relaxed)
        );
    }
    let count = m.claim_count.load(Ordering::Relaxed);
    let _ = writeln!(
        out,
        "taskq_claim_latency_seconds_bucket{{le=\"+Inf\"}} {count}"
    );
    let _ = writeln!(
        out,
        "taskq_claim_latency_seconds_sum {}",
        m.claim_sum_micros.load(Ordering::Relaxed) as f64 / 1e6
    );
    let _ = writeln!(out, "taskq_claim_latency_seconds_count {count}");
    let engine = &state.engine;
    let stats = engine.actor_stats();
    let _ = writeln!(out, "# TYPE taskq_actors_alive gauge");
    let _ = writeln!(out, "taskq_actors_alive {}", engine.actors_alive());
    let _ = writeln!(out, "# TYPE taskq_actors_spawned_total counter");
    let _ = writeln!(
        out,
        "taskq_actors_spawned_total {}",
        stats.spawned.load(Ordering::Relaxed)
    );
    let _ = writeln!(out, "# TYPE taskq_actor_restarts_total counter");
    let _ = writeln!(
        out,
        "taskq_actor_restarts_total {}",
        stats.restarts.load(Ordering::Relaxed)
    );
    let _ = writeln!(out, "# TYPE taskq_actor_idle_stops_total counter");
    let _ = writeln!(
        out,
        "taskq_actor_idle_stops_total {}",
        stats.idle_stops.load(Ordering::Relaxed)
    );
    let _ = writeln!(out, "# TYPE taskq_rate_limit_refusals_total counter");
    let _ = writeln!(
        out,
        "taskq_rate_limit_refusals_total {}",
        engine.refusals_total()
    );
    let _ = writeln!(out, "# TYPE taskq_store_up gauge");
    let _ = writeln!(out, "taskq_store_up {}", u8::from(!engine.store_down()));
    let _ = writeln!(out, "# TYPE taskq_claim_waiters gauge");
    let _ = writeln!(out, "taskq_claim_waiters {}", engine.claim_waiters());
    if let Some(m) = engine.meaning_stats() {
        let _ = writeln!(out, "# TYPE taskq_embedding_backlog gauge");
        let _ = writeln!(out, "taskq_embedding_backlog {}", m.backlog);
        let _ = writeln!(out, "# TYPE taskq_search_index_tasks gauge");
        let _ = writeln!(out, "taskq_search_index_tasks {}", m.indexed_tasks);
        let _ = writeln!(out, "# TYPE taskq_search_index_bytes gauge");
        let _ = writeln!(out, "taskq_search_index_bytes {}", m.index_bytes);
    }
    let _ = writeln!(out, "# TYPE taskq_queue_depth gauge");
    for (org, depth) in engine.queue_depths() {
        let _ = writeln!(out, "taskq_queue_depth{{org_id=\"{org}\"}} {depth}");
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response())
}
