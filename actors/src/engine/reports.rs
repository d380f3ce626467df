//! Reports and planning as the API gets them: stored reports read back
//! (never computed on the request path), the operator's recompute, the
//! runbook in claim context (never waiting), and the planner.

use std::collections::{HashMap, HashSet};

use serde_json::{json, Value};

use super::Engine;
use crate::api::{
    Cadence, CreateTasks, CreatedDraft, Decode, DraftTask, FailedDraft, Grounding,
    GroundingRunbook, GroundingTask, InsightsAnswer, NotCreated, Plan, PlanAnswer, PlanRequest,
    Planned, Recompute, Recomputed, RunbookContext, RunbooksAnswer, Scope, StandupAnswer,
    StandupEntry, StandupQuery, StandupReport, Text, Unavailable, INSIGHTS, PLANNING, RUNBOOKS,
    STANDUP, STANDUP_HISTORY,
};
use crate::domain::account::{Caller, Encryption, Role};
use crate::domain::period::Period;
use crate::domain::usage::RequestKind;
use crate::domain::{OrgId, TaskId};
use crate::error::EngineError;
use crate::reports::actor::ReportsMsg;
use crate::reports::cluster;
use crate::reports::compute;
use crate::reports::insights;
use crate::reports::plan;
use crate::reports::stored::{self, best_runbook, standup_key};
use crate::views;

/// How long the operator's recompute may take.
const RECOMPUTE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);
/// Similar tasks a plan is grounded on.
const GROUNDING_TASKS: usize = 5;

impl Engine {
    /// Refuses a feature of the pro and enterprise plans to other tiers.
    async fn require_pro(&self, caller: &Caller, feature: &str) -> Result<(), EngineError> {
        let entry = self.inner.directory.get(caller.org_id).await?;
        Ok(entry.record.require_pro_plan(feature)?)
    }

    /// `GET /insights`.
    pub async fn insights(&self, caller: &Caller) -> Result<InsightsAnswer, EngineError> {
        self.require_paid_plan(caller, INSIGHTS).await?;
        self.admit(caller, RequestKind::Read).await?;
        self.check_store()?;
        let org = caller.org_id;
        let entry = self.inner.directory.get(org).await?;
        let reporter = &self.inner.reporter;
        let Some(mut report) = reporter.insights(org, &entry.cipher).await? else {
            return Ok(InsightsAnswer::Unavailable(Unavailable::because(
                "not_computed_yet",
            )));
        };
        if stored::applies(
            crate::api::ReportKind::FailureClusters,
            entry.record.tier,
            entry.record.encryption,
        ) {
            report.failure_clusters = reporter.failure_clusters_of(org, &entry.cipher).await?;
        }
        Ok(InsightsAnswer::Report(Box::new(report)))
    }

    /// `GET /runbooks`.
    pub async fn runbooks(&self, caller: &Caller) -> Result<RunbooksAnswer, EngineError> {
        self.require_pro(caller, RUNBOOKS).await?;
        self.admit(caller, RequestKind::Read).await?;
        if let Some(unavailable) = self.unreadable_content(caller).await? {
            return Ok(RunbooksAnswer::Unavailable(unavailable));
        }
        self.check_store()?;
        let entry = self.inner.directory.get(caller.org_id).await?;
        let stored = self
            .inner
            .reporter
            .runbooks_of(caller.org_id, &entry.cipher)
            .await?;
        let runbooks = stored.iter().map(|r| r.runbook.clone()).collect();
        Ok(RunbooksAnswer::List { runbooks })
    }

    /// `GET /standup`.
    pub async fn standup(
        &self,
        caller: &Caller,
        query: StandupQuery,
    ) -> Result<StandupAnswer, EngineError> {
        self.require_paid_plan(caller, STANDUP).await?;
        self.admit(caller, RequestKind::Read).await?;
        if let Some(unavailable) = self.unreadable_content(caller).await? {
            return Ok(StandupAnswer::Unavailable(unavailable));
        }
        self.check_store()?;
        let org = caller.org_id;
        if let Scope::Team(team) = &query.scope {
            self.may_read_team_report(caller, team).await?;
        }
        let scope = query.scope.key();
        let entry = self.inner.directory.get(org).await?;
        let store = &self.inner.store;
        let stored = match &query.period {
            Some(period) => {
                let cadence = Period::parse(period)
                    .map(|p| p.cadence())
                    .unwrap_or(Cadence::Daily);
                let key = standup_key(&scope, cadence, period);
                store.report(org, &key).await?
            }
            None => {
                let cadence = query.cadence.map(Cadence::as_str);
                let mut recent = store
                    .recent_reports(
                        org,
                        crate::api::ReportKind::Standup.as_str(),
                        &scope,
                        cadence,
                        3,
                    )
                    .await?;
                // Computed together, the shortest cadence answers first.
                recent.sort_by_key(|r| {
                    (
                        std::cmp::Reverse(r.computed_at),
                        Cadence::parse(&r.key.cadence),
                    )
                });
                recent.into_iter().next()
            }
        };
        let Some(stored) = stored else {
            return Ok(StandupAnswer::Unavailable(Unavailable::because(
                "not_computed_yet",
            )));
        };
        let report: StandupEntry = stored::open(&entry.cipher, &stored.key, &stored.body)?;
        let earlier = store
            .recent_reports(
                org,
                crate::api::ReportKind::Standup.as_str(),
                &scope,
                query.cadence.map(Cadence::as_str),
                STANDUP_HISTORY * 3 + 1,
            )
            .await?;
        let mut history = Vec::new();
        for r in earlier {
            if r.key == stored.key || history.len() == STANDUP_HISTORY {
                continue;
            }
            // History runs back from the report answered.
            let older = r.computed_at < stored.computed_at
                || (r.computed_at == stored.computed_at && r.key.period < stored.key.period);
            if older || query.period.is_none() {
                history.push(stored::open::<StandupEntry>(
                    &entry.cipher,
                    &r.key,
                    &r.body,
                )?);
            }
        }
        Ok(StandupAnswer::Report(Box::new(StandupReport {
            available: true,
            scope: report.scope,
            period: report.period,
            cadence: report.cadence,
            computed_at: report.computed_at,
            headline: report.headline,
            body: report.body,
            history,
        })))
    }

    /// Team reports are for the team's members and the org's admins and
    /// owners; an unknown team is not found.
    async fn may_read_team_report(&self, caller: &Caller, team: &str) -> Result<(), EngineError> {
        let org = caller.org_id;
        let teams = self.stored(self.inner.store.org_teams(org).await)?;
        if !teams.iter().any(|t| t.name == team) {
            return Err(EngineError::NotFound(format!("team {team:?} not found")));
        }
        if matches!(caller.role, Role::Owner | Role::Admin) {
            return Ok(());
        }
        let memberships = self.stored(self.inner.store.org_memberships(org).await)?;
        if memberships
            .iter()
            .any(|m| m.team == team && m.email.eq_ignore_ascii_case(&caller.email))
        {
            return Ok(());
        }
        Err(EngineError::Forbidden(
            "this team's reports are for its members and the org's admins".into(),
        ))
    }

    /// `POST /admin/orgs/{org_id}/recompute`.
    pub async fn recompute(
        &self,
        org: OrgId,
        request: Recompute,
    ) -> Result<Recomputed, EngineError> {
        self.check_store()?;
        // An unknown org is not found, here rather than in the actor.
        self.inner.directory.get(org).await?;
        let actor = self
            .inner
            .reports
            .read()
            .expect("not poisoned")
            .clone()
            .ok_or(EngineError::ActorUnavailable)?;
        let computed = actor
            .call(
                |reply| ReportsMsg::Recompute {
                    org,
                    kinds: request.reports,
                    reply,
                },
                Some(RECOMPUTE_TIMEOUT),
            )
            .await
            .map_err(|_| EngineError::ActorUnavailable)?;
        match computed {
            ractor::rpc::CallResult::Success(result) => Ok(Recomputed { computed: result? }),
            ractor::rpc::CallResult::Timeout => Err(EngineError::Timeout),
            ractor::rpc::CallResult::SenderError => Err(EngineError::ActorUnavailable),
        }
    }

    /// Tells the reports actor of a new org, so its schedule includes it.
    pub(super) fn report_on(&self, org: OrgId) {
        if let Some(actor) = self.inner.reports.read().expect("not poisoned").as_ref() {
            let _ = actor.cast(ReportsMsg::OrgAdded(org));
        }
    }

    /// The runbook that best fits a claimed task, for its context: pro and
    /// enterprise managed orgs; never waits (runbooks not yet in memory are
    /// loaded for the next claim).
    pub(super) async fn runbook_context(
        &self,
        org: OrgId,
        task: TaskId,
        title: &Text,
    ) -> Result<Option<RunbookContext>, EngineError> {
        let entry = self.inner.directory.get(org).await?;
        if !stored::applies(
            crate::api::ReportKind::Runbooks,
            entry.record.tier,
            entry.record.encryption,
        ) {
            return Ok(None);
        }
        let reporter = &self.inner.reporter;
        let Some(runbooks) = reporter.runbooks_now(org) else {
            let engine = self.clone();
            tokio::spawn(async move {
                let entry = engine.inner.directory.get(org).await?;
                engine
                    .inner
                    .reporter
                    .runbooks_of(org, &entry.cipher)
                    .await
                    .map(|_| ())
            });
            return Ok(None);
        };
        let vector = self
            .inner
            .meaning
            .as_ref()
            .and_then(|m| m.vector_now(org, task));
        let terms = match title {
            Text::Plain(t) => cluster::terms(t, &[]),
            Text::Envelope(_) => Vec::new(),
        };
        Ok(
            best_runbook(&runbooks, vector.as_deref(), &terms).map(|(r, score)| RunbookContext {
                topic: r.runbook.topic.clone(),
                body: r.runbook.body.clone(),
                score,
            }),
        )
    }

    /// `POST /tasks/plan`.
    pub async fn plan_tasks(
        &self,
        caller: &Caller,
        request: PlanRequest,
    ) -> Result<PlanAnswer, EngineError> {
        self.require_pro(caller, PLANNING).await?;
        if let Some(unavailable) = self.unreadable_content(caller).await? {
            self.admit(caller, RequestKind::Write).await?;
            return Ok(PlanAnswer::Unavailable(unavailable));
        }
        let Some(chat) = self.inner.reporter.chat.clone() else {
            self.admit(caller, RequestKind::Write).await?;
            return Ok(PlanAnswer::Unavailable(Unavailable::because("not_enabled")));
        };
        self.check_store()?;
        let remaining = self.charge_plan_allowance(caller).await?;
        let org = caller.org_id;
        let vocabulary: Vec<String> = self
            .stored(self.inner.store.org_tags(org).await)?
            .into_iter()
            .map(|t| t.name)
            .collect();
        let grounding = self.grounding(org, &request.goal).await?;
        let messages = plan::plan_prompt(
            &request.goal,
            request.context.as_deref(),
            &grounding,
            &vocabulary,
            request.max_tasks,
        );
        let no_plan = |reason: String| EngineError::NoUsablePlan {
            reason,
            plan_calls_remaining: remaining,
        };
        let answer = chat.complete(messages).await.map_err(|e| {
            tracing::warn!(%org, error = %e, "the planner's model gave no answer");
            no_plan(e.to_string())
        })?;
        let tasks = plan::parse_plan(&answer, request.max_tasks, &vocabulary).map_err(|e| {
            tracing::info!(%org, error = %e, "the planner's answer is not a usable plan");
            no_plan(e.to_string())
        })?;
        let mut planned = Planned {
            plan: Plan {
                goal: request.goal.clone(),
                tasks,
                grounded_on: grounding,
            },
            plan_calls_remaining: remaining,
            created: None,
            not_created: None,
            partial: None,
            failed: None,
        };
        if request.create {
            self.create_drafts(caller, &mut planned).await;
        }
        Ok(PlanAnswer::Planned(Box::new(planned)))
    }

    /// What the org's history says about a goal: similar tasks, the median
    /// cycle time, the tag that fails most, the best runbook.
    async fn grounding(&self, org: OrgId, goal: &str) -> Result<Grounding, EngineError> {
        let entry = self.inner.directory.get(org).await?;
        let now = self.inner.clock.now_ms();
        let since = now - i64::from(insights::WINDOW_DAYS) * compute::DAY_MS;
        let histories = self.stored(self.inner.store.task_histories(org, since).await)?;
        let figures = insights::insights(&histories, now, entry.record.created_at);
        let mut grounding = Grounding {
            similar_tasks: Vec::new(),
            cycle_time_days: insights::median_cycle_ms(&histories, now)
                .map(|ms| (ms as f64 / compute::DAY_MS as f64 * 100.0).round() / 100.0),
            top_failure_tag: figures.failure_rates.first().map(|f| f.tag.clone()),
            runbook: None,
        };
        let mut goal_vector = None;
        if let Some(meaning) = &self.inner.meaning {
            match meaning.embed_text(goal).await {
                Ok(v) => {
                    let query = crate::meaning::index::Query::new(&v);
                    let hits = meaning.search(org, &query, GROUNDING_TASKS, None).await?;
                    let tasks = self.tasks_by_id(org, &hits).await?;
                    for hit in &hits {
                        if let Some(t) = tasks.get(&hit.task_id) {
                            if let Text::Plain(title) = views::title(&entry.cipher, t)? {
                                grounding.similar_tasks.push(GroundingTask {
                                    task_id: hit.task_id,
                                    title,
                                    status: t.header.status,
                                    score: hit.score,
                                });
                            }
                        }
                    }
                    goal_vector = Some(v);
                }
                Err(e) => tracing::info!(%org, error = %e, "plan grounded without similar tasks"),
            }
        }
        if entry.record.encryption == Encryption::Managed {
            let runbooks = self.inner.reporter.runbooks_of(org, &entry.cipher).await?;
            let terms = cluster::terms(goal, &[]);
            grounding.runbook =
                best_runbook(&runbooks, goal_vector.as_deref(), &terms).map(|(r, score)| {
                    GroundingRunbook {
                        runbook_id: r.runbook.runbook_id.clone(),
                        topic: r.runbook.topic.clone(),
                        score,
                    }
                });
        }
        Ok(grounding)
    }

    /// Creates a plan's drafted tasks as one POST /tasks would. A draft
    /// that fails validation is left out with its reason, and so is every
    /// draft blocked by one left out; the rest are created together.
    async fn create_drafts(&self, caller: &Caller, planned: &mut Planned) {
        let drafts = &planned.plan.tasks;
        let mut failed: Vec<FailedDraft> = Vec::new();
        for d in drafts {
            let alone = json!({"tasks": [draft_item(d, false)]});
            if let Err(e) = CreateTasks::decode(&alone) {
                failed.push(FailedDraft {
                    task_ref: d.task_ref.clone(),
                    error: e.to_string(),
                });
            }
        }
        // Blocked by a draft left out: left out too, until nothing changes.
        loop {
            let out: HashSet<String> = failed.iter().map(|f| f.task_ref.clone()).collect();
            let more: Vec<FailedDraft> = drafts
                .iter()
                .filter(|d| !out.contains(&d.task_ref))
                .filter_map(|d| {
                    d.blocked_by
                        .iter()
                        .filter_map(|b| b.strip_prefix("ref:"))
                        .find(|r| out.contains(*r))
                        .map(|r| FailedDraft {
                            task_ref: d.task_ref.clone(),
                            error: format!("blocked by ref:{r}, which was not created"),
                        })
                })
                .collect();
            if more.is_empty() {
                break;
            }
            failed.extend(more);
        }
        let out: HashSet<&str> = failed.iter().map(|f| f.task_ref.as_str()).collect();
        let items: Vec<Value> = drafts
            .iter()
            .filter(|d| !out.contains(d.task_ref.as_str()))
            .map(|d| draft_item(d, true))
            .collect();
        if items.is_empty() {
            planned.not_created = Some(NotCreated {
                reason: "no drafted task passed validation".into(),
            });
            planned.failed = Some(failed);
            return;
        }
        let created = match CreateTasks::decode(&json!({ "tasks": items })) {
            Ok(request) => self.create_tasks(caller, request).await,
            Err(e) => Err(EngineError::Invalid(e)),
        };
        match created {
            Ok(answer) => {
                let refs: HashMap<TaskId, String> = answer
                    .results
                    .iter()
                    .filter_map(|r| r.reference.clone().map(|x| (r.task_id, x)))
                    .collect();
                planned.created = Some(
                    answer
                        .results
                        .iter()
                        .map(|r| CreatedDraft {
                            task_id: r.task_id,
                            task_ref: refs.get(&r.task_id).cloned().unwrap_or_default(),
                        })
                        .collect(),
                );
                if !failed.is_empty() {
                    planned.partial = Some(true);
                    planned.failed = Some(failed);
                }
            }
            Err(e) => {
                planned.not_created = Some(NotCreated {
                    reason: e.body().error,
                });
                if !failed.is_empty() {
                    planned.failed = Some(failed);
                }
            }
        }
    }
}

/// A drafted task as a POST /tasks item; `with_blockers: false` leaves its
/// `ref:` blockers out, to check the item alone.
fn draft_item(d: &DraftTask, with_blockers: bool) -> Value {
    let mut item = json!({
        "ref": d.task_ref,
        "title": d.title,
        "tags": d.suggested_tags,
        "priority": d.priority,
    });
    if !d.description.is_empty() {
        item["description"] = json!(d.description);
    }
    if with_blockers && !d.blocked_by.is_empty() {
        item["blocked_by"] = json!(d.blocked_by);
    }
    item
}
