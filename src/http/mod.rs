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
mod ui;

use std::sync::Arc;

use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use schemars::JsonSchema;
use serde::Serialize;
use taskq_actors::Engine;

use operation::Access;
pub use operation::{Arguments, MemberCall, Operation, Reply};
use taskq_actors::{parse_org_id, Caller};

use crate::keyfiles::KeySource;

pub use cluster::HttpPeers;
use cluster::OrgOf;
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

/// Every operation of the API, defined once: the router serves exactly
/// these (plus `/mcp`, the peer route and the test hooks), `/openapi.json`
/// describes exactly these, and the tools are those marked `tool`.
pub fn operations() -> Vec<Operation> {
    use taskq_actors::api::*;
    use Access::Operator;
    type S = AppState;
    type C = Caller;
    const TEAM: Option<&str> = Some(TEAMS);
    const WEBHOOK: Option<&str> = Some(WEBHOOKS);
    const SCHEDULE: Option<&str> = Some(SCHEDULES);

    let mut table = vec![
        // ---- service
        Operation::get("/healthz")
            .doc("health", "service", "Whether the server is up")
            .answer::<Health>(200, "The server accepts requests")
            .handler(health),
        Operation::get("/openapi.json")
            .doc("openapi", "service", "This document")
            .answer::<serde_json::Map<String, serde_json::Value>>(200, "The OpenAPI 3.1 document")
            .handler(openapi::serve),
        Operation::get("/metrics")
            .doc("metrics", "operator", "Prometheus metrics: requests by route and status, claim latency, actors, queue depth")
            .access(Operator)
            .text(200, "Prometheus text format")
            .handler(metrics::render),
        // ---- tasks
        Operation::post("/tasks")
            .doc("create_tasks", "tasks", "Create 1 to 25 tasks in one all-or-nothing call")
            .tool("Create 1 to 25 tasks in one all-or-nothing call; items may block each other with `ref:<name>` in blocked_by. Returns each task's id and status (pending, or blocked while a blocker is open).")
            .writes(None)
            .body()
            .answer::<CreateAnswer>(201, "Every task was created")
            .errors(&[409])
            .member(|s: S, c: C, (): (), r: CreateTasks| async move { s.engine.create_tasks(&c, r).await }),
        Operation::get("/tasks")
            .doc("list_tasks", "tasks", "List the org's tasks, open work first, a page at a time")
            .tool("List the org's tasks, open work first, filtered by status, tags, assignee, parent or priority. Returns a page of lean items (or whole tasks with full=true) and a next_cursor for the next page.")
            .read_only()
            .reads(None)
            .query()
            .answer::<ListAnswer>(200, "A page of tasks and the cursor of the next")
            .errors(&[500])
            .member(|s: S, c: C, (): (), r: ListTasks| async move { s.engine.list_tasks(&c, r).await }),
        Operation::post("/tasks/update")
            .doc("update_tasks", "tasks", "Change 1 to 25 tasks, each item attempted in order")
            .tool("Change 1 to 25 tasks: status (with a note for completed, failed or canceled), output, metadata, tags, assignee, priority, blockers. Send the claim's lease_id so a lost lease fails the item; each item reports applied or its own error.")
            .writes(None)
            .body()
            .answer::<UpdateAnswer>(200, "Every item applied")
            .answer::<UpdateAnswer>(207, "Some items failed (`partial: true`); each result says why")
            .errors(&[500])
            .member_with_status(
                |s: S, c: C, (): (), r: UpdateTasks| async move { s.engine.update_tasks(&c, r).await },
                |a| a.partial.then_some(StatusCode::MULTI_STATUS),
            ),
        Operation::post("/tasks/get")
            .doc("get_tasks", "tasks", "Fetch 1 to 25 tasks by id; one id also returns its history")
            .tool("Fetch 1 to 25 tasks by id with their content and blockers' statuses; asking for one id also returns its history of status changes.")
            .read_only()
            .reads(None)
            .body()
            .answer::<GetAnswer>(200, "The tasks found and the ids not found")
            .errors(&[500])
            .member(|s: S, c: C, (): (), r: GetTasks| async move { s.engine.get_tasks(&c, r).await }),
        Operation::post("/tasks/claim")
            .doc("claim_task", "tasks", "Take the next pending task (or up to `count` tasks) under a time-limited lease")
            .tool("Take the next pending task to work on (optionally only with given tags) under a time-limited lease. Returns the task with its lease_id and a briefing context, or null when nothing is waiting (after up to wait_seconds of waiting for one, when given). With count (1 to 25), claims up to that many tasks, each with its own lease, and returns {tasks: [...]}.")
            .writes(None)
            .body()
            .answer::<ClaimAnswer>(200, "The claimed task with its lease, or `null` when nothing is waiting; with `count`, `{tasks: [...]}`, each with its own lease")
            .errors(&[500])
            .member(|s: S, c: C, (): (), r: ClaimRequest| async move { s.engine.claim_answer(&c, r).await }),
        Operation::post("/tasks/search")
            .doc("search_tasks", "tasks", "Recall tasks by meaning from the org's history")
            .tool("Recall tasks by meaning from the org's history (1 to 25 results, best first). Answers {available: false, reason} when the org is client-encrypted (byok) or the server has no embedding model (not_configured).")
            .read_only()
            .reads(None)
            .body()
            .answer::<SearchAnswer>(200, "The best matches, or `{available: false, reason}`")
            .errors(&[500])
            .member(|s: S, c: C, (): (), r: SearchTasks| async move { s.engine.search_tasks(&c, r).await }),
        Operation::post("/tasks/plan")
            .doc("plan_tasks", "reports", "Turn a goal into a task graph grounded on the org's history (pro and enterprise)")
            .tool("Turn a goal into a task graph grounded on the org's history (similar tasks, cycle time, the tag that fails most, the best runbook); with create: true the drafted tasks are created. Pro and enterprise; each call counts against the monthly plan allowance.")
            .writes(Some(PLANNING))
            .body()
            .answer::<PlanAnswer>(200, "The plan, the tasks created if asked, or `{available: false, reason}`")
            .errors(&[429, 502])
            .member(|s: S, c: C, (): (), r: PlanRequest| async move { s.engine.plan_tasks(&c, r).await }),
        // ---- reports
        Operation::get("/insights")
            .doc("get_insights", "reports", "Flow insights: stuck and churning tasks, throughput, cycle times, failure rates, agents (paid plans)")
            .tool("Flow insights over the last 30 days: stuck and churning tasks, throughput, cycle times, failure rates by tag, per-agent figures, and failure clusters on pro and enterprise. Paid plans; {available: false, reason: not_computed_yet} before the first computation.")
            .read_only()
            .reads(Some(INSIGHTS))
            .query()
            .answer::<InsightsAnswer>(200, "The last computed insights, or `{available: false, reason}`")
            .errors(&[500])
            .member(|s: S, c: C, (): (), _: InsightsQuery| async move { s.engine.insights(&c).await }),
        Operation::get("/runbooks")
            .doc("list_runbooks", "reports", "Runbooks distilled from clusters of completed tasks (pro and enterprise)")
            .tool("Runbooks distilled from clusters of the org's completed tasks, newest first (pro and enterprise; {available: false, reason: byok} for client-encrypted orgs).")
            .read_only()
            .reads(Some(RUNBOOKS))
            .query()
            .answer::<RunbooksAnswer>(200, "The runbooks, newest first, or `{available: false, reason}`")
            .errors(&[500])
            .member(|s: S, c: C, (): (), _: RunbooksQuery| async move { s.engine.runbooks(&c).await }),
        Operation::get("/standup")
            .doc("get_standup", "reports", "A standup report of the org or a team, with its history (paid plans)")
            .tool("A standup report: scope `org` or `team:<name>`, cadence daily, weekly or monthly, period YYYY-MM-DD, YYYY-Www or YYYY-MM; the headline figures with their change since the previous report, a body, and up to 10 earlier reports. Paid plans.")
            .read_only()
            .reads(Some(STANDUP))
            .query()
            .answer::<StandupAnswer>(200, "The report, or `{available: false, reason}`")
            .errors(&[404, 500])
            .member(|s: S, c: C, (): (), r: StandupQuery| async move { s.engine.standup(&c, r).await }),
        // ---- the org's data key
        Operation::get("/org/dek")
            .doc("get_org_dek", "keys", "A BYOK org's wrapped data key")
            .tool("A client-encrypted (BYOK) org's data key, wrapped by the org's KMS, with its kms_key_id. Errors when the org's keys are managed by the server (clients must not encrypt) or none is enrolled yet.")
            .read_only()
            .reads(None)
            .answer::<OrgDekView>(200, "The wrapped data key")
            .errors(&[404, 409])
            .member(|s: S, c: C, (): (), _: NoArguments| async move { s.engine.org_dek(&c).await }),
        Operation::put("/org/dek")
            .doc("put_org_dek", "keys", "Enroll a BYOK org's wrapped data key, once")
            .tool("Enroll a BYOK org's data key once (owners only): wrapped_dek (base64, wrapped by the org's KMS) and kms_key_id (stored verbatim).")
            .writes(None)
            .body()
            .answer::<OrgDekCreated>(201, "The data key is enrolled")
            .errors(&[409])
            .member(|s: S, c: C, (): (), r: PutOrgDek| async move { s.engine.put_org_dek(&c, r).await }),
        // ---- org administration
        Operation::get("/quota")
            .doc("get_quota", "org", "This month's task quota")
            .tool("This month's task quota: limit, used, remaining and when it resets.")
            .read_only()
            .reads(None)
            .answer::<QuotaView>(200, "Limit, used, remaining and when it resets")
            .member(|s: S, c: C, (): (), _: NoArguments| async move { s.engine.quota(&c).await }),
        Operation::post("/feedback")
            .doc("send_feedback", "org", "Send product feedback to the service's operators")
            .tool("Send product feedback (bug, feature or general) to the service's operators. Returns the id of the task it became.")
            .writes(None)
            .body()
            .answer::<FeedbackFiled>(201, "The feedback was filed as a task")
            .member(|s: S, c: C, (): (), r: SendFeedback| async move { s.engine.send_feedback(&c, r).await }),
        Operation::get("/tags")
            .doc("list_tags", "tags", "The org's tag vocabulary")
            .tool("List the org's tag vocabulary: each tag's name, whether it is strict or a default, and its description.")
            .read_only()
            .reads(None)
            .answer::<Vec<TagView>>(200, "Every tag")
            .member(|s: S, c: C, (): (), _: NoArguments| async move { s.engine.list_tags(&c).await }),
        Operation::post("/tags")
            .doc("create_tags", "tags", "Add tags to the vocabulary")
            .tool("Add tags to the org's vocabulary (admins and owners). A strict tag needs a description.")
            .writes(None)
            .body()
            .answer::<TagsCreated>(201, "The tags were added")
            .errors(&[409])
            .member(|s: S, c: C, (): (), r: CreateTags| async move { s.engine.create_tags(&c, r).await }),
        Operation::post("/tags/update")
            .doc("update_tags", "tags", "Change tags of the vocabulary")
            .tool("Change tags of the vocabulary: strict, default or description (admins and owners).")
            .writes(None)
            .body()
            .answer::<TagsUpdated>(200, "The tags were changed")
            .errors(&[404, 409])
            .member(|s: S, c: C, (): (), r: UpdateTags| async move { s.engine.update_tags(&c, r).await }),
        Operation::post("/tags/delete")
            .doc("delete_tags", "tags", "Remove tags from the vocabulary")
            .tool("Remove tags from the org's vocabulary by name (admins and owners).")
            .writes(None)
            .body()
            .answer::<TagsDeleted>(200, "The tags were removed")
            .errors(&[404, 409])
            .member(|s: S, c: C, (): (), r: DeleteTags| async move { s.engine.delete_tags(&c, r).await }),
        Operation::get("/members")
            .doc("list_members", "members", "The org's members")
            .tool("List the org's members with their role, profile tags, team tags and seat.")
            .read_only()
            .reads(None)
            .answer::<Vec<MemberView>>(200, "Every member")
            .member(|s: S, c: C, (): (), _: NoArguments| async move { s.engine.list_members(&c).await }),
        Operation::patch("/members/{email}")
            .doc("update_member", "members", "Change a member's role, profile tags or seat")
            .tool("Change a member's role, profile tags or seat (admins and owners). Returns the member.")
            .writes(None)
            .body()
            .answer::<MemberView>(200, "The member")
            .errors(&[409])
            .member(|s: S, c: C, email: String, r: MemberPatch| async move { s.engine.patch_member(&c, &email, r).await }),
        Operation::get("/me")
            .doc("get_me", "members", "Who the key belongs to")
            .tool("Who the key belongs to: email, role and profile tags.")
            .read_only()
            .reads(None)
            .answer::<MeView>(200, "The caller's member")
            .member(|s: S, c: C, (): (), _: NoArguments| async move { s.engine.me(&c).await }),
        Operation::patch("/me")
            .doc("update_me", "members", "Set your own profile tags")
            .tool("Set your own profile tags (users cannot give themselves strict tags). Returns your member record.")
            .writes(None)
            .body()
            .answer::<MemberView>(200, "The caller's member")
            .member(|s: S, c: C, (): (), r: MePatch| async move { s.engine.patch_me(&c, r).await }),
        Operation::get("/teams")
            .doc("list_teams", "teams", "The org's teams")
            .tool("List the org's teams and the tags they give their members (paid plans).")
            .read_only()
            .reads(TEAM)
            .answer::<Vec<TeamView>>(200, "Every team")
            .member(|s: S, c: C, (): (), _: NoArguments| async move { s.engine.list_teams(&c).await }),
        Operation::post("/teams")
            .doc("create_team", "teams", "Create a team whose tags its members inherit")
            .tool("Create a team whose tags its members inherit (admins and owners, paid plans).")
            .writes(TEAM)
            .body()
            .answer::<TeamView>(201, "The team")
            .errors(&[409])
            .member(|s: S, c: C, (): (), r: NewTeam| async move { s.engine.create_team(&c, r).await }),
        Operation::get("/teams/{name}")
            .doc("get_team", "teams", "One team with its members")
            .tool("Fetch one team with its members and where each membership comes from (paid plans).")
            .read_only()
            .reads(TEAM)
            .answer::<TeamDetail>(200, "The team")
            .member(|s: S, c: C, name: String, _: NoArguments| async move { s.engine.get_team(&c, &name).await }),
        Operation::patch("/teams/{name}")
            .doc("update_team", "teams", "Change a team's tags, description or idp_only flag")
            .tool("Change a team's tags, description or idp_only flag (admins and owners, paid plans).")
            .writes(TEAM)
            .body()
            .answer::<TeamView>(200, "The team")
            .errors(&[409])
            .member(|s: S, c: C, name: String, r: TeamPatch| async move { s.engine.patch_team(&c, &name, r).await }),
        Operation::delete("/teams/{name}")
            .doc("delete_team", "teams", "Delete a team and its memberships")
            .tool("Delete a team and its memberships (admins and owners, paid plans).")
            .writes(TEAM)
            .empty(204, "The team is gone")
            .member(|s: S, c: C, name: String, _: NoArguments| async move { s.engine.delete_team(&c, &name).await }),
        Operation::post("/teams/{name}/members")
            .doc("add_team_member", "teams", "Add a member to a team by hand")
            .tool("Add a member to a team by hand (admins and owners, paid plans). Returns the membership.")
            .writes(TEAM)
            .body()
            .answer::<TeamMemberView>(201, "The membership")
            .errors(&[409])
            .member(|s: S, c: C, name: String, r: AddTeamMember| async move { s.engine.add_team_member(&c, &name, r).await }),
        Operation::delete("/teams/{name}/members/{email}")
            .doc("remove_team_member", "teams", "Remove a member's manual membership of a team")
            .tool("Remove a member's manual membership of a team (admins and owners, paid plans).")
            .writes(TEAM)
            .empty(204, "The membership is gone")
            .errors(&[409])
            .member(|s: S, c: C, (name, email): (String, String), _: NoArguments| async move {
                s.engine.remove_team_member(&c, &name, &email).await
            }),
        // ---- outbound webhooks
        Operation::get("/webhooks")
            .doc("list_webhooks", "webhooks", "The org's webhook endpoints (paid plans)")
            .tool("List the org's webhook endpoints: url, subscribed events, whether each is still active (admins and owners, paid plans). Secrets are never shown again.")
            .read_only()
            .reads(WEBHOOK)
            .answer::<WebhookList>(200, "Every endpoint, without secrets")
            .member(|s: S, c: C, (): (), _: NoArguments| async move { s.engine.list_webhooks(&c).await }),
        Operation::post("/webhooks")
            .doc("create_webhook", "webhooks", "Add a webhook endpoint; its signing secret is shown once")
            .tool("Add an endpoint that receives signed task events (task.created, task.claimed, task.completed, task.failed, task.canceled, task.lease_expired, task.unblocked, task.status_changed, or *). Admins and owners, paid plans. Returns the endpoint and its whsec_ secret, shown only this once.")
            .writes(WEBHOOK)
            .body()
            .answer::<WebhookCreated>(201, "The endpoint and its secret")
            .member(|s: S, c: C, (): (), r: CreateWebhook| async move { s.engine.create_webhook(&c, r).await }),
        Operation::delete("/webhooks/{webhook_id}")
            .doc("delete_webhook", "webhooks", "Remove a webhook endpoint and its pending events")
            .tool("Remove a webhook endpoint; its pending events are dropped (admins and owners, paid plans).")
            .writes(WEBHOOK)
            .empty(204, "The endpoint is gone")
            .member(|s: S, c: C, id: String, _: NoArguments| async move { s.engine.delete_webhook(&c, &id).await }),
        Operation::post("/webhooks/{webhook_id}/rotate-secret")
            .doc("rotate_webhook_secret", "webhooks", "A new signing secret; the old one keeps signing for 24 hours")
            .tool("Give a webhook endpoint a new signing secret (returned once); for 24 hours deliveries carry signatures by both the old and the new secret (admins and owners, paid plans).")
            .writes(WEBHOOK)
            .answer::<WebhookSecret>(200, "The new secret")
            .member(|s: S, c: C, id: String, _: NoArguments| async move { s.engine.rotate_webhook_secret(&c, &id).await }),
        Operation::get("/webhooks/{webhook_id}/deliveries")
            .doc("list_webhook_deliveries", "webhooks", "An endpoint's recent delivery attempts, newest first")
            .tool("An endpoint's recent delivery attempts, newest first: event id and type, attempt number, the receiver's status or the error, and when the next attempt is due (admins and owners, paid plans).")
            .read_only()
            .reads(WEBHOOK)
            .answer::<DeliveryList>(200, "The attempts, newest first")
            .member(|s: S, c: C, id: String, _: NoArguments| async move { s.engine.webhook_deliveries(&c, &id).await }),
        Operation::post("/webhooks/{webhook_id}/test")
            .doc("test_webhook", "webhooks", "Send a webhook.test event to an endpoint")
            .tool("Queue a signed webhook.test event for an endpoint, delivered like any other; see list_webhook_deliveries for the outcome (admins and owners, paid plans).")
            .writes(WEBHOOK)
            .answer::<WebhookTestQueued>(202, "The event is queued for delivery")
            .errors(&[409])
            .member(|s: S, c: C, id: String, _: NoArguments| async move { s.engine.test_webhook(&c, &id).await }),
        // ---- schedules
        Operation::get("/schedules")
            .doc("list_schedules", "schedules", "The org's schedules (paid plans)")
            .tool("List the org's schedules: name, cron pattern and time zone, the task each tick creates, whether active, the next and last run and the last error (admins and owners, paid plans).")
            .read_only()
            .reads(SCHEDULE)
            .answer::<ScheduleList>(200, "Every schedule")
            .member(|s: S, c: C, (): (), _: NoArguments| async move { s.engine.list_schedules(&c).await }),
        Operation::post("/schedules")
            .doc("create_schedule", "schedules", "Create a recurring task on a cron schedule")
            .tool("Create a schedule: at each tick of a five-field cron pattern (minute hour day-of-month month day-of-week) in an IANA time zone (default UTC), one task is created from `task` (a create_tasks item without task_id, ref or blocked_by). Ticks missed while the server was down make one task. Admins and owners, paid plans.")
            .writes(SCHEDULE)
            .body()
            .answer::<ScheduleView>(201, "The schedule and its next run")
            .errors(&[409])
            .member(|s: S, c: C, (): (), r: CreateSchedule| async move { s.engine.create_schedule(&c, r).await }),
        Operation::get("/schedules/{schedule_id}")
            .doc("get_schedule", "schedules", "One schedule")
            .tool("One schedule by id, with its next and last run and the last error (admins and owners, paid plans).")
            .read_only()
            .reads(SCHEDULE)
            .answer::<ScheduleView>(200, "The schedule")
            .member(|s: S, c: C, id: String, _: NoArguments| async move { s.engine.get_schedule(&c, &id).await }),
        Operation::patch("/schedules/{schedule_id}")
            .doc("update_schedule", "schedules", "Change a schedule's pattern, zone, task or whether it is active")
            .tool("Change any of a schedule's cron, timezone, task and active; a schedule resumed goes on from now, without the ticks it missed while paused (admins and owners, paid plans).")
            .writes(SCHEDULE)
            .body()
            .answer::<ScheduleView>(200, "The schedule as it now is")
            .member(|s: S, c: C, id: String, r: PatchSchedule| async move { s.engine.update_schedule(&c, &id, r).await }),
        Operation::delete("/schedules/{schedule_id}")
            .doc("delete_schedule", "schedules", "Remove a schedule (the tasks it made stay)")
            .tool("Remove a schedule; the tasks it already created stay (admins and owners, paid plans).")
            .writes(SCHEDULE)
            .empty(204, "The schedule is gone")
            .member(|s: S, c: C, id: String, _: NoArguments| async move { s.engine.delete_schedule(&c, &id).await }),
        // ---- a member's keys
        Operation::post("/keys")
            .doc("create_key", "keys", "Create a key for the caller's member; the secret is shown once")
            .writes(None)
            .body()
            .answer::<KeyCreated>(201, "The key and its secret")
            .errors(&[409])
            .member(|s: S, c: C, (): (), r: CreateKey| async move { s.engine.create_key(&c, r).await }),
        Operation::get("/keys")
            .doc("list_keys", "keys", "The caller's member's keys")
            .reads(None)
            .answer::<KeyList>(200, "Every key, active or not")
            .member(|s: S, c: C, (): (), _: NoArguments| async move { s.engine.list_keys(&c).await }),
        Operation::delete("/keys/{key_id}")
            .doc("revoke_key", "keys", "Revoke a key; it stops working at once")
            .writes(None)
            .empty(204, "The key is revoked")
            .member(|s: S, c: C, key_id: String, _: NoArguments| async move { s.engine.revoke_key(&c, &key_id).await }),
        // ---- operator
        Operation::post("/admin/orgs")
            .doc("create_org", "operator", "Create an org with its owner and the owner's first key")
            .access(Operator)
            .body()
            .answer::<CreatedOrg>(201, "The org and its owner's key")
            .errors(&[403, 409])
            .operator(|s: S, (): (), r: CreateOrg| async move { s.engine.create_org(r).await }),
        Operation::get("/admin/orgs/{org_id}")
            .doc("get_org", "operator", "An org with its effective limits")
            .access(Operator)
            .answer::<OrgView>(200, "The org")
            .operator(|s: S, org: String, _: NoArguments| async move { s.engine.get_org(parse_org_id(&org)?).await }),
        Operation::patch("/admin/orgs/{org_id}")
            .doc("patch_org", "operator", "Change an org's tier, seats, suspension or limits")
            .access(Operator)
            .body()
            .answer::<OrgView>(200, "The org")
            .errors(&[409])
            .operator(|s: S, org: String, r: PatchOrg| async move { s.engine.patch_org(parse_org_id(&org)?, r).await }),
        Operation::post("/admin/orgs/{org_id}/members")
            .doc("add_member", "operator", "Add an active member and issue its first key")
            .access(Operator)
            .body()
            .answer::<AddedMember>(201, "The member and its key")
            .errors(&[403, 409, 429])
            .operator(|s: S, org: String, r: AddMember| async move { s.engine.add_member(parse_org_id(&org)?, r).await }),
        Operation::post("/admin/orgs/{org_id}/members/{email}/keys")
            .doc("reset_key", "operator", "Issue a member a new key (the key reset)")
            .access(Operator)
            .body()
            .answer::<IssuedKey>(201, "The new key")
            .errors(&[403, 409])
            .operator(|s: S, (org, email): (String, String), r: ResetKey| async move {
                s.engine.reset_key(parse_org_id(&org)?, &email, r).await
            }),
        Operation::post("/admin/members/unblock")
            .doc("unblock_member", "operator", "Lift a member's strike block")
            .access(Operator)
            .body()
            .answer::<Unblocked>(200, "The block is lifted")
            .operator(|s: S, (): (), r: UnblockMember| async move { s.engine.unblock_member(r).await }),
        Operation::get("/admin/feedback")
            .doc("feedback_org", "operator", "The org that receives feedback")
            .access(Operator)
            .answer::<FeedbackOrg>(200, "The feedback org's id")
            .operator(|s: S, (): (), _: NoArguments| async move { Ok::<_, ApiError>(s.engine.feedback_org()) }),
        Operation::post("/admin/orgs/{org_id}/idp")
            .doc("set_idp", "operator", "Turn the identity-provider enrollment on or off")
            .access(Operator)
            .body()
            .answer::<IdpEnrollment>(200, "The enrollment")
            .operator(|s: S, org: String, r: IdpEnrollment| async move { s.engine.set_idp_enrollment(parse_org_id(&org)?, r).await }),
        Operation::post("/admin/orgs/{org_id}/idp/sync")
            .doc("idp_sync", "operator", "The identity provider's view of team membership")
            .access(Operator)
            .body()
            .answer::<IdpSyncAnswer>(200, "Memberships added and removed")
            .errors(&[403, 409])
            .operator(|s: S, org: String, r: IdpSync| async move { s.engine.idp_sync(parse_org_id(&org)?, r).await }),
        Operation::post("/admin/orgs/{org_id}/recompute")
            .doc("recompute_reports", "operator", "Compute an org's reports now instead of waiting for the schedule")
            .access(Operator)
            .body()
            .answer::<Recomputed>(200, "The reports computed (those that apply to the org's plan and encryption)")
            .errors(&[503])
            .operator(|s: S, org: String, r: Recompute| async move { s.engine.recompute(parse_org_id(&org)?, r).await }),
        Operation::post("/admin/master-key/rotate")
            .doc("rotate_master_key", "operator", "Make a new master key current and re-wrap every data key")
            .access(Operator)
            .body()
            .answer::<MasterKeyRotated>(200, "Every data key is wrapped by the new key")
            .errors(&[409])
            .operator(|s: S, (): (), r: RotateMasterKey| async move { admin::rotate_master_key(s, r).await }),
        Operation::get("/admin/cluster")
            .doc("cluster", "operator", "The nodes of the cluster and the orgs each owns now")
            .access(Operator)
            .answer::<ClusterView>(200, "The nodes seen in the last minute")
            .operator(|s: S, (): (), _: NoArguments| async move { s.engine.cluster_view().await }),
        Operation::get("/admin/stats")
            .doc("operator_stats", "operator", "What the operator page shows: orgs' open tasks and leases, actors, group commits, limit refusals")
            .access(Access::OperatorOrSession)
            .answer::<OperatorStats>(200, "The figures, from memory")
            .handler(ui::stats),
        // ---- the operator page (HTML)
        Operation::get("/admin/ui")
            .doc("operator_page", "operator", "The operator page; without a session, its sign-in form")
            .html(200, "The page, for a signed-in operator")
            .html(401, "The sign-in form")
            .errors(&[404])
            .handler(ui::page),
        Operation::post("/admin/ui/login")
            .doc("operator_login", "operator", "Sign in to the operator page with the operator token")
            .form::<ui::LoginForm>()
            .empty(303, "Signed in: the session cookie is set and the page follows")
            .html(401, "A wrong token: the form again, no cookie")
            .html(429, "Too many wrong operator tokens from this address: the form again, no cookie, and `Retry-After`")
            .errors(&[404])
            .handler(ui::login),
        Operation::post("/admin/ui/logout")
            .doc("operator_logout", "operator", "End the operator page's session")
            .empty(303, "Signed out: the cookie is cleared and the form follows")
            .errors(&[404])
            .handler(ui::logout),
    ];
    // ---- the board (HTML)
    table.extend(board::operations());
    table
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
            .route("/admin/test/store", post(admin::store_outage))
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
        .layer(metrics::Track::new(state.clone()))
        .with_state(state)
}
