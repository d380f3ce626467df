//! The task API: create, update, get, list, claim.

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::{committed, Engine};
use crate::domain::account::{Caller, Encryption};
use crate::domain::order::ListKey;
use crate::domain::usage::RequestKind;
use crate::domain::validate::{self, ContentPolicy};
use crate::domain::{ListQuery, TaskId};
use crate::error::EngineError;
use crate::org::{CreatedItem, OrgMsg, UpdateResult};
use crate::views;

/// How many ancestors a claim's context shows.
const PARENT_CHAIN_DEPTH: usize = 3;

#[derive(Debug, Serialize)]
pub struct CreateResponse {
    pub created: usize,
    pub results: Vec<CreatedItem>,
}

#[derive(Debug, Serialize)]
pub struct UpdateResponse {
    pub updated: usize,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    pub results: Vec<UpdateResult>,
}

/// Which list a cursor belongs to, and where its page ended.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct CursorPayload {
    q: String,
    k: (i64, u8, i64, String),
}

fn query_fingerprint(q: &ListQuery) -> String {
    let statuses: Vec<&str> = q.statuses.iter().map(|s| s.as_str()).collect();
    json!([
        statuses,
        q.parent,
        q.assignee,
        q.tags,
        q.priority_max,
        q.full
    ])
    .to_string()
}

impl Engine {
    async fn content_policy(&self, caller: &Caller) -> Result<ContentPolicy, EngineError> {
        let entry = self.inner.directory.get(caller.org_id).await?;
        Ok(match entry.record.encryption {
            Encryption::Managed => ContentPolicy::Managed,
            Encryption::Byok => ContentPolicy::ClientEncrypted,
        })
    }

    pub async fn create_tasks(
        &self,
        caller: &Caller,
        body: &Value,
    ) -> Result<CreateResponse, EngineError> {
        // Admission comes first, as on every route; a batch counts its items.
        let count = body["tasks"]
            .as_array()
            .map_or(1, |items| items.len().clamp(1, validate::MAX_BATCH))
            as i64;
        self.admit(caller, RequestKind::Write, count, count).await?;
        let items = validate::create_tasks(body, self.content_policy(caller).await?)?;
        let (results, commit) = self
            .ask(caller.org_id, |r| {
                OrgMsg::CreateTasks(caller.clone(), items.clone(), r)
            })
            .await?;
        committed(commit).await?;
        Ok(CreateResponse {
            created: results.len(),
            results,
        })
    }

    pub async fn update_tasks(
        &self,
        caller: &Caller,
        body: &Value,
    ) -> Result<UpdateResponse, EngineError> {
        self.admit(caller, RequestKind::Write, 1, 0).await?;
        let items = validate::update_tasks(body, self.content_policy(caller).await?)?;
        let (outcome, commit) = self
            .ask(caller.org_id, |r| {
                OrgMsg::UpdateTasks(caller.clone(), items.clone(), r)
            })
            .await?;
        committed(commit).await?;
        Ok(UpdateResponse {
            updated: outcome.applied(),
            partial: outcome.partial(),
            results: outcome.results,
        })
    }

    pub async fn get_tasks(&self, caller: &Caller, body: &Value) -> Result<Value, EngineError> {
        self.admit(caller, RequestKind::Read, 1, 0).await?;
        let ids = validate::get_tasks(body)?;
        let org = caller.org_id;
        let entry = self.inner.directory.get(org).await?;
        let store = &self.inner.store;
        let mut found = store.tasks(org, &ids).await?;
        found.sort_by_key(|t| ids.iter().position(|id| *id == t.header.task_id));
        let mut blockers: Vec<TaskId> = found
            .iter()
            .flat_map(|t| t.header.blocked_by.iter().copied())
            .collect();
        blockers.sort();
        blockers.dedup();
        let statuses: std::collections::HashMap<TaskId, _> = store
            .task_headers(org, &blockers)
            .await?
            .into_iter()
            .map(|h| (h.task_id, h.status))
            .collect();
        let mut tasks = Vec::with_capacity(found.len());
        for t in &found {
            let mut m = views::full_task(&entry.cipher, t)?;
            let deps: Vec<Value> = t
                .header
                .blocked_by
                .iter()
                .filter_map(|b| statuses.get(b).map(|s| json!({"task_id": b, "status": s})))
                .collect();
            m.insert("dependencies".into(), Value::Array(deps));
            if ids.len() == 1 {
                let events = store.task_events(org, t.header.task_id).await?;
                let history = events
                    .iter()
                    .map(|e| views::event(&entry.cipher, e))
                    .collect::<Result<Vec<_>, _>>()?;
                m.insert("history".into(), Value::Array(history));
            }
            tasks.push(Value::Object(m));
        }
        let not_found: Vec<TaskId> = ids
            .iter()
            .filter(|id| !found.iter().any(|t| t.header.task_id == **id))
            .copied()
            .collect();
        Ok(json!({ "tasks": tasks, "count": found.len(), "not_found": not_found }))
    }

    pub async fn list_tasks(
        &self,
        caller: &Caller,
        params: &[(String, String)],
    ) -> Result<Value, EngineError> {
        self.admit(caller, RequestKind::Read, 1, 0).await?;
        let query = validate::list_query(params)?;
        let fingerprint = query_fingerprint(&query);
        let after = match &query.cursor {
            None => None,
            Some(token) => {
                let invalid = || EngineError::validation("Invalid pagination cursor");
                let payload = self.inner.cursors.verify(token).ok_or_else(invalid)?;
                let c: CursorPayload = serde_json::from_slice(&payload).map_err(|_| invalid())?;
                if c.q != fingerprint {
                    return Err(invalid());
                }
                Some(ListKey {
                    rank: c.k.0,
                    priority: c.k.1,
                    created_at: c.k.2,
                    task_id: c.k.3.parse().map_err(|_| invalid())?,
                })
            }
        };
        let entry = self.inner.directory.get(caller.org_id).await?;
        let mut page = self
            .inner
            .store
            .list_tasks(caller.org_id, &query, after, query.limit + 1)
            .await?;
        let more = page.len() > query.limit as usize;
        page.truncate(query.limit as usize);
        let next_cursor = match page.last() {
            Some(last) if more => {
                let h = &last.header;
                let payload = CursorPayload {
                    q: fingerprint,
                    k: (
                        h.status.rank(),
                        h.priority,
                        h.created_at,
                        h.task_id.to_string(),
                    ),
                };
                Value::String(
                    self.inner
                        .cursors
                        .sign(&serde_json::to_vec(&payload).expect("cursor serializes")),
                )
            }
            _ => Value::Null,
        };
        let tasks = page
            .iter()
            .map(|t| {
                if query.full {
                    views::full_task(&entry.cipher, t).map(Value::Object)
                } else {
                    views::lean_task(&entry.cipher, t)
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(json!({ "tasks": tasks, "next_cursor": next_cursor }))
    }

    /// Claims the next pending task; `None` when nothing matches.
    pub async fn claim(&self, caller: &Caller, body: &Value) -> Result<Option<Value>, EngineError> {
        self.admit(caller, RequestKind::Write, 1, 0).await?;
        let request = validate::claim(body)?;
        let claimed = self
            .ask(caller.org_id, |r| {
                OrgMsg::ClaimNext(caller.clone(), request.clone(), r)
            })
            .await?;
        let Some((claimed, commit)) = claimed else {
            return Ok(None);
        };
        let org = caller.org_id;
        let id = claimed.header.task_id;
        let store = &self.inner.store;
        // The claim changes only the header, which the actor handed back, so
        // the content can be read while the claim commits. A task created an
        // instant ago may not be committed yet: then read again after.
        let reader = &self.inner.reader;
        let (commit, read) = tokio::join!(committed(commit), reader.get(org, id));
        commit?;
        let mut task = match read? {
            Some(t) => t,
            None => reader
                .get(org, id)
                .await?
                .ok_or_else(|| EngineError::Internal("claimed task vanished".into()))?,
        };
        task.header = claimed.header.clone();
        let entry = self.inner.directory.get(org).await?;
        let mut m = views::full_task(&entry.cipher, &task)?;
        m.insert("lease_id".into(), json!(claimed.lease.lease_id));
        m.insert(
            "lease_expires_at".into(),
            json!(crate::clock::format_ms(claimed.lease.expires_at)),
        );
        m.insert("lease_seconds".into(), json!(claimed.lease.seconds));
        if request.include_context {
            let mut chain = Vec::new();
            let mut next = task.header.parent;
            while let Some(parent) = next.filter(|_| chain.len() < PARENT_CHAIN_DEPTH) {
                let Some(p) = store.tasks(org, &[parent]).await?.pop() else {
                    break;
                };
                let full = views::full_task(&entry.cipher, &p)?;
                chain.push(pick(&full, &["task_id", "title", "description", "status"]));
                next = p.header.parent;
            }
            let mut blockers = Vec::new();
            for b in store.tasks(org, &task.header.blocked_by).await? {
                let full = views::full_task(&entry.cipher, &b)?;
                blockers.push(pick(&full, &["task_id", "title", "status", "output"]));
            }
            m.insert(
                "context".into(),
                json!({ "parent_chain": chain, "blockers": blockers }),
            );
        }
        Ok(Some(Value::Object(m)))
    }
}

fn pick(m: &Map<String, Value>, keys: &[&str]) -> Value {
    Value::Object(
        keys.iter()
            .map(|k| ((*k).to_owned(), m.get(*k).cloned().unwrap_or(Value::Null)))
            .collect(),
    )
}
