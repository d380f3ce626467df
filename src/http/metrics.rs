//! `/metrics` in Prometheus text format, through `prometheus-client`:
//! requests by route and status, claim latency, actors alive and
//! restarted, requests refused by a limit, claims waiting (long polls),
//! queue depth by org, and with several nodes the requests forwarded
//! between them. Requests and claim latency are counted by the [`Track`]
//! layer as they are served; every other figure is the engine's own,
//! read when `/metrics` is scraped, so nothing is counted twice.

use std::fmt;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use pin_project_lite::pin_project;
use prometheus_client::encoding::prometheus_text::{self, encode};
use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tower_layer::Layer;
use tower_service::Service;

use super::error::ApiError;
use super::extract::Operator;
use super::AppState;

/// Upper bounds of the claim latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// The route whose latency the histogram measures.
const CLAIM_ROUTE: &str = "/tasks/claim";

/// A request's route template, compared by its text: `unmatched` when no
/// route matched. It holds the router's own shared string, so counting a
/// request allocates nothing once its series exists.
#[derive(Clone, Debug)]
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

/// The labels of `taskq_http_requests_total`: route template, method and
/// status, in that order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RequestLabels {
    route: RouteName,
    method: Method,
    status: u16,
}

impl EncodeLabelSet for RequestLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), fmt::Error> {
        ("route", self.route.as_str()).encode(encoder.encode_label())?;
        ("method", self.method.as_str()).encode(encoder.encode_label())?;
        ("status", self.status).encode(encoder.encode_label())
    }
}

/// What the [`Track`] layer counts, registered once.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    claim_latency: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        let requests = Family::<RequestLabels, Counter>::default();
        let claim_latency = Histogram::new(BUCKETS);
        let mut registry = Registry::default();
        registry.register(
            "taskq_http_requests",
            "Requests answered, by route template, method and status",
            requests.clone(),
        );
        registry.register(
            "taskq_claim_latency_seconds",
            "Time to answer a claim, long polls' waits included",
            claim_latency.clone(),
        );
        Self {
            registry,
            requests,
            claim_latency,
        }
    }
}

impl Metrics {
    /// Counts one request; this runs for every request served.
    fn record(&self, labels: RequestLabels, elapsed_secs: f64) {
        let is_claim = labels.route.as_str() == CLAIM_ROUTE;
        self.requests.get_or_create(&labels).inc();
        if is_claim {
            self.claim_latency.observe(elapsed_secs);
        }
    }
}

/// The layer that counts every request by its route template and status.
/// It wraps each route (so the matched path is known) and the fallbacks.
/// Written as a plain tower layer rather than with `middleware::from_fn`,
/// which boxes a clone of the inner service and the future of every request.
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
            let labels = RequestLabels {
                route: p.route,
                method: p.method,
                status: response.status().as_u16(),
            };
            p.state
                .metrics
                .record(labels, p.start.elapsed().as_secs_f64());
        }
        Poll::Ready(result)
    }
}

pub async fn render(State(state): State<AppState>, _: Operator) -> Result<Response, ApiError> {
    let mut out = String::new();
    encode(&mut out, &state.metrics.registry)
        .and_then(|()| encode(&mut out, &engine_figures(&state)))
        .map_err(|_| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "metrics unwritable"))?;
    Ok(([(header::CONTENT_TYPE, prometheus_text::CONTENT_TYPE)], out).into_response())
}

/// The engine's figures as they are now, as one registry of constants.
/// Counters are named without `_total`, which the encoder appends.
fn engine_figures(state: &AppState) -> Registry {
    let engine = &state.engine;
    let stats = engine.actor_stats();
    let writer = engine.writer_totals();
    let cache = engine.claim_cache();
    let mut r = Registry::default();
    let gauge = |r: &mut Registry, name: &str, help: &str, value: usize| {
        r.register(name, help, ConstGauge::new(value));
    };
    let counter = |r: &mut Registry, name: &str, help: &str, value: u64| {
        r.register(name, help, ConstCounter::new(value));
    };
    gauge(
        &mut r,
        "taskq_actors_alive",
        "Org actors running",
        engine.actors_alive(),
    );
    for (name, help, value) in [
        (
            "taskq_actors_spawned",
            "Org actors started",
            stats.spawned.load(Ordering::Relaxed),
        ),
        (
            "taskq_actor_restarts",
            "Org actors restarted after a crash",
            stats.restarts.load(Ordering::Relaxed),
        ),
        (
            "taskq_actor_idle_stops",
            "Org actors stopped for being idle",
            stats.idle_stops.load(Ordering::Relaxed),
        ),
        (
            "taskq_rate_limit_refusals",
            "Requests refused by an org's rate limits",
            engine.refusals_total(),
        ),
    ] {
        counter(&mut r, name, help, value);
    }
    gauge(
        &mut r,
        "taskq_store_up",
        "Whether the store answers (1) or is down (0)",
        usize::from(!engine.store_down()),
    );
    for (name, help, value) in [
        ("taskq_commits", "Group commits", writer.commits),
        (
            "taskq_commit_batches",
            "Write batches committed",
            writer.batches,
        ),
        ("taskq_commit_rows", "Rows committed", writer.rows),
        (
            "taskq_commit_failures",
            "Group commits failed",
            writer.failed,
        ),
        (
            "taskq_claims_kept",
            "Claims answered from content kept in memory",
            cache.claims_kept,
        ),
        (
            "taskq_claims_read",
            "Claims answered from the store",
            cache.claims_read,
        ),
        (
            "taskq_claim_cache_refilled",
            "Tasks whose content was read ahead of their claims",
            cache.tasks_refilled,
        ),
        (
            "taskq_board_pages_shared",
            "Board pages made from a list another board read",
            state.board_lists.shared_total(),
        ),
    ] {
        counter(&mut r, name, help, value);
    }
    r.register(
        "taskq_commit_seconds",
        "Time spent committing; its rate is the share of time a commit was under way (per lane)",
        ConstCounter::new(writer.commit_micros as f64 / 1e6),
    );
    gauge(
        &mut r,
        "taskq_claim_waiters",
        "Claims waiting for a task (long polls)",
        engine.claim_waiters(),
    );
    gauge(
        &mut r,
        "taskq_task_waits",
        "Waits for tasks to finish (POST /tasks/wait) held",
        engine.task_waits(),
    );
    if let Some(m) = engine.meaning_stats() {
        for (name, help, value) in [
            (
                "taskq_embedding_backlog",
                "Tasks waiting for a vector",
                m.backlog,
            ),
            (
                "taskq_search_index_tasks",
                "Tasks in the search indexes",
                m.indexed_tasks,
            ),
            (
                "taskq_search_index_bytes",
                "Memory of the search indexes",
                m.index_bytes,
            ),
        ] {
            gauge(&mut r, name, help, value);
        }
    }
    if let Some(traffic) = engine.traffic() {
        for (name, help, value) in [
            (
                "taskq_cluster_requests",
                "Requests for an org this node answered",
                traffic.requests,
            ),
            (
                "taskq_cluster_forwarded",
                "Of those, the ones forwarded to the org's owner",
                traffic.forwarded,
            ),
            (
                "taskq_cluster_received_forwarded",
                "Requests another node forwarded to this one",
                traffic.received,
            ),
        ] {
            counter(&mut r, name, help, value);
        }
    }
    let depths = Family::<[(&'static str, String); 1], Gauge>::default();
    for (org, depth) in engine.queue_depths() {
        depths
            .get_or_create(&[("org_id", org.to_string())])
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }
    r.register("taskq_queue_depth", "Pending tasks by org", depths);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_claim_latency_keep_their_series() {
        let metrics = Metrics::default();
        let unmatched = RequestLabels {
            route: RouteName(None),
            method: Method::GET,
            status: 404,
        };
        metrics.record(unmatched.clone(), 0.1);
        metrics.record(unmatched, 0.1);
        metrics.claim_latency.observe(0.003);
        let mut text = String::new();
        encode(&mut text, &metrics.registry).expect("a String takes any text");
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("# HELP")).collect();
        assert_eq!(
            lines[..5],
            [
                "# TYPE taskq_http_requests_total counter",
                r#"taskq_http_requests_total{route="unmatched",method="GET",status="404"} 2"#,
                "# TYPE taskq_claim_latency_seconds histogram",
                r#"taskq_claim_latency_seconds_bucket{le="0.001"} 0"#,
                r#"taskq_claim_latency_seconds_bucket{le="0.002"} 0"#,
            ],
            "{text}"
        );
        for line in [
            r#"taskq_claim_latency_seconds_bucket{le="0.005"} 1"#,
            r#"taskq_claim_latency_seconds_bucket{le="1"} 1"#,
            r#"taskq_claim_latency_seconds_bucket{le="10"} 1"#,
            r#"taskq_claim_latency_seconds_bucket{le="+Inf"} 1"#,
            "taskq_claim_latency_seconds_sum 0.003",
            "taskq_claim_latency_seconds_count 1",
        ] {
            assert!(lines.contains(&line), "{line} in {text}");
        }
    }
}
