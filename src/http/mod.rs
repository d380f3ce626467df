//! The HTTP front end: routes, extractors, and the error mapping.
//!
//! Handlers authenticate, parse, make one engine call and convert its answer;
//! no business rule lives here and nothing here touches the store.

mod admin;
mod board;
mod cluster;
mod error;
mod extract;
mod html;
mod lockout;
mod metrics;
mod openapi;
mod operation;
mod table;
mod ui;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::StatusCode;
use axum::response::Response;
#[cfg(feature = "test-hooks")]
use axum::routing::get;
use axum::routing::post;
use axum::{Json, Router};
use schemars::JsonSchema;
use serde::Serialize;
use taskq_actors::Engine;
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::trace::TraceLayer;
use tower_layer::Stack;
use tracing::Span;

pub use operation::{Arguments, MemberCall, Operation, Reply};
pub use table::operations;

use crate::keyfiles::KeySource;

use cluster::OrgOf;
pub use cluster::{peer_client, serve_http2, HttpPeers};
pub use error::ApiError;
pub use lockout::{OperatorAttempts, TrustedProxies, DEFAULT_WRONG_TOKENS};

/// What every handler shares, behind one `Arc`: each request clones the
/// state for its middleware and each extractor, so a clone is one count.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

pub struct Shared {
    pub engine: Engine,
    /// The operator token; `None` disables `/admin`.
    pub admin_token: Option<Arc<str>>,
    pub metrics: metrics::Metrics,
    /// Where the master keys live, for a rotation.
    pub keys: KeySource,
    /// Wrong operator tokens by client address.
    pub operator_attempts: lockout::OperatorAttempts,
    /// The server speaks TLS itself: session cookies are `Secure`.
    pub secure_cookies: bool,
    /// The client that forwards requests to the other nodes.
    pub peers: reqwest::Client,
    /// Board pages' lists, shared by the boards of an org.
    pub board_lists: board::SharedLists,
    /// The engine's clock, movable by the test hook.
    #[cfg(feature = "test-hooks")]
    pub test_clock: Option<Arc<taskq_actors::clock::OffsetClock>>,
}

impl Shared {
    /// `peers` forwards requests to the other nodes (`outbound.rs`).
    pub fn new(
        engine: Engine,
        admin_token: Option<Arc<str>>,
        keys: KeySource,
        peers: reqwest::Client,
    ) -> Self {
        Self {
            engine,
            admin_token,
            metrics: metrics::Metrics::default(),
            keys,
            operator_attempts: lockout::OperatorAttempts::new(lockout::DEFAULT_WRONG_TOKENS),
            secure_cookies: false,
            peers,
            board_lists: board::SharedLists::default(),
            #[cfg(feature = "test-hooks")]
            test_clock: None,
        }
    }
}

impl From<Shared> for AppState {
    fn from(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// `GET /healthz`: the server is up.
#[derive(Serialize, JsonSchema)]
pub struct Health {
    /// Always `ok`.
    status: &'static str,
}

async fn health() -> Json<Health> {
    Json(Health { status: "ok" })
}

pub fn router(state: AppState) -> Router {
    let api = operations()
        .into_iter()
        .fold(Router::new(), |router, operation| {
            operation.register(router, &state)
        });
    #[cfg(feature = "test-hooks")]
    let api = {
        // An org's crash goes to the node that runs the org.
        let crash = cluster::forwarded(&state, OrgOf::Path, post(admin::crash));
        api.route("/admin/orgs/{org_id}/crash", crash)
            .route("/admin/test/clock", post(admin::advance_clock))
            .route("/admin/test/retention", post(admin::sweep_retention))
            .route(
                "/admin/test/retention/paced",
                post(admin::start_paced_sweep),
            )
            .route("/admin/test/purge", post(admin::purge_deleted))
            .route("/admin/test/purge/hold", post(admin::hold_removals))
            .route("/admin/test/store", post(admin::store_outage))
            .route("/admin/test/deliveries", get(admin::delivery_reads))
    };

    // What the nodes of a cluster ask of each other: not part of the API,
    // and not there at all on a node alone.
    let api = if state.engine.is_clustered() {
        api.route("/internal/peer", post(cluster::peer))
    } else {
        api
    };

    // MCP's transport is a service of its own, behind the same key check
    // (on the node that owns the key's org, with several).
    let mcp = Router::new()
        .route_service("/mcp", crate::mcp::service(state.clone()))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            extract::mcp_gate,
        ));
    let mcp = cluster::forwarded_router(&state, OrgOf::Key, mcp);

    Router::new()
        .merge(mcp)
        .merge(api)
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not found") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
        })
        .layer(Stack::new(
            metrics::Track::new(state.clone()),
            request_log(),
        ))
        .layer(DefaultBodyLimit::max(extract::MAX_BODY_BYTES))
        .with_state(state)
}

/// [`request_log`]'s layer: its span and its one event.
type RequestLog = TraceLayer<
    SharedClassifier<ServerErrorsAsFailures>,
    fn(&Request) -> Span,
    (),
    fn(&Response, Duration, &Span),
    (),
    (),
    (),
>;

/// Each request logged once answered, at debug level
/// (`RUST_LOG=taskq=debug`): method and route template on the span, status
/// and time on the event. Failures are not logged again here: `ApiError`
/// logs the internal ones, and a refusal is no failure of the server.
fn request_log() -> RequestLog {
    TraceLayer::new_for_http()
        .make_span_with(request_span as fn(&Request) -> Span)
        .on_request(())
        .on_response(log_answer as fn(&Response, Duration, &Span))
        .on_body_chunk(())
        .on_eos(())
        .on_failure(())
}

fn request_span(request: &Request) -> Span {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str);
    tracing::debug_span!(target: "taskq::http", "request", method = %request.method(), route)
}

fn log_answer(response: &Response, elapsed: Duration, _: &Span) {
    tracing::debug!(
        target: "taskq::http",
        status = response.status().as_u16(),
        elapsed_ms = elapsed.as_secs_f64() * 1e3,
        "answered"
    );
}
