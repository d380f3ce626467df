//! The standups a computation writes: the org's and each team's, for the
//! last complete day, week and month, worded through the model or the
//! template.

use std::collections::HashMap;

use super::{plain, Reporter, Written, STANDUP_TITLES};
use crate::api::{Cadence, Headline, Scope, StandupEntry, Timestamp};
use crate::directory::OrgEntry;
use crate::domain::history::TaskHistory;
use crate::domain::period::Period;
use crate::domain::{OrgId, StoredTask, TaskId, TaskStatus};
use crate::error::EngineError;
use crate::reports::insights;
use crate::reports::standup::{self, TeamScope};
use crate::reports::stored::{open, standup_key};
use crate::views;

impl Reporter {
    /// The standups of the last complete day, week and month, for the org
    /// and each team. A scheduled run leaves a week's or month's report
    /// that is already stored as it is; a recompute writes them again.
    pub(super) async fn standups(
        &self,
        org: OrgId,
        entry: &OrgEntry,
        histories: &[TaskHistory],
        now: i64,
        scheduled: bool,
        written: &mut Written,
    ) -> Result<(), EngineError> {
        let teams = self.work.org_teams(org).await?;
        let memberships = self.work.org_memberships(org).await?;
        let mut scopes: Vec<(Scope, Option<TeamScope>)> = vec![(Scope::Org, None)];
        for team in teams {
            let emails = memberships
                .iter()
                .filter(|m| m.team == team.name)
                .map(|m| m.email.clone())
                .collect();
            scopes.push((
                Scope::Team(team.name.clone()),
                Some(TeamScope {
                    tags: team.tags.clone(),
                    emails,
                }),
            ));
        }
        let threshold = insights::stuck_threshold_ms(insights::median_cycle_ms(histories, now));
        for (scope, team) in &scopes {
            let scope_key = scope.key();
            let tasks: Vec<TaskHistory> = match team {
                None => histories.to_vec(),
                Some(team) => histories
                    .iter()
                    .filter(|t| standup::in_team(t, team))
                    .cloned()
                    .collect(),
            };
            for cadence in Cadence::ALL {
                let period = Period::containing(cadence, now).previous();
                let key = standup_key(&scope_key, cadence, &period.to_string());
                if scheduled
                    && cadence != Cadence::Daily
                    && self.work.report(org, &key).await?.is_some()
                {
                    continue;
                }
                let previous_key = standup_key(&scope_key, cadence, &period.previous().to_string());
                let previous: Option<StandupEntry> =
                    match self.work.report(org, &previous_key).await? {
                        Some(stored) => open(&entry.cipher, &previous_key, &stored.body).ok(),
                        None => None,
                    };
                let headline = standup::headline(
                    &tasks,
                    &scope_key,
                    period,
                    now,
                    threshold,
                    previous.as_ref().map(|p| &p.headline),
                );
                let body = self
                    .standup_body(org, entry, &tasks, period, &headline)
                    .await?;
                let report = StandupEntry {
                    scope: scope_key.clone(),
                    period: period.to_string(),
                    cadence,
                    computed_at: Timestamp(now),
                    headline,
                    body,
                };
                written.add(entry, key, &report);
            }
        }
        Ok(())
    }

    async fn standup_body(
        &self,
        org: OrgId,
        entry: &OrgEntry,
        tasks: &[TaskHistory],
        period: Period,
        headline: &Headline,
    ) -> Result<String, EngineError> {
        let (start, end) = period.bounds();
        let finished = |status: TaskStatus| -> Vec<TaskId> {
            tasks
                .iter()
                .filter(|t| t.status == status)
                .filter(|t| t.finished_at().is_some_and(|at| at >= start && at < end))
                .take(STANDUP_TITLES)
                .map(|t| t.task_id)
                .collect()
        };
        let (completed, failed) = (
            finished(TaskStatus::Completed),
            finished(TaskStatus::Failed),
        );
        let mut wanted = completed.clone();
        wanted.extend(&failed);
        let stored: HashMap<TaskId, StoredTask> = self
            .work
            .tasks(org, &wanted)
            .await?
            .into_iter()
            .map(|t| (t.header.task_id, t))
            .collect();
        let titles = |ids: &[TaskId]| -> Result<Vec<String>, EngineError> {
            let mut out = Vec::new();
            for id in ids {
                if let Some(t) = stored.get(id) {
                    if let Some(title) = plain(Some(views::title(&entry.cipher, t)?)) {
                        out.push(title);
                    }
                }
            }
            Ok(out)
        };
        let (completed, failed) = (titles(&completed)?, titles(&failed)?);
        if self.chat.is_some() {
            if let Some(body) = self
                .ask(standup::standup_prompt(headline, &completed, &failed))
                .await
                .map(|b| b.trim().to_owned())
                .filter(|b| !b.is_empty())
            {
                return Ok(body);
            }
        }
        Ok(standup::template_body(headline, &completed, &failed))
    }
}
