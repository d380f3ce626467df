//! `/metrics` in Prometheus text format: requests by route and status, claim
//! latency, actors alive and restarted, requests refused by a limit, claims
//! waiting (long polls), queue depth by org, and with several nodes the
//! requests forwarded between them. The same layer logs each
//! request at debug level (`RUST_LOG=taskq=debug`).

use std::fmt::Write as _;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{ready, Context, Poll};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method};
use axum::response::{IntoResponse, Response};
use dashmap::DashMap;
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use super::error::ApiError;
use super::extract::Operator;
use super::AppState;

/// Upper bounds of the claim latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// A request's route template, compared by its text: `unmatched` when no
/// route matched. It holds the router's own shared string, so counting a
/// request allocates nothing.
#[derive(Clone)]
struct RouteName(Option<MatchedPath>);

impl RouteName {
    fn as_str(&self) -> &str {
        self.0.as_ref().map_or("unmatched", MatchedPath::as_str)
    }
}

impl PartialEq for RouteName {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for RouteName {}

impl Hash for RouteName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

/// A request's route template, method and status.
type RequestKey = (RouteName, Method, u16);

#[derive(Default)]
pub struct Metrics {
    requests: DashMap<RequestKey, AtomicU64>,
    claim_buckets: [AtomicU64; BUCKETS.len()],
    claim_count: AtomicU64,
    claim_sum_micros: AtomicU64,
}

impl Metrics {
    /// Counts one request. The key moves into the map only for its route's
    /// first request with that method and status: this runs for every
    /// request served.
    fn record(&self, key: RequestKey, elapsed_secs: f64) {
        let is_claim = key.0.as_str() == "/tasks/claim";
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

/// The layer that counts every request by its route template and status,
/// and logs it at debug level. It wraps each route (so the matched path is
/// known) and the fallbacks. Written as a plain tower layer rather than with
/// `middleware::from_fn`, which boxes a clone of the inner service and the
/// future of every request.
#[derive(Clone)]
pub struct Track {
    state: AppState,
}

impl Track {
    pub fn new(state: AppState) -> Self {
        Self { state }
    }
}

impl<S> Layer<S> for Track {
    type Service = Tracked<S>;

    fn layer(&self, inner: S) -> Tracked<S> {
        Tracked {
            inner,
            state: self.state.clone(),
        }
    }
}

/// A service wrapped by [`Track`].
#[derive(Clone)]
pub struct Tracked<S> {
    inner: S,
    state: AppState,
}

impl<S> Service<Request> for Tracked<S>
where
    S: Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = TrackedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let route = RouteName(request.extensions().get::<MatchedPath>().cloned());
        let method = request.method().clone();
        TrackedFuture {
            inner: self.inner.call(request),
            pending: Some(Pending {
                state: self.state.clone(),
                route,
                method,
                start: Instant::now(),
            }),
        }
    }
}

/// What a request's count needs once its response is ready.
struct Pending {
    state: AppState,
    route: RouteName,
    method: Method,
    start: Instant,
}

pin_project! {
    /// The future of a request wrapped by [`Track`]: the inner future, then
    /// the count.
    pub struct TrackedFuture<F> {
        #[pin]
        inner: F,
        pending: Option<Pending>,
    }
}

impl<F, E> Future for TrackedFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        if let (Ok(response), Some(p)) = (&result, this.pending.take()) {
            let elapsed = p.start.elapsed();
            let status = response.status().as_u16();
            tracing::debug!(
                method = %p.method,
                route = %p.route.as_str(),
                status,
                elapsed_ms = elapsed.as_secs_f64() * 1e3,
                "request"
            );
            p.state
                .metrics
                .record((p.route, p.method, status), elapsed.as_secs_f64());
        }
        Poll::Ready(result)
    }
}

pub async fn render(State(state): State<AppState>, _: Operator) -> Result<Response, ApiError> {
    let m = &state.metrics;
    let mut out = String::new();
    let _ = writeln!(out, "# TYPE taskq_http_requests_total counter");
    for e in m.requests.iter() {
        let (route, method, status) = e.key();
        let route = route.as_str();
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
    let writer = engine.writer_totals();
    let cache = engine.claim_cache();
    scalar(
        &mut out,
        "gauge",
        "taskq_actors_alive",
        engine.actors_alive(),
    );
    for (name, value) in [
        (
            "taskq_actors_spawned_total",
            stats.spawned.load(Ordering::Relaxed),
        ),
        (
            "taskq_actor_restarts_total",
            stats.restarts.load(Ordering::Relaxed),
        ),
        (
            "taskq_actor_idle_stops_total",
            stats.idle_stops.load(Ordering::Relaxed),
        ),
        ("taskq_rate_limit_refusals_total", engine.refusals_total()),
    ] {
        scalar(&mut out, "counter", name, value);
    }
    scalar(
        &mut out,
        "gauge",
        "taskq_store_up",
        u8::from(!engine.store_down()),
    );
    for (name, value) in [
        ("taskq_commits_total", writer.commits),
        ("taskq_commit_batches_total", writer.batches),
        ("taskq_commit_rows_total", writer.rows),
        ("taskq_commit_failures_total", writer.failed),
        ("taskq_claims_kept_total", cache.claims_kept),
        ("taskq_claims_read_total", cache.claims_read),
        ("taskq_claim_cache_refilled_total", cache.tasks_refilled),
        (
            "taskq_board_pages_shared_total",
            state.board_lists.shared_total(),
        ),
    ] {
        scalar(&mut out, "counter", name, value);
    }
    // Its rate is the share of time a commit was under way (per lane).
    let commit_secs = writer.commit_micros as f64 / 1e6;
    scalar(
        &mut out,
        "counter",
        "taskq_commit_seconds_total",
        commit_secs,
    );
    scalar(
        &mut out,
        "gauge",
        "taskq_claim_waiters",
        engine.claim_waiters(),
    );
    scalar(&mut out, "gauge", "taskq_task_waits", engine.task_waits());
    if let Some(m) = engine.meaning_stats() {
        scalar(&mut out, "gauge", "taskq_embedding_backlog", m.backlog);
        scalar(
            &mut out,
            "gauge",
            "taskq_search_index_tasks",
            m.indexed_tasks,
        );
        scalar(&mut out, "gauge", "taskq_search_index_bytes", m.index_bytes);
    }
    if let Some(traffic) = engine.traffic() {
        // Requests for an org this node answered; of those, the ones it
        // forwarded to the org's owner and the ones another node sent it.
        for (name, value) in [
            ("taskq_cluster_requests_total", traffic.requests),
            ("taskq_cluster_forwarded_total", traffic.forwarded),
            ("taskq_cluster_received_forwarded_total", traffic.received),
        ] {
            scalar(&mut out, "counter", name, value);
        }
    }
    let _ = writeln!(out, "# TYPE taskq_queue_depth gauge");
    for (org, depth) in engine.queue_depths() {
        let _ = writeln!(out, "taskq_queue_depth{{org_id=\"{org}\"}} {depth}");
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response())
}

/// One unlabelled series: its type line and its value.
fn scalar(out: &mut String, kind: &str, name: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name} {value}");
}
