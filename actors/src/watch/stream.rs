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

use super::hub::{CommitEvents, EventHub, FeedEvent, Live, StreamPermit};
use super::keep_alive::KeepAlive;
use crate::clock::Clock;
use crate::domain::watch::StreamFilter;
use crate::domain::OrgId;
use crate::store::Store;

/// Events read from the store at a time while replaying.
const REPLAY_PAGE: i64 = 500;

/// About how many bytes of bodies one wake of a stream sends at most: what
/// is ready beyond it waits for the next.
const SEND_CAP: usize = 256 * 1024;

/// What a stream sends next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamItem {
    /// Every event ready when the stream woke (one at least, in id
    /// order, up to about [`SEND_CAP`] bytes), to be written at once.
    Events(Vec<StreamEvent>),
    /// A comment, so that the connection is seen to be alive.
    KeepAlive,
}

/// One event as it goes out: its id, its name (`None`: an unnamed event,
/// see `domain::watch::event_name`) and its data, the §7 body as JSON on
/// one line, shared by every stream of the org.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEvent {
    pub id: i64,
    pub name: Option<&'static str>,
    pub data: Arc<str>,
}

pub struct EventStream {
    org: OrgId,
    store: Store,
    filter: StreamFilter,
    hub: Arc<EventHub>,
    live: Option<Live>,
    /// While replaying: the id of the last event read from the store.
    replay_after: Option<i64>,
    backlog: VecDeque<FeedEvent>,
    /// A live entry taken and not sent to its end, and where its rest starts.
    taken: Option<(Arc<CommitEvents>, usize)>,
    /// The last id sent or passed over: live events up to it are repeats.
    last_id: i64,
    /// The live events ended (sent what came before the end first).
    ended: bool,
    keep_alive: KeepAlive,
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
        let keep_alive = KeepAlive::new(&hub, clock);
        Self {
            org,
            store,
            filter,
            hub,
            live: Some(live),
            replay_after: after,
            backlog: VecDeque::new(),
            taken: None,
            last_id: after.unwrap_or(0),
            ended: false,
            keep_alive,
            _permit: permit,
        }
    }

    /// What to send next; `None` when the stream ends (the client fell
    /// too far behind, the org's commit failed or it moved, the server is
    /// stopping, or the store failed during the replay).
    pub async fn next(&mut self) -> Option<StreamItem> {
        loop {
            let mut out = Outgoing::default();
            while let Some(event) = self.backlog.pop_front() {
                if !self.keep(&event, &mut out) {
                    self.backlog.push_front(event);
                    break;
                }
            }
            if !out.events.is_empty() {
                return Some(self.sent(out));
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
                self.backlog.extend(page.iter().map(FeedEvent::logged));
                continue;
            }
            return self.next_live().await;
        }
    }

    async fn next_live(&mut self) -> Option<StreamItem> {
        loop {
            let mut out = Outgoing::default();
            self.take_ready(&mut out);
            if !out.events.is_empty() {
                return Some(self.sent(out));
            }
            if self.ended {
                return None;
            }
            let live = self.live.as_mut()?;
            tokio::select! {
                received = live.recv() => match received {
                    Ok(entry) => self.taken = Some((entry, 0)),
                    Err(_) => self.ended = true,
                },
                due = self.keep_alive.due() => {
                    // `None`: the hub is gone with the engine.
                    due?;
                    return Some(StreamItem::KeepAlive);
                }
            }
        }
    }

    /// The live events there are without waiting, up to the cap: the rest
    /// of an entry taken, then the entries waiting in the channel.
    fn take_ready(&mut self, out: &mut Outgoing) {
        loop {
            if let Some((entry, from)) = self.taken.take() {
                for (at, event) in entry.events.iter().enumerate().skip(from) {
                    if event.id <= self.last_id {
                        continue;
                    }
                    if !self.keep(event, out) {
                        self.taken = Some((entry, at));
                        return;
                    }
                    self.last_id = event.id;
                }
            }
            if self.ended {
                return;
            }
            let Some(live) = self.live.as_mut() else {
                return;
            };
            match live.try_recv() {
                Ok(Some(entry)) => self.taken = Some((entry, 0)),
                Ok(None) => return,
                Err(_) => {
                    self.ended = true;
                    return;
                }
            }
        }
    }

    /// Adds the event to what goes out if the filter keeps it; `false`,
    /// adding nothing, when what goes out is full already.
    fn keep(&self, event: &FeedEvent, out: &mut Outgoing) -> bool {
        if out.bytes >= SEND_CAP {
            return false;
        }
        let (from, to) = event.statuses();
        if self.filter.keeps(event.task, from, to, event.lease_expired) {
            let data = event.data(self.org);
            out.bytes += data.len();
            out.events.push(StreamEvent {
                id: event.id,
                name: event.name,
                data,
            });
        }
        true
    }

    fn sent(&mut self, out: Outgoing) -> StreamItem {
        self.keep_alive.sent();
        StreamItem::Events(out.events)
    }
}

/// The events one wake sends, and their bodies' bytes.
#[derive(Default)]
struct Outgoing {
    events: Vec<StreamEvent>,
    bytes: usize,
}

impl Drop for EventStream {
    fn drop(&mut self) {
        drop(self.live.take());
        self.hub.unsubscribed(self.org);
    }
}
