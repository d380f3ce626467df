//! Watching (CONTRACT §10): opening an org's event stream, and waiting
//! for tasks. The stream itself is `crate::watch`; here what opening one
//! checks and counts. A wait is held by the org's actor (`org::waiters`);
//! here its answer is read from the store once the actor lets it go.

use super::Engine;
use crate::api::{Timestamp, WaitAnswer, WaitTasks, WaitedTask, WatchEvents};
use crate::domain::account::Caller;
use crate::domain::usage::RequestKind;
use crate::domain::watch::{resume_after, StreamFilter};
use crate::error::{EngineError, LimitExceeded, LimitKind};
use crate::org::OrgMsg;
use crate::watch::{EventStream, Opening, STREAMS_PER_KEY};
use std::collections::HashMap;
use std::sync::Arc;

impl Engine {
    /// Opens the caller's org's event stream, after `last_event_id` (the
    /// `Last-Event-ID` header) or the query's `since`. Opening counts as
    /// one read; a key holds at most [`STREAMS_PER_KEY`] open. With several
    /// nodes only the org's owner serves it (the others forward it), since
    /// only the owner's writer commits its events.
    pub async fn watch_events(
        &self,
        caller: &Caller,
        query: WatchEvents,
        last_event_id: Option<&str>,
    ) -> Result<EventStream, EngineError> {
        self.check_store()?;
        let opened = StreamFilter::parse(query.types.as_deref(), query.task_id.as_deref())
            .and_then(|filter| {
                let since = query.since.map(|s| s.to_string());
                Ok((filter, resume_after(last_event_id, since.as_deref())?))
            });
        let (filter, after) = match opened {
            Ok(opened) => opened,
            Err(e) => return Err(self.reject_as(caller, RequestKind::Read, None, e).await),
        };
        let org = caller.org_id;
        if let Some(cluster) = &self.inner.cluster {
            if !cluster.serves(org) {
                return Err(cluster.refusal());
            }
        }
        self.admit(caller, RequestKind::Read).await?;
        let Some(permit) = self
            .inner
            .hub
            .admit_stream(caller.key_id().ok_or(EngineError::InvalidApiKey)?)
        else {
            let entry = self.inner.directory.get(org).await?;
            return Err(EngineError::Limit(LimitExceeded {
                kind: LimitKind::Streams,
                limit: STREAMS_PER_KEY as i64,
                tier: entry.record.tier,
                resets: None,
                retry_after: None,
            }));
        };
        let live = self.inner.hub.subscribe(org);
        Ok(EventStream::new(
            Opening {
                org,
                store: self.inner.store.clone(),
                hub: Arc::clone(&self.inner.hub),
                live,
                clock: self.inner.clock.clone(),
                permit,
            },
            filter,
            after,
        ))
    }

    /// `POST /tasks/wait`: holds until all (or any) of the tasks found are
    /// finished or the wait runs out, then answers where each stands as
    /// committed. The actor releases a wait right after it submitted the
    /// change that settled it; the barrier waits for that commit.
    pub async fn wait_tasks(
        &self,
        caller: &Caller,
        request: WaitTasks,
    ) -> Result<WaitAnswer, EngineError> {
        let org = caller.org_id;
        let (outcome, _in_flight) = self
            .ask_waiting(org, request.wait_seconds, |reply| OrgMsg::WaitTasks {
                caller: caller.clone(),
                request: request.clone(),
                reply,
            })
            .await?;
        self.committed(outcome.commit).await?;
        outcome.result?;
        self.stored(self.inner.writers.barrier(org).await)?;
        let headers = self.stored(self.inner.store.task_headers(org, &request.task_ids).await)?;
        let mut by_id: HashMap<_, _> = headers.into_iter().map(|h| (h.task_id, h)).collect();
        let mut tasks = Vec::with_capacity(by_id.len());
        let mut not_found = Vec::new();
        for id in &request.task_ids {
            match by_id.remove(id) {
                Some(h) => tasks.push(WaitedTask {
                    task_id: h.task_id,
                    status: h.status,
                    updated_at: Timestamp(h.updated_at),
                }),
                None => not_found.push(*id),
            }
        }
        let finished = tasks.iter().filter(|t| t.status.is_terminal()).count();
        Ok(WaitAnswer {
            done: request.until.holds(tasks.len(), finished),
            tasks,
            not_found,
        })
    }
}
