//! The HTTP front end: routes, extractors, and the error mapping.
//!
//! Handlers authenticate, parse, make one engine call and convert its answer;
//! no business rule lives here and nothing here touches the store.

mod admin;
mod error;
mod extract;
mod keys;
mod metrics;
mod tasks;

use std::sync::Arc;

use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use taskq_actors::Engine;

pub use error::ApiError;

#[derive(Clone)]
pub struct AppState {
    pub engine: Engine,
    /// The operator token; `None` disables `/admin`.
    pub admin_token: Option<Arc<str>>,
    pub metrics: Arc<metrics::Metrics>,
}

impl AppState {
    pub fn new(engine: Engine, admin_token: Option<Arc<str>>) -> Self {
        Self {
            engine,
            admin_token,
            metrics: Arc::default(),
        }
    }
}

pub fn router(state: AppState) -> Router {
    let admin = Router::new()
        .route("/orgs", post(admin::create_org))
        .route(
            "/orgs/{org_id}",
            get(admin::get_org).patch(admin::patch_org),
        )
        .route("/orgs/{org_id}/members", post(admin::add_member))
        .route(
            "/orgs/{org_id}/members/{email}/keys",
            post(admin::reset_key),
        );
    #[cfg(feature = "test-hooks")]
    let admin = admin.route("/orgs/{org_id}/crash", post(admin::crash));

    Router::new()
        .route(
            "/healthz",
            get(|| async { Json(json!({ "status": "ok" })) }),
        )
        .route("/tasks", post(tasks::create).get(tasks::list))
        .route("/tasks/update", post(tasks::update))
        .route("/tasks/get", post(tasks::get))
        .route("/tasks/claim", post(tasks::claim))
        .route("/keys", post(keys::create).get(keys::list))
        .route("/keys/{key_id}", axum::routing::delete(keys::revoke))
        .route("/metrics", get(metrics::render))
        .nest("/admin", admin)
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not found") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
        })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .with_state(state)
}
