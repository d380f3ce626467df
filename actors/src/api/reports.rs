//! Reports and planning: `GET /insights`, `GET /runbooks`, `GET /standup`,
//! `POST /tasks/plan`, and the operator's `POST /admin/orgs/{id}/recompute`.
//!
//! Reports are computed off the request path by the reports actor and
//! stored; these types are both what it stores and what the routes answer,
//! so a stored report is served exactly as it was written.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use super::decode::{dedup, err, Result};
use super::{Decode, Timestamp, Unavailable, NON_BLANK_PATTERN};
use crate::domain::TaskId;

/// The paid features these routes belong to, named in the upgrade hint.
pub const INSIGHTS: &str = "insights";
pub const STANDUP: &str = "standup reports";
pub const RUNBOOKS: &str = "runbooks";
pub const PLANNING: &str = "planning";

/// A signal: the tasks it names (at most the top 20) and how many there are.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Signal {
    pub task_ids: Vec<TaskId>,
    pub count: u64,
}

/// The most task ids a signal lists.
pub const SIGNAL_TOP: usize = 20;

/// The days insights look back over; an org younger than that is looked
/// at over the days it has existed (`Insights::window_days`).
pub const INSIGHTS_WINDOW_DAYS: u32 = 30;

/// Work finished in the window.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Throughput {
    pub completed: u64,
    pub failed: u64,
    /// Tasks changed in the window that a failure sent back to wait under
    /// their retry policy at least once (finished or not).
    #[serde(default)]
    pub retried: u64,
    /// Completed tasks per day of the window.
    pub per_day: f64,
}

/// How long completed tasks took, from their first claim (or creation, if
/// never claimed) to completion. The hours are null when none completed.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct CycleTimes {
    pub count: u64,
    pub p50_hours: Option<f64>,
    pub p90_hours: Option<f64>,
    pub mean_hours: Option<f64>,
}

/// Of the tasks carrying `tag` that finished in the window, how many failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FailureRate {
    pub tag: String,
    pub failed: u64,
    pub total: u64,
    /// `failed / total`, in [0, 1].
    pub rate: f64,
}

/// What one agent (a key name or a member's email) did in the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentStats {
    pub agent_id: String,
    /// Claims it made.
    pub claimed: u64,
    /// Tasks it finished as completed or failed.
    pub completed: u64,
    pub failed: u64,
    pub median_cycle_hours: Option<f64>,
}

/// Failed tasks that went wrong in the same way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FailureCluster {
    pub label: String,
    pub count: u64,
    /// This cluster's share of the window's failed tasks, in percent.
    pub share_pct: f64,
}

/// `GET /insights`: the org's flow over the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Insights {
    /// Always true.
    pub available: bool,
    pub computed_at: Timestamp,
    pub window_days: u32,
    /// In progress far longer than the org's usual cycle time (docs/guide/reports.md).
    pub stuck: Signal,
    /// Open tasks that keep going back to pending (docs/guide/reports.md).
    pub churning: Signal,
    pub throughput: Throughput,
    pub cycle_times: CycleTimes,
    /// Worst first.
    pub failure_rates: Vec<FailureRate>,
    /// Busiest first.
    pub agents: Vec<AgentStats>,
    /// Pro and enterprise managed orgs, once computed (weekly); largest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_clusters: Option<Vec<FailureCluster>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum InsightsAnswer {
    Report(Box<Insights>),
    Unavailable(Unavailable),
}

/// A procedure distilled from a cluster of completed tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Runbook {
    pub runbook_id: String,
    pub topic: String,
    pub body: String,
    pub computed_at: Timestamp,
    pub member_count: u64,
    /// Up to 50 completed tasks of the cluster, newest first.
    pub source_task_ids: Vec<TaskId>,
}

/// The most source tasks a runbook lists.
pub const RUNBOOK_SOURCES: usize = 50;

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum RunbooksAnswer {
    List { runbooks: Vec<Runbook> },
    Unavailable(Unavailable),
}

pub use crate::domain::period::Cadence;

/// Changes since the previous report of the same scope and cadence; null
/// when there is none.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Delta {
    pub completed: Option<i64>,
    pub failed: Option<i64>,
    pub open: Option<i64>,
    pub stuck_count: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Headline {
    pub period: String,
    pub cadence: Cadence,
    pub scope: String,
    /// Tasks completed in the period.
    pub completed: u64,
    /// Tasks failed in the period.
    pub failed: u64,
    /// Tasks open when the report was computed.
    pub open: u64,
    pub stuck_count: u64,
    /// The tag with the most failures in the period.
    pub top_failure_tag: Option<String>,
    pub delta: Delta,
}

/// One standup report as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StandupEntry {
    pub scope: String,
    pub period: String,
    pub cadence: Cadence,
    pub computed_at: Timestamp,
    pub headline: Headline,
    pub body: String,
}

/// `GET /standup`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StandupReport {
    /// Always true.
    pub available: bool,
    pub scope: String,
    pub period: String,
    pub cadence: Cadence,
    pub computed_at: Timestamp,
    pub headline: Headline,
    pub body: String,
    /// Up to 10 earlier reports of the same scope (and cadence, when one
    /// was asked for), newest first.
    pub history: Vec<StandupEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum StandupAnswer {
    Report(Box<StandupReport>),
    Unavailable(Unavailable),
}

/// The most earlier reports a standup answer carries.
pub const STANDUP_HISTORY: usize = 10;

/// Whose work a standup covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Scope {
    #[default]
    Org,
    /// Tasks carrying one of the team's tags or assigned to one of its members.
    Team(String),
}

impl Scope {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "org" => Some(Scope::Org),
            _ => s
                .strip_prefix("team:")
                .filter(|name| !name.trim().is_empty())
                .map(|name| Scope::Team(name.to_owned())),
        }
    }

    pub fn key(&self) -> String {
        match self {
            Scope::Org => "org".to_owned(),
            Scope::Team(name) => format!("team:{name}"),
        }
    }
}

/// `GET /standup` query: which report.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StandupQuery {
    /// `org` (default) or `team:<name>`.
    #[serde(default, deserialize_with = "scope_or_org")]
    #[schemars(with = "Option<String>", regex(pattern = SCOPE_PATTERN))]
    pub scope: Scope,
    /// Omitted: the most recent report of any cadence (or the period's).
    #[serde(default)]
    pub cadence: Option<Cadence>,
    /// `YYYY-MM-DD` (daily), `YYYY-Www` (weekly, ISO week) or `YYYY-MM`
    /// (monthly), of the cadence when one is given.
    #[serde(default)]
    #[schemars(with = "Option<String>", regex(pattern = PERIOD_PATTERN))]
    pub period: Option<String>,
}

const SCOPE_PATTERN: &str = r"^(org|team:.*\S.*)$";

/// A day, an ISO week or a month, as far as a pattern can tell a calendar.
const PERIOD_PATTERN: &str = concat!(
    r"^\d{4}-(?:",
    r"(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|02-(?:0[1-9]|1\d|2\d)",
    r"|W(?:0[1-9]|[1-4]\d|5[0-3])",
    r"|0[1-9]|1[0-2]",
    r")$"
);

fn scope_or_org<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Scope, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(Scope::Org),
        Some(s) => Scope::parse(&s)
            .ok_or_else(|| serde::de::Error::custom("must be `org` or `team:<name>`")),
    }
}

impl Decode for StandupQuery {
    /// A period that exists in the calendar, of the cadence asked for.
    fn validate(&mut self) -> Result<()> {
        let Some(p) = self.period.as_deref() else {
            return Ok(());
        };
        let period = crate::domain::period::Period::parse(p)
            .ok_or_else(|| err("period", format!("`{p}` is not in the calendar")))?;
        if let Some(c) = self.cadence {
            if period.cadence() != c {
                return Err(err(
                    "period",
                    format!("`{p}` is not a {} period", c.as_str()),
                ));
            }
        }
        self.period = Some(period.to_string());
        Ok(())
    }
}

/// A route's query that takes no parameters (and refuses any).
macro_rules! empty_query {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $name {}

        impl Decode for $name {}
    };
}

empty_query!(
    /// `GET /insights`'s (empty) query.
    InsightsQuery
);
empty_query!(
    /// `GET /runbooks`'s (empty) query.
    RunbooksQuery
);

pub const MAX_GOAL_CHARS: usize = 2_000;
pub const MAX_CONTEXT_CHARS: usize = 8_000;
pub const DEFAULT_PLAN_TASKS: u8 = 8;
pub const MAX_PLAN_TASKS: u8 = 25;

/// `POST /tasks/plan`: turn a goal into a task graph.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanRequest {
    /// What should be achieved; clipped to 2,000 characters.
    #[schemars(length(min = 1), regex(pattern = NON_BLANK_PATTERN))]
    pub goal: String,
    /// Anything the planner should know; clipped to 8,000 characters.
    #[serde(default)]
    pub context: Option<String>,
    /// At most this many drafted tasks (default 8; above 25 reads as 25).
    #[serde(default = "default_plan_tasks", deserialize_with = "max_plan_tasks")]
    #[schemars(with = "Option<u32>", range(min = 1, max = u32::MAX))]
    pub max_tasks: u8,
    /// Also create the drafted tasks (default false; null is refused).
    #[serde(default)]
    pub create: bool,
}

fn clip(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

fn default_plan_tasks() -> u8 {
    DEFAULT_PLAN_TASKS
}

/// `max_tasks` as given, 25 at most; `null` is the default.
fn max_plan_tasks<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<u8, D::Error> {
    Ok(
        Option::<u32>::deserialize(d)?.map_or(DEFAULT_PLAN_TASKS, |n| {
            n.min(u32::from(MAX_PLAN_TASKS)) as u8
        }),
    )
}

impl Decode for PlanRequest {
    fn validate(&mut self) -> Result<()> {
        self.goal = clip(&self.goal, MAX_GOAL_CHARS);
        self.context = self.context.as_deref().map(|c| clip(c, MAX_CONTEXT_CHARS));
        Ok(())
    }
}

/// One task of a drafted plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DraftTask {
    #[serde(rename = "ref")]
    pub task_ref: String,
    pub title: String,
    pub description: String,
    /// `ref:<ref>` of other drafted tasks.
    pub blocked_by: Vec<String>,
    /// Tags of the org's vocabulary.
    pub suggested_tags: Vec<String>,
    pub priority: i64,
}

/// A similar task of the org the plan was grounded on.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct GroundingTask {
    pub task_id: TaskId,
    pub title: String,
    pub status: crate::domain::TaskStatus,
    pub score: f32,
}

/// The runbook the plan was grounded on.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct GroundingRunbook {
    pub runbook_id: String,
    pub topic: String,
    pub score: f32,
}

/// What the planner knew of the org's own history.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
pub struct Grounding {
    pub similar_tasks: Vec<GroundingTask>,
    /// Median cycle time of the org's completed tasks, in days.
    pub cycle_time_days: Option<f64>,
    pub top_failure_tag: Option<String>,
    pub runbook: Option<GroundingRunbook>,
}

#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Plan {
    pub goal: String,
    pub tasks: Vec<DraftTask>,
    pub grounded_on: Grounding,
}

/// A drafted task that was created.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct CreatedDraft {
    pub task_id: TaskId,
    #[serde(rename = "ref")]
    pub task_ref: String,
}

/// A drafted task that was not created, and why.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct FailedDraft {
    #[serde(rename = "ref")]
    pub task_ref: String,
    pub error: String,
}

/// Why no drafted task was created.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct NotCreated {
    pub reason: String,
}

/// `POST /tasks/plan`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Planned {
    pub plan: Plan,
    /// Plans left this month; null when unlimited.
    pub plan_calls_remaining: Option<i64>,
    /// The tasks created (`create: true`), null for a draft.
    pub created: Option<Vec<CreatedDraft>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_created: Option<NotCreated>,
    /// Some drafted tasks could not be created; `failed` says which.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<Vec<FailedDraft>>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum PlanAnswer {
    Planned(Box<Planned>),
    Unavailable(Unavailable),
}

/// A report the operator can have computed now.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ReportKind {
    Insights,
    Runbooks,
    Standup,
    FailureClusters,
}

impl ReportKind {
    pub const ALL: [ReportKind; 4] = [
        ReportKind::Insights,
        ReportKind::Runbooks,
        ReportKind::Standup,
        ReportKind::FailureClusters,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ReportKind::Insights => "insights",
            ReportKind::Runbooks => "runbooks",
            ReportKind::Standup => "standup",
            ReportKind::FailureClusters => "failure_clusters",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// `POST /admin/orgs/{org_id}/recompute`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Recompute {
    /// Which reports; omitted or `null`: all four.
    #[serde(default = "all_reports", deserialize_with = "reports_or_all")]
    #[schemars(with = "Option<Vec<ReportKind>>", length(min = 1))]
    pub reports: Vec<ReportKind>,
}

fn all_reports() -> Vec<ReportKind> {
    ReportKind::ALL.to_vec()
}

fn reports_or_all<'de, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<ReportKind>, D::Error> {
    Ok(Option::<Vec<ReportKind>>::deserialize(d)?.unwrap_or_else(all_reports))
}

impl Decode for Recompute {
    const BODY_REQUIRED: bool = false;

    fn validate(&mut self) -> Result<()> {
        dedup(&mut self.reports);
        Ok(())
    }
}

/// The reports computed; a report that does not apply to the org (its
/// tier or its encryption) is left out.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Recomputed {
    pub computed: Vec<ReportKind>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn plan_requests_clip_and_check_their_fields() {
        let long = "g".repeat(MAX_GOAL_CHARS + 10);
        let p = PlanRequest::decode(&json!({"goal": long, "context": "c".repeat(9000)})).unwrap();
        assert_eq!(p.goal.chars().count(), MAX_GOAL_CHARS);
        assert_eq!(p.context.unwrap().chars().count(), MAX_CONTEXT_CHARS);
        assert_eq!(p.max_tasks, DEFAULT_PLAN_TASKS);
        assert!(!p.create);
        let p =
            PlanRequest::decode(&json!({"goal": "g", "max_tasks": 90, "create": true})).unwrap();
        assert_eq!((p.max_tasks, p.create), (MAX_PLAN_TASKS, true));
        for bad in [
            json!({}),
            json!({"goal": " "}),
            json!({"goal": 3}),
            json!({"goal": "g", "create": "yes"}),
            json!({"goal": "g", "create": null}),
            json!({"goal": "g", "max_tasks": 0}),
            json!({"goal": "g", "max_tasks": -1}),
            json!({"goal": "g", "max_tasks": 2.5}),
            json!({"goal": "g", "other": 1}),
        ] {
            assert!(PlanRequest::decode(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn standup_queries_parse_scope_cadence_and_period() {
        let q = StandupQuery::decode(&json!({})).unwrap();
        assert_eq!((q.scope, q.cadence, q.period), (Scope::Org, None, None));
        let q = StandupQuery::decode(&json!({"scope": "team:ops", "period": "2026-W07"})).unwrap();
        assert_eq!(q.scope, Scope::Team("ops".into()));
        assert_eq!(q.period.as_deref(), Some("2026-W07"));
        for bad in [
            json!({"scope": "team:"}),
            json!({"scope": "everyone"}),
            json!({"cadence": "hourly"}),
            json!({"period": "2026-13"}),
            json!({"period": "2026-02-30"}),
            json!({"period": "2026-W54"}),
            json!({"period": "yesterday"}),
            json!({"cadence": "daily", "period": "2026-03"}),
            json!({"other": "x"}),
        ] {
            assert!(StandupQuery::decode(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn recompute_names_reports() {
        assert_eq!(
            Recompute::decode(&json!({})).unwrap().reports,
            ReportKind::ALL.to_vec()
        );
        assert_eq!(
            Recompute::decode(&json!({"reports": ["standup", "standup"]}))
                .unwrap()
                .reports,
            vec![ReportKind::Standup]
        );
        for bad in [
            json!({"reports": []}),
            json!({"reports": ["weather"]}),
            json!({"reports": "insights"}),
        ] {
            assert!(Recompute::decode(&bad).is_err(), "{bad}");
        }
    }
}
