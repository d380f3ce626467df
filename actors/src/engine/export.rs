//! An org's export (`GET /admin/orgs/{id}/export`): one JSON object a line,
//! each with its `kind`, in a fixed order: the org, its tags, teams,
//! members (no key material), schedules, webhooks (no secret), then every
//! task as `POST /tasks/get` shows one, with its history. The lines are
//! made a page of tasks at a time into a bounded channel that the answer's
//! body drains, so memory stays flat whatever the org's size. Content is
//! shown as the API shows it: plain for a managed org, the envelopes as
//! stored for a BYOK org.

use std::collections::HashMap;

use serde::Serialize;
use tokio::sync::mpsc;

use super::Engine;
use crate::api::{Dependency, MemberView, OrgView, TagView, TaskDetail, TeamView, Timestamp};
use crate::directory::OrgEntry;
use crate::domain::{OrgId, TaskId};
use crate::error::EngineError;
use crate::views;

/// Tasks read in one page.
const PAGE: usize = 200;
/// Lines made ahead of the reader.
const AHEAD: usize = 64;

/// A line of the export: its kind, then the record's own fields.
fn line(kind: &str, record: &impl Serialize) -> Result<String, EngineError> {
    let mut value = serde_json::to_value(record)
        .map_err(|e| EngineError::Internal(format!("exporting a {kind}: {e}")))?;
    let fields = value
        .as_object_mut()
        .ok_or_else(|| EngineError::Internal(format!("a {kind} is not an object")))?;
    let mut out = serde_json::Map::with_capacity(fields.len() + 1);
    out.insert("kind".into(), kind.into());
    out.extend(std::mem::take(fields));
    let mut text = serde_json::Value::Object(out).to_string();
    text.push('\n');
    Ok(text)
}

type Lines = mpsc::Sender<Result<String, EngineError>>;

impl Engine {
    /// The export's lines, made in the background as they are read; an
    /// error ends them. `NotFound` at once for no such org.
    pub async fn export_org(
        &self,
        org: OrgId,
    ) -> Result<mpsc::Receiver<Result<String, EngineError>>, EngineError> {
        self.check_store()?;
        let entry = self.inner.directory.get(org).await?;
        let (tx, rx) = mpsc::channel(AHEAD);
        let engine = self.clone();
        tokio::spawn(async move {
            if let Err(e) = engine.export_into(&entry, &tx).await {
                let _ = tx.send(Err(e)).await;
            }
        });
        Ok(rx)
    }

    async fn export_into(&self, entry: &OrgEntry, tx: &Lines) -> Result<(), EngineError> {
        let org = entry.record.org_id;
        let send = |text: String| async move {
            // The reader went away: nothing more to make.
            tx.send(Ok(text))
                .await
                .map_err(|_| EngineError::Internal("export abandoned".into()))
        };
        send(line("org", &OrgView::from(&entry.record))?).await?;
        let records = self.stored(self.inner.store.load_org(org).await)?;
        for tag in &records.tags {
            send(line("tag", &TagView::from(tag))?).await?;
        }
        for team in &records.teams {
            send(line("team", &TeamView::from(team))?).await?;
        }
        let teams: HashMap<&str, &Vec<String>> = records
            .teams
            .iter()
            .map(|t| (t.name.as_str(), &t.tags))
            .collect();
        for m in &records.members {
            let mut team_tags: Vec<String> = records
                .memberships
                .iter()
                .filter(|ms| ms.email == m.email)
                .filter_map(|ms| teams.get(ms.team.as_str()))
                .flat_map(|tags| tags.iter().cloned())
                .collect();
            team_tags.sort();
            team_tags.dedup();
            let view = MemberView {
                email: m.email.clone(),
                role: m.role,
                profile_tags: m.profile_tags.clone(),
                team_tags,
                seated: m.seated,
                joined_at: Timestamp(m.joined_at),
            };
            send(line("member", &view)?).await?;
        }
        for s in &records.schedules {
            send(line(
                "schedule",
                &super::schedules::view(&entry.cipher, s)?,
            )?)
            .await?;
        }
        for w in &records.webhooks {
            send(line("webhook", &super::webhooks::view(w))?).await?;
        }
        drop(records);
        let mut after: Option<TaskId> = None;
        loop {
            let store = &self.inner.store;
            let ids = self.stored(store.task_ids_after(org, after, PAGE).await)?;
            let Some(last) = ids.last().copied() else {
                return Ok(());
            };
            after = Some(last);
            let tasks = self.stored(store.tasks(org, &ids).await)?;
            let mut blockers: Vec<TaskId> = tasks
                .iter()
                .flat_map(|t| t.header.blocked_by.iter().copied())
                .collect();
            blockers.sort();
            blockers.dedup();
            let statuses: HashMap<TaskId, _> = self
                .stored(store.task_headers(org, &blockers).await)?
                .into_iter()
                .map(|h| (h.task_id, h.status))
                .collect();
            for t in &tasks {
                let events = self.stored(store.task_events(org, t.header.task_id).await)?;
                let detail = TaskDetail {
                    task: views::task_view(&entry.cipher, t)?,
                    dependencies: t
                        .header
                        .blocked_by
                        .iter()
                        .filter_map(|b| {
                            statuses.get(b).map(|status| Dependency {
                                task_id: *b,
                                status: *status,
                            })
                        })
                        .collect(),
                    history: Some(
                        events
                            .iter()
                            .map(|e| views::event(&entry.cipher, e))
                            .collect::<Result<Vec<_>, _>>()?,
                    ),
                };
                send(line("task", &detail)?).await?;
            }
        }
    }
}
