//! One client's event stream: the history it asks for, then the live
//! events, each once and in id order, with a keep-alive while nothing
//! happens.
//!
//! Without a gap: the stream subscribes to the org's live events before it
//! reads any history (the engine does, when it opens the stream), then
//! replays from the store every event after the client's last id, page by
//! page, then goes on with the live events whose id is above the last one
//! replayed. An event that commits while the history is read is in the
//! live channel, and perhaps in the history too: the ids tell. No event
//! is missed because an org's ids rise in its commit order (see
//! `store::events`): everything with a smaller id than one read was
//! already committed.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;

use super::hub::{EventHub, Live, StreamPermit};
use crate::api::{EventBody, EventData, EventKind, Timestamp, TransitionData};
use crate::clock::Clock;
use crate::domain::watch::{event_name, StreamFilter};
use crate::domain::webhooks::EventType;
use crate::domain::{OrgId, TaskId, TaskStatus};
use crate::store::{LoggedEvent, Store};

/// How long a stream stays silent before it sends a comment (CONTRACT §10).
pub const KEEP_ALIVE_MS: i64 = 15_000;

/// Events read from the store at a time while replaying.
const REPLAY_PAGE: i64 = 500;

/// What a stream sends next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamItem {
    Event(StreamEvent),
    /// A comment, so that the connection is seen to be alive.
    KeepAlive,
}

/// One event as it goes out: its id, its name (`None`: an unnamed event,
/// see `domain::watch::event_name`) and its data, the §7 body as JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEvent {
    pub id: i64,
    pub name: Option<&'static str>,
    pub data: String,
}

pub struct EventStream {
    org: OrgId,
    store: Store,
    filter: StreamFilter,
    hub: Arc<EventHub>,
    live: Option<Live>,
    /// While replaying: the id of the last event read from the store.
    replay_after: Option<i64>,
    backlog: VecDeque<LoggedEvent>,
    /// The last id sent or passed over: live events up to it are repeats.
    last_id: i64,
    clock: Arc<dyn Clock>,
    clock_moves: watch::Receiver<u64>,
    /// When the stream last sent something, by the engine's clock.
    sent_at: i64,
    _permit: StreamPermit,
}

/// What opens a stream, besides its filter.
pub struct Opening {
    pub org: OrgId,
    pub store: Store,
    pub hub: Arc<EventHub>,
    pub live: Live,
    pub clock: Arc<dyn Clock>,
    pub permit: StreamPermit,
}

impl EventStream {
    /// A stream of what `live` receives from now on, after the history
    /// past `after` (none when `None`).
    pub fn new(opening: Opening, filter: StreamFilter, after: Option<i64>) -> Self {
        let Opening {
            org,
            store,
            hub,
            live,
            clock,
            permit,
        } = opening;
        let clock_moves = hub.clock_moves();
        let sent_at = clock.now_ms();
        Self {
            org,
            store,
            filter,
            hub,
            live: Some(live),
            replay_after: after,
            backlog: VecDeque::new(),
            last_id: after.unwrap_or(0),
            clock,
            clock_moves,
            sent_at,
            _permit: permit,
        }
    }

    /// The next thing to send; `None` when the stream ends (the client fell
    /// too far behind, the org's commit failed or it moved, the server is
    /// stopping, or the store failed during the replay).
    pub async fn next(&mut self) -> Option<StreamItem> {
        loop {
            if let Some(event) = self.backlog.pop_front() {
                if let Some(item) = self.outgoing(&event) {
                    return Some(item);
                }
                continue;
            }
            if let Some(after) = self.replay_after {
                let page = match self
                    .store
                    .org_events_after(self.org, after, REPLAY_PAGE)
                    .await
                {
                    Ok(page) => page,
                    Err(e) => {
                        tracing::warn!(org_id = %self.org, error = %e, "replaying an event stream failed; it ends");
                        return None;
                    }
                };
                self.replay_after = match page.last() {
                    Some(last) if page.len() as i64 == REPLAY_PAGE => Some(last.event_id),
                    _ => None,
                };
                if let Some(last) = page.last() {
                    self.last_id = self.last_id.max(last.event_id);
                }
                self.backlog.extend(page);
                continue;
            }
            return self.next_live().await;
        }
    }

    async fn next_live(&mut self) -> Option<StreamItem> {
        loop {
            let quiet = self.clock.now_ms() - self.sent_at;
            if quiet >= KEEP_ALIVE_MS {
                self.sent_at = self.clock.now_ms();
                return Some(StreamItem::KeepAlive);
            }
            let due = Duration::from_millis(u64::try_from(KEEP_ALIVE_MS - quiet).unwrap_or(0));
            let live = self.live.as_mut()?;
            tokio::select! {
                received = live.recv() => match received {
                    Ok(event) => {
                        if event.event_id <= self.last_id {
                            continue;
                        }
                        self.last_id = event.event_id;
                        if let Some(item) = self.outgoing(&event) {
                            return Some(item);
                        }
                    }
                    Err(RecvError::Lagged(_) | RecvError::Closed) => return None,
                },
                () = tokio::time::sleep(due) => {}
                moved = self.clock_moves.changed() => {
                    if moved.is_err() {
                        // The hub is gone with the engine.
                        return None;
                    }
                }
            }
        }
    }

    /// The event as the client sees it, if the filter keeps it.
    fn outgoing(&mut self, event: &LoggedEvent) -> Option<StreamItem> {
        let task: TaskId = event.task_id.parse().ok()?;
        let from = match &event.from_status {
            Some(s) => Some(TaskStatus::parse(s)?),
            None => None,
        };
        let to = TaskStatus::parse(&event.to_status)?;
        let expired = event.lease_expired();
        if !self.filter.keeps(task, from, to, expired) {
            return None;
        }
        let name = event_name(from, to, expired);
        let body = EventBody {
            kind: EventKind::from(name),
            timestamp: Timestamp(event.at),
            data: EventData::Transition(TransitionData {
                org_id: self.org.to_string(),
                task_id: event.task_id.clone(),
                from_status: from,
                to_status: to,
                agent_id: event.agent_id.clone(),
            }),
        };
        self.sent_at = self.clock.now_ms();
        Some(StreamItem::Event(StreamEvent {
            id: event.event_id,
            name: (name != EventType::StatusChanged).then(|| name.as_str()),
            // A body of plain data always serializes.
            data: serde_json::to_string(&body).unwrap_or_default(),
        }))
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        drop(self.live.take());
        self.hub.unsubscribed(self.org);
    }
}
