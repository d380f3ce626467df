//! Watching: opening an org's event stream (CONTRACT §10). The stream
//! itself is `crate::watch`; here what opening one checks and counts.

use std::sync::Arc;

use super::Engine;
use crate::api::WatchEvents;
use crate::domain::account::Caller;
use crate::domain::usage::RequestKind;
use crate::domain::watch::{resume_after, StreamFilter};
use crate::error::{EngineError, LimitExceeded, LimitKind};
use crate::watch::{EventStream, Opening, STREAMS_PER_KEY};

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
        let Some(permit) = self.inner.hub.admit_stream(caller.key_id) else {
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
}
