//! The HTTP front end: routes, extractors, and the error mapping.
//!
//! Handlers authenticate, parse, make one engine call and convert its answer;
//! no business rule lives here and nothing here touches the store.

mod admin;
mod error;
mod extract;
mod keys;
mod metrics;
mod org_admin;
mod tasks;
mod ui;

use std::sync::Arc;

use axum::http::StatusCode;
use axum::routing::{delete, get, patch, post};
use axum::{Json, Router};
use serde_json::json;
use taskq_actors::Engine;

use crate::keyfiles::KeySource;

pub use error::ApiError;

#[derive(Clone)]
pub struct AppState {
    pub engine: Engine,
    /// The operator token; `None` disables `/admin`.
    pub admin_token: Option<Arc<str>>,
    pub metrics: Arc<metrics::Metrics>,
    /// Where the master keys live, for a rotation.
    pub keys: Arc<KeySource>,
    /// Sessions of the operator page.
    pub sessions: Arc<ui::Sessions>,
    /// The server speaks TLS itself: session cookies are `Secure`.
    pub secure_cookies: bool,
    /// The engine's clock, movable by the test hook.
    #[cfg(feature = "test-hooks")]
    pub test_clock: Option<Arc<taskq_actors::clock::OffsetClock>>,
}

impl AppState {
    pub fn new(engine: Engine, admin_token: Option<Arc<str>>, keys: KeySource) -> Self {
        Self {
            engine,
            admin_token,
            metrics: Arc::default(),
            keys: Arc::new(keys),
            sessions: Arc::default(),
            secure_cookies: false,
            #[cfg(feature = "test-hooks")]
            test_clock: None,
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
        )
        .route("/members/unblock", post(admin::unblock_member))
        .route("/feedback", get(admin::feedback_org))
        .route("/orgs/{org_id}/idp", post(admin::set_idp))
        .route("/orgs/{org_id}/idp/sync", post(admin::idp_sync))
        .route("/master-key/rotate", post(admin::rotate_master_key))
        .route("/stats", get(ui::stats))
        .route("/ui", get(ui::page))
        .route("/ui/login", post(ui::login))
        .route("/ui/logout", post(ui::logout));
    #[cfg(feature = "test-hooks")]
    let admin = admin
        .route("/orgs/{org_id}/crash", post(admin::crash))
        .route("/test/clock", post(admin::advance_clock))
        .route("/test/store", post(admin::store_outage));

    // MCP's transport is a service of its own, behind the same key check.
    let mcp = Router::new()
        .route_service("/mcp", crate::mcp::service(state.engine.clone()))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            extract::mcp_gate,
        ));

    Router::new()
        .merge(mcp)
        .route(
            "/healthz",
            get(|| async { Json(json!({ "status": "ok" })) }),
        )
        .route("/tasks", post(tasks::create).get(tasks::list))
        .route("/tasks/update", post(tasks::update))
        .route("/tasks/get", post(tasks::get))
        .route("/tasks/claim", post(tasks::claim))
        .route("/tasks/search", post(tasks::search))
        .route("/org/dek", get(keys::org_dek).put(keys::put_org_dek))
        .route("/quota", get(org_admin::quota))
        .route("/feedback", post(org_admin::send_feedback))
        .route(
            "/tags",
            get(org_admin::list_tags).post(org_admin::create_tags),
        )
        .route("/tags/update", post(org_admin::update_tags))
        .route("/tags/delete", post(org_admin::delete_tags))
        .route("/members", get(org_admin::list_members))
        .route("/members/{email}", patch(org_admin::patch_member))
        .route("/me", get(org_admin::me).patch(org_admin::patch_me))
        .route(
            "/teams",
            get(org_admin::list_teams).post(org_admin::create_team),
        )
        .route(
            "/teams/{name}",
            get(org_admin::get_team)
                .patch(org_admin::patch_team)
                .delete(org_admin::delete_team),
        )
        .route("/teams/{name}/members", post(org_admin::add_team_member))
        .route(
            "/teams/{name}/members/{email}",
            delete(org_admin::remove_team_member),
        )
        .route("/keys", post(keys::create).get(keys::list))
        .route("/keys/{key_id}", delete(keys::revoke))
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
