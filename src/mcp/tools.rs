//! The tools: one per operation, named as CONTRACT.md §4 says, each with
//! the JSON Schema of its arguments taken from the engine's own request
//! types (plus the route's path parameters), and a call that decodes the
//! arguments with the engine's decoders and makes the same `Engine` call as
//! the HTTP route.

use std::sync::{Arc, LazyLock};

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use taskq_actors::api::{
    AddTeamMember, ClaimRequest, CreateTags, CreateTasks, DeleteTags, GetTasks, InsightsQuery,
    ListTasks, MePatch, MemberPatch, MemberRequest, NewTeam, PlanRequest, PutOrgDek, RequestKind,
    RunbooksQuery, SearchTasks, SendFeedback, StandupQuery, TeamPatch, UpdateTags, UpdateTasks,
    TEAMS,
};
use taskq_actors::{Caller, Engine, EngineError, ValidationError};

/// A tool's arguments when it takes none.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // only its schema is used
struct NoArguments {}

/// Arguments naming a team, as the route's path does.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // only its schema is used
struct TeamName {
    /// The team's name.
    name: String,
}

/// A team's name and the route's body.
#[derive(JsonSchema)]
#[allow(dead_code)] // only its schema is used
struct TeamAnd<T: JsonSchema> {
    /// The team's name.
    name: String,
    #[serde(flatten)]
    body: T,
}

/// A member's email and the route's body.
#[derive(JsonSchema)]
#[allow(dead_code)] // only its schema is used
struct MemberAnd<T: JsonSchema> {
    /// The member's email.
    email: String,
    #[serde(flatten)]
    body: T,
}

/// A team's name and a member's email.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // only its schema is used
struct TeamMember {
    /// The team's name.
    name: String,
    /// The member's email.
    email: String,
}

fn schema<T: JsonSchema>() -> Arc<JsonObject> {
    let mut schema = serde_json::to_value(schemars::schema_for!(T));
    if let Ok(schema) = &mut schema {
        crate::http::drop_null_defaults(schema);
    }
    match schema {
        Ok(Value::Object(mut schema)) => {
            // Clients read the properties; the generator's bookkeeping stays out.
            schema.remove("$schema");
            schema.remove("title");
            Arc::new(schema)
        }
        _ => unreachable!("a struct's schema is an object"),
    }
}

/// The advertised tools, built once.
pub static TOOLS: LazyLock<Vec<Tool>> = LazyLock::new(|| {
    let read = || ToolAnnotations::new().read_only(true);
    let tool = |name: &'static str, description: &'static str, input: Arc<JsonObject>| {
        Tool::new(name, description, input)
    };
    vec![
        tool(
            "create_tasks",
            "Create 1 to 25 tasks in one all-or-nothing call; items may block each other with `ref:<name>` in blocked_by. Returns each task's id and status (pending, or blocked while a blocker is open).",
            schema::<CreateTasks>(),
        ),
        tool(
            "update_tasks",
            "Change 1 to 25 tasks: status (with a note for completed, failed or canceled), output, metadata, tags, assignee, priority, blockers. Send the claim's lease_id so a lost lease fails the item; each item reports applied or its own error.",
            schema::<UpdateTasks>(),
        ),
        tool(
            "get_tasks",
            "Fetch 1 to 25 tasks by id with their content and blockers' statuses; asking for one id also returns its history of status changes.",
            schema::<GetTasks>(),
        )
        .with_annotations(read()),
        tool(
            "list_tasks",
            "List the org's tasks, open work first, filtered by status, tags, assignee, parent or priority. Returns a page of lean items (or whole tasks with full=true) and a next_cursor for the next page.",
            schema::<ListTasks>(),
        )
        .with_annotations(read()),
        tool(
            "claim_task",
            "Take the next pending task to work on (optionally only with given tags) under a time-limited lease. Returns the task with its lease_id and a briefing context, or null when nothing is waiting (after up to wait_seconds of waiting for one, when given). With count (1 to 25), claims up to that many tasks, each with its own lease, and returns {tasks: [...]}.",
            schema::<ClaimRequest>(),
        ),
        tool(
            "list_tags",
            "List the org's tag vocabulary: each tag's name, whether it is strict or a default, and its description.",
            schema::<NoArguments>(),
        )
        .with_annotations(read()),
        tool(
            "create_tags",
            "Add tags to the org's vocabulary (admins and owners). A strict tag needs a description.",
            schema::<CreateTags>(),
        ),
        tool(
            "update_tags",
            "Change tags of the vocabulary: strict, default or description (admins and owners).",
            schema::<UpdateTags>(),
        ),
        tool(
            "delete_tags",
            "Remove tags from the org's vocabulary by name (admins and owners).",
            schema::<DeleteTags>(),
        ),
        tool(
            "list_members",
            "List the org's members with their role, profile tags, team tags and seat.",
            schema::<NoArguments>(),
        )
        .with_annotations(read()),
        tool(
            "update_member",
            "Change a member's role, profile tags or seat (admins and owners). Returns the member.",
            schema::<MemberAnd<MemberPatch>>(),
        ),
        tool(
            "get_me",
            "Who the key belongs to: email, role and profile tags.",
            schema::<NoArguments>(),
        )
        .with_annotations(read()),
        tool(
            "update_me",
            "Set your own profile tags (users cannot give themselves strict tags). Returns your member record.",
            schema::<MePatch>(),
        ),
        tool(
            "list_teams",
            "List the org's teams and the tags they give their members (paid plans).",
            schema::<NoArguments>(),
        )
        .with_annotations(read()),
        tool(
            "get_team",
            "Fetch one team with its members and where each membership comes from (paid plans).",
            schema::<TeamName>(),
        )
        .with_annotations(read()),
        tool(
            "create_team",
            "Create a team whose tags its members inherit (admins and owners, paid plans).",
            schema::<NewTeam>(),
        ),
        tool(
            "update_team",
            "Change a team's tags, description or idp_only flag (admins and owners, paid plans).",
            schema::<TeamAnd<TeamPatch>>(),
        ),
        tool(
            "delete_team",
            "Delete a team and its memberships (admins and owners, paid plans).",
            schema::<TeamName>(),
        ),
        tool(
            "add_team_member",
            "Add a member to a team by hand (admins and owners, paid plans). Returns the membership.",
            schema::<TeamAnd<AddTeamMember>>(),
        ),
        tool(
            "remove_team_member",
            "Remove a member's manual membership of a team (admins and owners, paid plans).",
            schema::<TeamMember>(),
        ),
        tool(
            "send_feedback",
            "Send product feedback (bug, feature or general) to the service's operators. Returns the id of the task it became.",
            schema::<SendFeedback>(),
        ),
        tool(
            "get_quota",
            "This month's task quota: limit, used, remaining and when it resets.",
            schema::<NoArguments>(),
        )
        .with_annotations(read()),
        tool(
            "search_tasks",
            "Recall tasks by meaning from the org's history (1 to 25 results, best first). Answers {available: false, reason} when the org is client-encrypted (byok) or the server has no embedding model (not_configured).",
            schema::<SearchTasks>(),
        )
        .with_annotations(read()),
        tool(
            "get_insights",
            "Flow insights over the last 30 days: stuck and churning tasks, throughput, cycle times, failure rates by tag, per-agent figures, and failure clusters on pro and enterprise. Paid plans; {available: false, reason: not_computed_yet} before the first computation.",
            schema::<InsightsQuery>(),
        )
        .with_annotations(read()),
        tool(
            "list_runbooks",
            "Runbooks distilled from clusters of the org's completed tasks, newest first (pro and enterprise; {available: false, reason: byok} for client-encrypted orgs).",
            schema::<RunbooksQuery>(),
        )
        .with_annotations(read()),
        tool(
            "get_standup",
            "A standup report: scope `org` or `team:<name>`, cadence daily, weekly or monthly, period YYYY-MM-DD, YYYY-Www or YYYY-MM; the headline figures with their change since the previous report, a body, and up to 10 earlier reports. Paid plans.",
            schema::<StandupQuery>(),
        )
        .with_annotations(read()),
        tool(
            "plan_tasks",
            "Turn a goal into a task graph grounded on the org's history (similar tasks, cycle time, the tag that fails most, the best runbook); with create: true the drafted tasks are created. Pro and enterprise; each call counts against the monthly plan allowance.",
            schema::<PlanRequest>(),
        ),
        tool(
            "get_org_dek",
            "A client-encrypted (BYOK) org's data key, wrapped by the org's KMS, with its kms_key_id. Errors when the org's keys are managed by the server (clients must not encrypt) or none is enrolled yet.",
            schema::<NoArguments>(),
        )
        .with_annotations(read()),
        tool(
            "put_org_dek",
            "Enroll a BYOK org's data key once (owners only): wrapped_dek (base64, wrapped by the org's KMS) and kms_key_id (stored verbatim).",
            schema::<PutOrgDek>(),
        ),
    ]
});

/// A route's JSON body: as the route writes it, and as a value.
pub struct Body {
    pub text: String,
    pub json: Value,
}

/// What a tool call answers: the route's JSON body, or the engine's error.
pub type Answer = Result<Body, EngineError>;

fn body(value: impl Serialize) -> Answer {
    let failed = |e: serde_json::Error| EngineError::Internal(format!("answer: {e}"));
    Ok(Body {
        text: serde_json::to_string(&value).map_err(failed)?,
        json: serde_json::to_value(&value).map_err(failed)?,
    })
}

/// The arguments as a request; arguments that do not decode are counted
/// and answered by the engine as over HTTP.
async fn decode<R: MemberRequest>(
    engine: &Engine,
    caller: &Caller,
    arguments: &Value,
) -> Result<R, EngineError> {
    match R::decode(arguments) {
        Ok(request) => Ok(request),
        Err(e) => Err(engine.reject::<R>(caller, e).await),
    }
}

/// How an operation without a request body of its own counts when its
/// arguments are refused: a read or a write, and its paid feature.
#[derive(Clone, Copy)]
struct Counts(RequestKind, Option<&'static str>);

const READ: Counts = Counts(RequestKind::Read, None);
const TEAM_READ: Counts = Counts(RequestKind::Read, Some(TEAMS));
const TEAM_WRITE: Counts = Counts(RequestKind::Write, Some(TEAMS));

async fn refuse(
    engine: &Engine,
    caller: &Caller,
    counts: Counts,
    error: ValidationError,
) -> EngineError {
    engine.reject_as(caller, counts.0, counts.1, error).await
}

/// Takes a path parameter out of the arguments, leaving the body.
async fn path(
    engine: &Engine,
    caller: &Caller,
    counts: Counts,
    arguments: &mut Value,
    key: &str,
) -> Result<String, EngineError> {
    let error = match arguments.as_object_mut().and_then(|o| o.remove(key)) {
        Some(Value::String(s)) if !s.trim().is_empty() => return Ok(s),
        Some(_) => ValidationError::field(key, "must be a non-empty string"),
        None => ValidationError::field(key, "is required"),
    };
    Err(refuse(engine, caller, counts, error).await)
}

/// Refuses arguments left over: a tool without a body takes no others.
async fn none(
    engine: &Engine,
    caller: &Caller,
    counts: Counts,
    arguments: &Value,
) -> Result<(), EngineError> {
    match arguments.as_object().and_then(|o| o.keys().next()) {
        Some(k) => {
            let error = ValidationError::field(k, "unknown field");
            Err(refuse(engine, caller, counts, error).await)
        }
        None => Ok(()),
    }
}

/// Calls the tool `name`; `None` when there is no such tool.
pub async fn call(
    engine: &Engine,
    caller: &Caller,
    name: &str,
    mut arguments: Value,
) -> Option<Answer> {
    let (e, c, args) = (engine, caller, &mut arguments);
    Some(match name {
        "create_tasks" => {
            async {
                let request = decode::<CreateTasks>(e, c, args).await?;
                body(e.create_tasks(c, request).await?)
            }
            .await
        }
        "update_tasks" => {
            async {
                let request = decode::<UpdateTasks>(e, c, args).await?;
                body(e.update_tasks(c, request).await?)
            }
            .await
        }
        "get_tasks" => {
            async {
                let request = decode::<GetTasks>(e, c, args).await?;
                body(e.get_tasks(c, request).await?)
            }
            .await
        }
        "list_tasks" => {
            async {
                let request = decode::<ListTasks>(e, c, args).await?;
                body(e.list_tasks(c, request).await?)
            }
            .await
        }
        "claim_task" => {
            async {
                let request = decode::<ClaimRequest>(e, c, args).await?;
                body(e.claim_answer(c, request).await?)
            }
            .await
        }
        "list_tags" => {
            async {
                none(e, c, READ, args).await?;
                body(e.list_tags(c).await?)
            }
            .await
        }
        "create_tags" => {
            async {
                let request = decode::<CreateTags>(e, c, args).await?;
                body(e.create_tags(c, request).await?)
            }
            .await
        }
        "update_tags" => {
            async {
                let request = decode::<UpdateTags>(e, c, args).await?;
                body(e.update_tags(c, request).await?)
            }
            .await
        }
        "delete_tags" => {
            async {
                let request = decode::<DeleteTags>(e, c, args).await?;
                body(e.delete_tags(c, request).await?)
            }
            .await
        }
        "list_members" => {
            async {
                none(e, c, READ, args).await?;
                body(e.list_members(c).await?)
            }
            .await
        }
        "update_member" => {
            async {
                let email = path(e, c, Counts(RequestKind::Write, None), args, "email").await?;
                let patch = decode::<MemberPatch>(e, c, args).await?;
                body(e.patch_member(c, &email, patch).await?)
            }
            .await
        }
        "get_me" => {
            async {
                none(e, c, READ, args).await?;
                body(e.me(c).await?)
            }
            .await
        }
        "update_me" => {
            async {
                let patch = decode::<MePatch>(e, c, args).await?;
                body(e.patch_me(c, patch).await?)
            }
            .await
        }
        "list_teams" => {
            async {
                none(e, c, TEAM_READ, args).await?;
                body(e.list_teams(c).await?)
            }
            .await
        }
        "get_team" => {
            async {
                let team = path(e, c, TEAM_READ, args, "name").await?;
                none(e, c, TEAM_READ, args).await?;
                body(e.get_team(c, &team).await?)
            }
            .await
        }
        "create_team" => {
            async {
                let team = decode::<NewTeam>(e, c, args).await?;
                body(e.create_team(c, team).await?)
            }
            .await
        }
        "update_team" => {
            async {
                let team = path(e, c, TEAM_WRITE, args, "name").await?;
                let patch = decode::<TeamPatch>(e, c, args).await?;
                body(e.patch_team(c, &team, patch).await?)
            }
            .await
        }
        "delete_team" => {
            async {
                let team = path(e, c, TEAM_WRITE, args, "name").await?;
                none(e, c, TEAM_WRITE, args).await?;
                e.delete_team(c, &team).await?;
                body(Value::Null)
            }
            .await
        }
        "add_team_member" => {
            async {
                let team = path(e, c, TEAM_WRITE, args, "name").await?;
                let request = decode::<AddTeamMember>(e, c, args).await?;
                body(e.add_team_member(c, &team, request).await?)
            }
            .await
        }
        "remove_team_member" => {
            async {
                let team = path(e, c, TEAM_WRITE, args, "name").await?;
                let email = path(e, c, TEAM_WRITE, args, "email").await?;
                none(e, c, TEAM_WRITE, args).await?;
                e.remove_team_member(c, &team, &email).await?;
                body(Value::Null)
            }
            .await
        }
        "send_feedback" => {
            async {
                let request = decode::<SendFeedback>(e, c, args).await?;
                body(e.send_feedback(c, request).await?)
            }
            .await
        }
        "get_quota" => {
            async {
                none(e, c, READ, args).await?;
                body(e.quota(c).await?)
            }
            .await
        }
        "search_tasks" => {
            async {
                let request = decode::<SearchTasks>(e, c, args).await?;
                body(e.search_tasks(c, request).await?)
            }
            .await
        }
        "get_insights" => {
            async {
                decode::<InsightsQuery>(e, c, args).await?;
                body(e.insights(c).await?)
            }
            .await
        }
        "list_runbooks" => {
            async {
                decode::<RunbooksQuery>(e, c, args).await?;
                body(e.runbooks(c).await?)
            }
            .await
        }
        "get_standup" => {
            async {
                let request = decode::<StandupQuery>(e, c, args).await?;
                body(e.standup(c, request).await?)
            }
            .await
        }
        "plan_tasks" => {
            async {
                let request = decode::<PlanRequest>(e, c, args).await?;
                body(e.plan_tasks(c, request).await?)
            }
            .await
        }
        "get_org_dek" => {
            async {
                none(e, c, READ, args).await?;
                body(e.org_dek(c).await?)
            }
            .await
        }
        "put_org_dek" => {
            async {
                let request = decode::<PutOrgDek>(e, c, args).await?;
                body(e.put_org_dek(c, request).await?)
            }
            .await
        }
        _ => return None,
    })
}
