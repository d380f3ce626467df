//! The HTTP front end: routes, extractors, and the error mapping.
//!
//! Handlers authenticate, parse, make one engine call and convert its answer;
//! no business rule lives here and nothing here touches the store.

mod admin;
mod cluster;
mod error;
mod extract;
mod keys;
mod lockout;
mod metrics;
mod openapi;
mod org_admin;
mod reports;
mod tasks;
mod ui;

use std::sync::Arc;

use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use schemars::JsonSchema;
use serde::Serialize;
use taskq_actors::Engine;

use openapi::{Access, Route};

use crate::keyfiles::KeySource;

pub use cluster::HttpPeers;
pub use error::ApiError;
pub use lockout::{OperatorAttempts, TrustedProxies, DEFAULT_WRONG_TOKENS};
pub(crate) use openapi::drop_null_defaults;

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
    /// The engine's clock, movable by the test hook.
    #[cfg(feature = "test-hooks")]
    pub test_clock: Option<Arc<taskq_actors::clock::OffsetClock>>,
}

impl Shared {
    pub fn new(engine: Engine, admin_token: Option<Arc<str>>, keys: KeySource) -> Self {
        Self {
            engine,
            admin_token,
            metrics: metrics::Metrics::default(),
            keys,
            operator_attempts: lockout::OperatorAttempts::new(lockout::DEFAULT_WRONG_TOKENS),
            secure_cookies: false,
            peers: reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(1))
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default(),
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

/// Every route of the API, documented: the router serves exactly these
/// (plus `/mcp` and the test hooks), and `/openapi.json` describes exactly
/// these.
pub fn routes() -> Vec<Route> {
    use taskq_actors::api::*;
    use Access::{Operator, Public};

    vec![
        // ---- service
        Route::get("/healthz", health)
            .doc("health", "service", "Whether the server is up")
            .access(Public)
            .answer::<Health>(200, "The server accepts requests"),
        Route::get("/openapi.json", openapi::serve)
            .doc("openapi", "service", "This document")
            .access(Public)
            .answer::<serde_json::Map<String, serde_json::Value>>(200, "The OpenAPI 3.1 document"),
        Route::get("/metrics", metrics::render)
            .doc("metrics", "operator", "Prometheus metrics: requests by route and status, claim latency, actors, queue depth")
            .access(Operator)
            .text(200, "Prometheus text format"),
        // ---- tasks
        Route::post("/tasks", tasks::create)
            .doc("create_tasks", "tasks", "Create 1 to 25 tasks in one all-or-nothing call")
            .body::<CreateTasks>()
            .answer::<CreateAnswer>(201, "Every task was created")
            .errors(&[409]),
        Route::get("/tasks", tasks::list)
            .doc("list_tasks", "tasks", "List the org's tasks, open work first, a page at a time")
            .query::<ListTasks>()
            .answer::<ListAnswer>(200, "A page of tasks and the cursor of the next")
            .errors(&[500]),
        Route::post("/tasks/update", tasks::update)
            .doc("update_tasks", "tasks", "Change 1 to 25 tasks, each item attempted in order")
            .body::<UpdateTasks>()
            .answer::<UpdateAnswer>(200, "Every item applied")
            .answer::<UpdateAnswer>(207, "Some items failed (`partial: true`); each result says why")
            .errors(&[500]),
        Route::post("/tasks/get", tasks::get)
            .doc("get_tasks", "tasks", "Fetch 1 to 25 tasks by id; one id also returns its history")
            .body::<GetTasks>()
            .answer::<GetAnswer>(200, "The tasks found and the ids not found")
            .errors(&[500]),
        Route::post("/tasks/claim", tasks::claim)
            .doc("claim_task", "tasks", "Take the next pending task (or up to `count` tasks) under a time-limited lease")
            .optional_body::<ClaimRequest>()
            .answer::<ClaimAnswer>(200, "The claimed task with its lease, or `null` when nothing is waiting; with `count`, `{tasks: [...]}`, each with its own lease")
            .errors(&[500]),
        Route::post("/tasks/search", tasks::search)
            .doc("search_tasks", "tasks", "Recall tasks by meaning from the org's history")
            .body::<SearchTasks>()
            .answer::<SearchAnswer>(200, "The best matches, or `{available: false, reason}`")
            .errors(&[500]),
        Route::post("/tasks/plan", reports::plan)
            .doc("plan_tasks", "reports", "Turn a goal into a task graph grounded on the org's history (pro and enterprise)")
            .body::<PlanRequest>()
            .answer::<PlanAnswer>(200, "The plan, the tasks created if asked, or `{available: false, reason}`")
            .errors(&[429, 502]),
        // ---- reports
        Route::get("/insights", reports::insights)
            .doc("get_insights", "reports", "Flow insights: stuck and churning tasks, throughput, cycle times, failure rates, agents (paid plans)")
            .query::<InsightsQuery>()
            .answer::<InsightsAnswer>(200, "The last computed insights, or `{available: false, reason}`")
            .errors(&[500]),
        Route::get("/runbooks", reports::runbooks)
            .doc("list_runbooks", "reports", "Runbooks distilled from clusters of completed tasks (pro and enterprise)")
            .query::<RunbooksQuery>()
            .answer::<RunbooksAnswer>(200, "The runbooks, newest first, or `{available: false, reason}`")
            .errors(&[500]),
        Route::get("/standup", reports::standup)
            .doc("get_standup", "reports", "A standup report of the org or a team, with its history (paid plans)")
            .query::<StandupQuery>()
            .answer::<StandupAnswer>(200, "The report, or `{available: false, reason}`")
            .errors(&[404, 500]),
        // ---- the org's data key
        Route::get("/org/dek", keys::org_dek)
            .doc("get_org_dek", "keys", "A BYOK org's wrapped data key")
            .answer::<OrgDekView>(200, "The wrapped data key")
            .errors(&[404, 409]),
        Route::put("/org/dek", keys::put_org_dek)
            .doc("put_org_dek", "keys", "Enroll a BYOK org's wrapped data key, once")
            .body::<PutOrgDek>()
            .answer::<OrgDekCreated>(201, "The data key is enrolled")
            .errors(&[409]),
        // ---- org administration
        Route::get("/quota", org_admin::quota)
            .doc("get_quota", "org", "This month's task quota")
            .answer::<QuotaView>(200, "Limit, used, remaining and when it resets"),
        Route::post("/feedback", org_admin::send_feedback)
            .doc("send_feedback", "org", "Send product feedback to the service's operators")
            .body::<SendFeedback>()
            .answer::<FeedbackFiled>(201, "The feedback was filed as a task"),
        Route::get("/tags", org_admin::list_tags)
            .doc("list_tags", "tags", "The org's tag vocabulary")
            .answer::<Vec<TagView>>(200, "Every tag"),
        Route::post("/tags", org_admin::create_tags)
            .doc("create_tags", "tags", "Add tags to the vocabulary")
            .body::<CreateTags>()
            .answer::<TagsCreated>(201, "The tags were added")
            .errors(&[409]),
        Route::post("/tags/update", org_admin::update_tags)
            .doc("update_tags", "tags", "Change tags of the vocabulary")
            .body::<UpdateTags>()
            .answer::<TagsUpdated>(200, "The tags were changed")
            .errors(&[404, 409]),
        Route::post("/tags/delete", org_admin::delete_tags)
            .doc("delete_tags", "tags", "Remove tags from the vocabulary")
            .body::<DeleteTags>()
            .answer::<TagsDeleted>(200, "The tags were removed")
            .errors(&[404, 409]),
        Route::get("/members", org_admin::list_members)
            .doc("list_members", "members", "The org's members")
            .answer::<Vec<MemberView>>(200, "Every member"),
        Route::patch("/members/{email}", org_admin::patch_member)
            .doc("update_member", "members", "Change a member's role, profile tags or seat")
            .body::<MemberPatch>()
            .answer::<MemberView>(200, "The member")
            .errors(&[409]),
        Route::get("/me", org_admin::me)
            .doc("get_me", "members", "Who the key belongs to")
            .answer::<MeView>(200, "The caller's member"),
        Route::patch("/me", org_admin::patch_me)
            .doc("update_me", "members", "Set your own profile tags")
            .body::<MePatch>()
            .answer::<MemberView>(200, "The caller's member"),
        Route::get("/teams", org_admin::list_teams)
            .doc("list_teams", "teams", "The org's teams")
            .answer::<Vec<TeamView>>(200, "Every team"),
        Route::post("/teams", org_admin::create_team)
            .doc("create_team", "teams", "Create a team whose tags its members inherit")
            .body::<NewTeam>()
            .answer::<TeamView>(201, "The team")
            .errors(&[409]),
        Route::get("/teams/{name}", org_admin::get_team)
            .doc("get_team", "teams", "One team with its members")
            .answer::<TeamDetail>(200, "The team"),
        Route::patch("/teams/{name}", org_admin::patch_team)
            .doc("update_team", "teams", "Change a team's tags, description or idp_only flag")
            .body::<TeamPatch>()
            .answer::<TeamView>(200, "The team")
            .errors(&[409]),
        Route::delete("/teams/{name}", org_admin::delete_team)
            .doc("delete_team", "teams", "Delete a team and its memberships")
            .empty(204, "The team is gone"),
        Route::post("/teams/{name}/members", org_admin::add_team_member)
            .doc("add_team_member", "teams", "Add a member to a team by hand")
            .body::<AddTeamMember>()
            .answer::<TeamMemberView>(201, "The membership")
            .errors(&[409]),
        Route::delete("/teams/{name}/members/{email}", org_admin::remove_team_member)
            .doc("remove_team_member", "teams", "Remove a member's manual membership of a team")
            .empty(204, "The membership is gone")
            .errors(&[409]),
        // ---- a member's keys
        Route::post("/keys", keys::create)
            .doc("create_key", "keys", "Create a key for the caller's member; the secret is shown once")
            .body::<CreateKey>()
            .answer::<KeyCreated>(201, "The key and its secret")
            .errors(&[409]),
        Route::get("/keys", keys::list)
            .doc("list_keys", "keys", "The caller's member's keys")
            .answer::<KeyList>(200, "Every key, active or not"),
        Route::delete("/keys/{key_id}", keys::revoke)
            .doc("revoke_key", "keys", "Revoke a key; it stops working at once")
            .empty(204, "The key is revoked"),
        // ---- operator
        Route::post("/admin/orgs", admin::create_org)
            .doc("create_org", "operator", "Create an org with its owner and the owner's first key")
            .access(Operator)
            .body::<CreateOrg>()
            .answer::<CreatedOrg>(201, "The org and its owner's key")
            .errors(&[403, 409]),
        Route::get("/admin/orgs/{org_id}", admin::get_org)
            .doc("get_org", "operator", "An org with its effective limits")
            .access(Operator)
            .answer::<OrgView>(200, "The org"),
        Route::patch("/admin/orgs/{org_id}", admin::patch_org)
            .doc("patch_org", "operator", "Change an org's tier, seats, suspension or limits")
            .access(Operator)
            .body::<PatchOrg>()
            .answer::<OrgView>(200, "The org")
            .errors(&[409]),
        Route::post("/admin/orgs/{org_id}/members", admin::add_member)
            .doc("add_member", "operator", "Add an active member and issue its first key")
            .access(Operator)
            .body::<AddMember>()
            .answer::<AddedMember>(201, "The member and its key")
            .errors(&[403, 409, 429]),
        Route::post("/admin/orgs/{org_id}/members/{email}/keys", admin::reset_key)
            .doc("reset_key", "operator", "Issue a member a new key (the key reset)")
            .access(Operator)
            .optional_body::<ResetKey>()
            .answer::<IssuedKey>(201, "The new key")
            .errors(&[403, 409]),
        Route::post("/admin/members/unblock", admin::unblock_member)
            .doc("unblock_member", "operator", "Lift a member's strike block")
            .access(Operator)
            .body::<UnblockMember>()
            .answer::<Unblocked>(200, "The block is lifted"),
        Route::get("/admin/feedback", admin::feedback_org)
            .doc("feedback_org", "operator", "The org that receives feedback")
            .access(Operator)
            .answer::<FeedbackOrg>(200, "The feedback org's id"),
        Route::post("/admin/orgs/{org_id}/idp", admin::set_idp)
            .doc("set_idp", "operator", "Turn the identity-provider enrollment on or off")
            .access(Operator)
            .body::<IdpEnrollment>()
            .answer::<IdpEnrollment>(200, "The enrollment"),
        Route::post("/admin/orgs/{org_id}/idp/sync", admin::idp_sync)
            .doc("idp_sync", "operator", "The identity provider's view of team membership")
            .access(Operator)
            .body::<IdpSync>()
            .answer::<IdpSyncAnswer>(200, "Memberships added and removed")
            .errors(&[403, 409]),
        Route::post("/admin/orgs/{org_id}/recompute", reports::recompute)
            .doc("recompute_reports", "operator", "Compute an org's reports now instead of waiting for the schedule")
            .access(Operator)
            .optional_body::<Recompute>()
            .answer::<Recomputed>(200, "The reports computed (those that apply to the org's plan and encryption)")
            .errors(&[503]),
        Route::post("/admin/master-key/rotate", admin::rotate_master_key)
            .doc("rotate_master_key", "operator", "Make a new master key current and re-wrap every data key")
            .access(Operator)
            .body::<RotateMasterKey>()
            .answer::<MasterKeyRotated>(200, "Every data key is wrapped by the new key")
            .errors(&[409]),
        Route::get("/admin/cluster", cluster::view)
            .doc("cluster", "operator", "The nodes of the cluster and the orgs each owns now")
            .access(Operator)
            .answer::<ClusterView>(200, "The nodes seen in the last minute"),
        Route::get("/admin/stats", ui::stats)
            .doc("operator_stats", "operator", "What the operator page shows: orgs' open tasks and leases, actors, group commits, limit refusals")
            .access(Access::OperatorOrSession)
            .answer::<OperatorStats>(200, "The figures, from memory"),
        // ---- the operator page (HTML)
        Route::get("/admin/ui", ui::page)
            .doc("operator_page", "operator", "The operator page; without a session, its sign-in form")
            .access(Public)
            .html(200, "The page, for a signed-in operator")
            .html(401, "The sign-in form")
            .errors(&[404]),
        Route::post("/admin/ui/login", ui::login)
            .doc("operator_login", "operator", "Sign in to the operator page with the operator token")
            .access(Public)
            .form::<ui::LoginForm>()
            .empty(303, "Signed in: the session cookie is set and the page follows")
            .html(401, "A wrong token: the form again, no cookie")
            .html(429, "Too many wrong operator tokens from this address: the form again, no cookie, and `Retry-After`")
            .errors(&[404]),
        Route::post("/admin/ui/logout", ui::logout)
            .doc("operator_logout", "operator", "End the operator page's session")
            .access(Public)
            .empty(303, "Signed out: the cookie is cleared and the form follows")
            .errors(&[404]),
    ]
}

pub fn router(state: AppState) -> Router {
    let api = routes()
        .into_iter()
        .fold(Router::new(), |router, route| route.register(router));
    #[cfg(feature = "test-hooks")]
    let api = api
        .route("/admin/orgs/{org_id}/crash", post(admin::crash))
        .route("/admin/test/clock", post(admin::advance_clock))
        .route("/admin/test/store", post(admin::store_outage));

    // What the nodes of a cluster ask of each other: not part of the API.
    let api = api.route("/internal/peer", post(cluster::peer));

    // MCP's transport is a service of its own, behind the same key check.
    let mcp = Router::new()
        .route_service("/mcp", crate::mcp::service(state.engine.clone()))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            extract::mcp_gate,
        ));

    Router::new()
        .merge(mcp)
        .merge(api)
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not found") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
        })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            cluster::route,
        ))
        .layer(metrics::Track::new(state.clone()))
        .with_state(state)
}
