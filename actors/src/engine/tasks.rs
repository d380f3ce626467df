//! The task API: create, update, get, list, claim.

use std::collections::HashMap;
use std::time::Duration;

use super::Engine;
use super::InFlight;
use crate::api::{
    BlockerLink, ClaimAnswer, ClaimContext, ClaimRequest, ClaimedTask, ClaimedTasks, CreateAnswer,
    CreateTasks, Dependency, GetAnswer, GetTasks, ListAnswer, ListTasks, ListedTask, ParentLink,
    PriorArt, TaskDetail, UpdateAnswer, UpdateTasks,
};
use crate::crypto::OrgCipher;
use crate::domain::account::Caller;
use crate::domain::order::ListKey;
use crate::domain::usage::RequestKind;
use crate::domain::{OrgId, StoredTask, TaskId};
use crate::error::EngineError;
use crate::org::{ClaimTicket, OrgMsg, Outcome, Reply};
use crate::reader::Answer;
use crate::views;

/// How many ancestors a claim's context shows.
const PARENT_CHAIN_DEPTH: usize = 3;
/// Whole tasks a full listing reads at a time (one may carry ~200 KB).
const FULL_ROWS_PER_READ: usize = 16;
/// Sealed content a full page carries before it ends early; its
/// `next_cursor` goes on from there.
pub const FULL_PAGE_BYTES: usize = 4 * 1024 * 1024;

/// Which list a cursor belongs to, and where its page ended.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct CursorPayload {
    q: String,
    k: (i64, u8, i64, String),
}

/// The part of a list query a cursor is bound to: the filters and `full`.
fn query_fingerprint(q: &ListTasks) -> String {
    let statuses: Vec<&str> = q.statuses.iter().map(|s| s.as_str()).collect();
    serde_json::json!([
        statuses,
        q.parent,
        q.assignee,
        q.tags,
        q.priority_max,
        q.full,
        q.waiting
    ])
    .to_string()
}

/// The tasks of one list page as they are gathered, in list order: at most
/// `limit`, and for a full listing, sealed content of at most
/// [`FULL_PAGE_BYTES`] (but always at least one task).
struct Page<'a> {
    full: bool,
    limit: usize,
    cipher: &'a OrgCipher,
    tasks: Vec<ListedTask>,
    bytes: usize,
    /// The engine's time: a lean item shows `run_at` while it is ahead.
    now: i64,
}

impl<'a> Page<'a> {
    fn new(query: &ListTasks, cipher: &'a OrgCipher, now: i64) -> Self {
        let limit = query.limit as usize;
        Self {
            full: query.full,
            limit,
            cipher,
            tasks: Vec::with_capacity(limit.min(FULL_ROWS_PER_READ)),
            bytes: 0,
            now,
        }
    }

    fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Adds `row`, or answers false when the page is already full.
    fn push(&mut self, row: &StoredTask) -> Result<bool, EngineError> {
        let size = row.content_len();
        if self.tasks.len() == self.limit
            || (self.full && !self.tasks.is_empty() && self.bytes + size > FULL_PAGE_BYTES)
        {
            return Ok(false);
        }
        self.bytes += size;
        self.tasks.push(if self.full {
            ListedTask::Full(Box::new(views::task_view(self.cipher, row)?))
        } else {
            ListedTask::Lean(views::task_summary(self.cipher, row, self.now)?)
        });
        Ok(true)
    }
}

impl Engine {
    pub async fn create_tasks(
        &self,
        caller: &Caller,
        request: CreateTasks,
    ) -> Result<CreateAnswer, EngineError> {
        let mut results = self
            .request(caller.org_id, |reply| OrgMsg::CreateTasks {
                caller: caller.clone(),
                request: request.clone(),
                reply,
            })
            .await?;
        self.enrich_created(caller.org_id, &mut results).await;
        Ok(CreateAnswer {
            created: results.len(),
            results,
        })
    }

    pub async fn update_tasks(
        &self,
        caller: &Caller,
        request: UpdateTasks,
    ) -> Result<UpdateAnswer, EngineError> {
        let results = self
            .request(caller.org_id, |reply| OrgMsg::UpdateTasks {
                caller: caller.clone(),
                request: request.clone(),
                reply,
            })
            .await?;
        let reworded = request
            .updates
            .iter()
            .filter(|u| u.title.is_some() || u.description.is_some())
            .map(|u| u.task_id)
            .collect();
        self.note_words(caller.org_id, reworded).await;
        Ok(UpdateAnswer::new(results))
    }

    pub async fn get_tasks(
        &self,
        caller: &Caller,
        request: GetTasks,
    ) -> Result<GetAnswer, EngineError> {
        self.check_store()?;
        self.admit(caller, RequestKind::Read).await?;
        let ids = request.task_ids;
        let org = caller.org_id;
        let entry = self.inner.directory.get(org).await?;
        let store = &self.inner.store;
        let found = self.stored(store.tasks(org, &ids).await)?;
        let mut blockers: Vec<TaskId> = found
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
        let mut tasks = Vec::with_capacity(found.len());
        for t in &found {
            let dependencies = t
                .header
                .blocked_by
                .iter()
                .filter_map(|b| {
                    statuses.get(b).map(|status| Dependency {
                        task_id: *b,
                        status: *status,
                    })
                })
                .collect();
            let history = if ids.len() == 1 {
                let events = self.stored(store.task_events(org, t.header.task_id).await)?;
                Some(
                    events
                        .iter()
                        .map(|e| views::event(&entry.cipher, e))
                        .collect::<Result<Vec<_>, _>>()?,
                )
            } else {
                None
            };
            tasks.push(TaskDetail {
                task: views::task_view(&entry.cipher, t)?,
                dependencies,
                history,
            });
        }
        let not_found = ids
            .iter()
            .filter(|id| !found.iter().any(|t| t.header.task_id == **id))
            .copied()
            .collect();
        Ok(GetAnswer {
            count: found.len(),
            tasks,
            not_found,
        })
    }

    pub async fn list_tasks(
        &self,
        caller: &Caller,
        query: ListTasks,
    ) -> Result<ListAnswer, EngineError> {
        self.check_store()?;
        let fingerprint = query_fingerprint(&query);
        let after = match &query.cursor {
            None => None,
            Some(token) => {
                let invalid = || EngineError::invalid("Invalid pagination cursor");
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
        let org = caller.org_id;
        let entry = self.inner.directory.get(org).await?;
        let limit = query.limit as usize;
        // Open tasks come first in list order and the org actor holds them
        // all: it answers their order (and admits the request); the store
        // answers their content, and the finished tasks after them.
        let open = self
            .request(org, |reply| OrgMsg::ListOpen {
                query: query.clone(),
                after,
                limit: limit + 1,
                reply,
            })
            .await?;
        let mut page = Page::new(&query, &entry.cipher, self.now());
        let mut after = after;
        // Whole tasks are read a few at a time and the page ends early at a
        // byte budget, so a page of large tasks never sits in memory at once.
        let more = 'page: {
            let chunk = if query.full {
                FULL_ROWS_PER_READ
            } else {
                limit + 1
            };
            for keys in open.chunks(chunk) {
                let ids: Vec<TaskId> = keys.iter().map(|k| k.task_id).collect();
                let mut rows: HashMap<TaskId, StoredTask> = self
                    .stored(self.inner.store.tasks(org, &ids).await)?
                    .into_iter()
                    .map(|t| (t.header.task_id, t))
                    .collect();
                // A task missing here was created by a write not yet
                // committed: it is not listed until it is.
                for key in keys {
                    if let Some(row) = rows.remove(&key.task_id) {
                        if !page.push(&row)? {
                            break 'page true;
                        }
                        after = Some(*key);
                    }
                }
            }
            if open.len() > limit {
                // More open tasks follow, behind rows not yet committed.
                break 'page true;
            }
            loop {
                let room = limit - page.len() + 1;
                let want = if query.full {
                    FULL_ROWS_PER_READ.min(room)
                } else {
                    room
                };
                let rows = self.stored(
                    self.inner
                        .store
                        .list_finished_tasks(org, &query, after, want as u32)
                        .await,
                )?;
                let fetched = rows.len();
                for row in rows {
                    if !page.push(&row)? {
                        break 'page true;
                    }
                    after = Some(ListKey::of(&row.header));
                }
                if fetched < want {
                    break 'page false;
                }
            }
        };
        let tasks = page.tasks;
        let next_cursor = match after {
            Some(k) if more => {
                let payload = CursorPayload {
                    q: fingerprint,
                    k: (k.rank, k.priority, k.created_at, k.task_id.to_string()),
                };
                Some(
                    self.inner
                        .cursors
                        .sign(&serde_json::to_vec(&payload).expect("cursor serializes")),
                )
            }
            _ => None,
        };
        Ok(ListAnswer { tasks, next_cursor })
    }

    /// Claims the next pending task; `None` when nothing matches. A
    /// `count` in the request is ignored: see [`Engine::claim_answer`].
    pub async fn claim(
        &self,
        caller: &Caller,
        request: ClaimRequest,
    ) -> Result<Option<ClaimedTask>, EngineError> {
        let request = ClaimRequest {
            count: None,
            ..request
        };
        Ok(self.claim_tasks(caller, request).await?.pop())
    }

    /// `POST /tasks/claim` as the contract answers it: without `count`, the
    /// task or `None`; with it, up to `count` tasks, each with its own lease.
    pub async fn claim_answer(
        &self,
        caller: &Caller,
        request: ClaimRequest,
    ) -> Result<ClaimAnswer, EngineError> {
        let batch = request.count.is_some();
        let mut tasks = self.claim_tasks(caller, request).await?;
        Ok(if batch {
            ClaimAnswer::Batch(ClaimedTasks { tasks })
        } else {
            ClaimAnswer::One(tasks.pop().map(Box::new))
        })
    }

    /// Claims up to `request.limit()` tasks in one turn of the org actor
    /// and one commit, and answers them in claim order.
    async fn claim_tasks(
        &self,
        caller: &Caller,
        request: ClaimRequest,
    ) -> Result<Vec<ClaimedTask>, EngineError> {
        let org = caller.org_id;
        let asked = self
            .ask_waiting(org, request.wait_seconds, |reply| OrgMsg::ClaimNext {
                caller: caller.clone(),
                request: request.clone(),
                reply,
            })
            .await;
        let (Outcome { result, commit }, _in_flight) = asked?;
        let mut claimed = match result {
            Ok(claimed) if !claimed.is_empty() => claimed,
            other => {
                self.committed(commit).await?;
                return other.map(|_| Vec::new());
            }
        };
        // A claim changes only headers, which the actor handed back with
        // the content it still had; the rest is read while the claim
        // commits. A task created an instant ago may not be committed yet:
        // then read again after. Every read is queued before any is
        // awaited, so one query serves them.
        let reader = &self.inner.reader;
        let kept: Vec<Option<Box<StoredTask>>> =
            claimed.iter_mut().map(|c| c.content.take()).collect();
        let reads = async {
            let mut asked = Vec::with_capacity(claimed.len());
            for (c, kept) in claimed.iter().zip(kept) {
                asked.push(match kept {
                    Some(content) => Ok(Answer::known(content)),
                    None => reader.ask(org, c.header.task_id).await,
                });
            }
            let mut found = Vec::with_capacity(asked.len());
            for answer in asked {
                found.push(match answer {
                    Ok(answer) => answer.wait().await,
                    Err(e) => Err(e),
                });
            }
            found
        };
        let prior_art = async {
            let mut found = Vec::new();
            if !request.include_context {
                return found;
            }
            for c in &claimed {
                found.push(
                    self.prior_art(org, c.header.task_id)
                        .await
                        .unwrap_or_else(|e| {
                            tracing::debug!(%org, error = %e, "claim context without prior art");
                            None
                        }),
                );
            }
            found
        };
        let (commit, reads, prior_art) = tokio::join!(self.committed(commit), reads, prior_art);
        commit?;
        let entry = self.inner.directory.get(org).await?;
        let mut prior_art = prior_art.into_iter();
        let mut tasks = Vec::with_capacity(claimed.len());
        // Held until every answer is built: a failure undoes them all.
        let mut tickets = Vec::with_capacity(claimed.len());
        for (claimed, read) in claimed.into_iter().zip(reads) {
            tickets.push(claimed.ticket);
            let id = claimed.header.task_id;
            let mut task = match self.stored(read)? {
                Some(t) => t,
                None => self
                    .stored(reader.get(org, id).await)?
                    .ok_or_else(|| EngineError::Internal("claimed task vanished".into()))?,
            };
            task.header = claimed.header;
            let context = if request.include_context {
                let prior_art = prior_art.next().flatten();
                Some(
                    self.claim_context(org, &entry.cipher, &task, prior_art)
                        .await?,
                )
            } else {
                None
            };
            tasks.push(ClaimedTask {
                task: views::task_view(&entry.cipher, &task)?,
                lease_id: claimed.lease.lease_id,
                context,
            });
        }
        tickets.into_iter().for_each(ClaimTicket::handed_over);
        Ok(tasks)
    }

    /// A claimed task's briefing: its parent chain, its blockers with their
    /// outputs, prior art and the best runbook.
    async fn claim_context(
        &self,
        org: OrgId,
        cipher: &OrgCipher,
        task: &StoredTask,
        prior_art: Option<Vec<PriorArt>>,
    ) -> Result<ClaimContext, EngineError> {
        let store = &self.inner.store;
        let mut parent_chain = Vec::new();
        let mut next = task.header.parent;
        while let Some(parent) = next.filter(|_| parent_chain.len() < PARENT_CHAIN_DEPTH) {
            let Some(p) = self.stored(store.tasks(org, &[parent]).await)?.pop() else {
                break;
            };
            parent_chain.push(ParentLink {
                task_id: p.header.task_id,
                title: views::title(cipher, &p)?,
                description: views::description(cipher, &p)?,
                status: p.header.status,
            });
            next = p.header.parent;
        }
        let mut blockers = Vec::new();
        for b in self.stored(store.tasks(org, &task.header.blocked_by).await)? {
            blockers.push(BlockerLink {
                task_id: b.header.task_id,
                title: views::title(cipher, &b)?,
                status: b.header.status,
                output: views::output(cipher, &b)?,
            });
        }
        let title = views::title(cipher, task)?;
        let runbook = self
            .runbook_context(org, task.header.task_id, &title)
            .await
            .unwrap_or_else(|e| {
                tracing::debug!(%org, error = %e, "claim context without a runbook");
                None
            });
        Ok(ClaimContext {
            parent_chain,
            blockers,
            prior_art,
            runbook,
        })
    }
}

impl Engine {
    /// `ask_within`, for a message the actor holds up to `wait_seconds`
    /// (a long-poll claim, a wait for tasks): if the caller goes away
    /// meanwhile, the actor is told at once.
    pub(super) async fn ask_waiting<T: Send + 'static>(
        &self,
        org: OrgId,
        wait_seconds: u32,
        message: impl Fn(Reply<T>) -> OrgMsg,
    ) -> Result<(Outcome<T>, InFlight), EngineError> {
        let waiting = Waiting {
            engine: self,
            org,
            armed: wait_seconds > 0,
        };
        let wait = Duration::from_secs(u64::from(wait_seconds));
        let asked = self.ask_within(org, wait, message).await;
        waiting.answered();
        asked
    }
}

/// A waiting claim (or wait for tasks) in flight: if its caller goes away
/// (the request's future is dropped), the actor is told at once, so its
/// waiter leaves the queue and the waiting gauge now, not at the actor's
/// next look.
struct Waiting<'a> {
    engine: &'a Engine,
    org: OrgId,
    armed: bool,
}

impl Waiting<'_> {
    fn answered(mut self) {
        self.armed = false;
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.armed {
            if let Some(route) = self.engine.inner.routes.get(&self.org) {
                let _ = route.actor.cast(OrgMsg::WaiterGone);
            }
        }
    }
}
