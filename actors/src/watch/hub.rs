//! The live half of the event stream: one broadcast channel per watched
//! org, fed by the group-commit writer after each commit, with the ids the
//! commit gave its events.
//!
//! An org nobody watches has no channel, and a commit then costs the
//! writer one atomic load (`watched`). A commit sends its org's streams
//! one shared entry (`CommitEvents`), not one message per event, and each
//! event's §7 body is rendered once, by the first stream that sends it
//! (`FeedEvent::data`), however many streams the org has. An org with a
//! board open has no entries built for its board: the writer adds the
//! tasks each commit changed to the org's `Changes` in place.
//!
//! A stream may fall [`BUFFER`] events behind the live ones, counted in
//! events, not in entries: each org counts the events it has published,
//! each entry carries that count as of its last event, and a stream that
//! takes an entry while more than [`BUFFER`] events are published and not
//! yet taken by it is told so (`Behind`) and ends, as it is when the
//! channel itself, [`BUFFER`] entries long (rounded up to a power of two),
//! ran past it: each entry holds one event at least, so that is further
//! behind still. An entry goes once every stream has taken it. So a slow client
//! never holds up the writer, the org's actor or the other streams. Ending
//! a stream loses nothing: the client resumes by id and the rest comes
//! from the store.
//!
//! The hub also wakes the webhook delivery worker: a commit whose batch
//! gives it work (`WriteBatch::wakes_deliveries`) rings
//! [`EventHub::deliveries`], so the worker waits for commits rather than
//! polling the store, and an idle server reads nothing for webhooks.
//!
//! The writer publishes an org's commits in commit order (one lane per
//! org), and only commits it knows to have landed. A commit that failed
//! may have landed all the same (an answer lost with the connection), so
//! the org's streams are cut off (`cut_off`), and their clients' replay
//! finds whatever did land.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::{broadcast, watch, Notify};

use super::changes::Changes;
use crate::api::EventBody;
use crate::domain::watch::event_name;
use crate::domain::webhooks::{EventType, Transition};
use crate::domain::{KeyId, OrgId, StoredEvent, TaskId, TaskStatus};
use crate::store::{LoggedEvent, WriteBatch, WriteOp};

/// How far behind the live events a stream may fall (CONTRACT §10).
pub const BUFFER: usize = 10_000;

/// Streams one key may hold open at once (CONTRACT §10).
pub const STREAMS_PER_KEY: usize = 10;

/// One event as the streams see it: what their filters ask about, and its
/// body, rendered when a stream first sends it.
#[derive(Debug)]
pub struct FeedEvent {
    pub id: i64,
    pub task: TaskId,
    pub change: Transition,
    pub lease_expired: bool,
    pub at: i64,
    /// Its type, most specific first.
    pub kind: EventType,
    /// Its name on the stream (`None`: an unnamed event, see
    /// `domain::watch::event_name`).
    pub name: Option<&'static str>,
    data: OnceLock<Arc<str>>,
}

impl FeedEvent {
    fn new(id: i64, event: &StoredEvent) -> Self {
        let change = Transition {
            from_status: event.from_status,
            to_status: event.to_status,
            agent_id: event.agent_id.clone(),
        };
        Self::of(id, event.task_id, change, event.at, event.lease_expired)
    }

    fn of(id: i64, task: TaskId, change: Transition, at: i64, lease_expired: bool) -> Self {
        let kind = event_name(change.from_status, change.to_status, lease_expired);
        Self {
            id,
            task,
            change,
            lease_expired,
            at,
            kind,
            name: (kind != EventType::StatusChanged).then(|| kind.as_str()),
            data: OnceLock::new(),
        }
    }

    /// An event read back from the log.
    pub fn logged(event: &LoggedEvent) -> Self {
        let change = event.transition.clone();
        Self::of(
            event.event_id,
            event.task_id,
            change,
            event.at,
            event.lease_expired,
        )
    }

    /// Its §7 body as JSON, on one line, rendered once.
    pub fn data(&self, org: OrgId) -> Arc<str> {
        let data = self.data.get_or_init(|| {
            let task = self.task.to_string();
            EventBody::transition(self.kind, org, &task, &self.change, self.at)
                .render()
                .into()
        });
        Arc::clone(data)
    }

    /// Its statuses: `None` as the first for a creation.
    pub fn statuses(&self) -> (Option<TaskStatus>, TaskStatus) {
        (self.change.from_status, self.change.to_status)
    }
}

/// One commit's events of one org, in id order, shared by its streams.
#[derive(Debug)]
pub struct CommitEvents {
    pub events: Vec<FeedEvent>,
    /// The org's events published up to this entry's last, counted from
    /// its channel's opening.
    published_through: u64,
}

/// One org's channel, and how many events it has carried.
#[derive(Debug)]
struct Feed {
    sender: broadcast::Sender<Arc<CommitEvents>>,
    published: Arc<AtomicU64>,
}

/// An org's changed tasks, and how many board feeds take them: one, or
/// two while one ends as the next starts.
#[derive(Debug)]
struct Boards {
    changes: Arc<Changes>,
    feeds: usize,
}

/// A stream's receiver of its org's entries.
#[derive(Debug)]
pub struct Live {
    receiver: broadcast::Receiver<Arc<CommitEvents>>,
    published: Arc<AtomicU64>,
    buffer: u64,
}

/// Why a stream gets no more live entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveEnd {
    /// More than the buffer's events are published and not yet taken.
    Behind,
    /// The channel is gone: the org was cut off or the server stops.
    Closed,
}

impl Live {
    /// The next entry, waiting for it.
    pub async fn recv(&mut self) -> Result<Arc<CommitEvents>, LiveEnd> {
        match self.receiver.recv().await {
            Ok(entry) => self.checked(entry),
            Err(RecvError::Lagged(_)) => Err(LiveEnd::Behind),
            Err(RecvError::Closed) => Err(LiveEnd::Closed),
        }
    }

    /// The next entry if one is there already; `Ok(None)` if not.
    pub fn try_recv(&mut self) -> Result<Option<Arc<CommitEvents>>, LiveEnd> {
        match self.receiver.try_recv() {
            Ok(entry) => self.checked(entry).map(Some),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Lagged(_)) => Err(LiveEnd::Behind),
            Err(TryRecvError::Closed) => Err(LiveEnd::Closed),
        }
    }

    fn checked(&self, entry: Arc<CommitEvents>) -> Result<Arc<CommitEvents>, LiveEnd> {
        let published = self.published.load(Ordering::Acquire);
        let first = entry.published_through - entry.events.len() as u64;
        if published.saturating_sub(first) > self.buffer {
            return Err(LiveEnd::Behind);
        }
        Ok(entry)
    }
}

#[derive(Debug)]
pub struct EventHub {
    orgs: Mutex<HashMap<OrgId, Feed>>,
    /// The changed tasks of the orgs with a board open.
    boards: Mutex<HashMap<OrgId, Boards>>,
    /// How many orgs have a channel, plus how many have a board open.
    watched: AtomicUsize,
    /// Set when the server stops: every stream ends and none starts.
    closed: AtomicBool,
    /// Streams open, per key.
    streams: Mutex<HashMap<KeyId, usize>>,
    /// Moved by a test that moves the clock: streams look again at when
    /// their keep-alive is due.
    clock_moves: watch::Sender<u64>,
    /// Rung by commits that give the delivery worker work (one permit
    /// kept while it is not waiting, so none is missed).
    deliveries: Notify,
    buffer: usize,
}

impl Default for EventHub {
    fn default() -> Self {
        Self::with_buffer(BUFFER)
    }
}

impl EventHub {
    pub fn with_buffer(buffer: usize) -> Self {
        Self {
            orgs: Mutex::default(),
            boards: Mutex::default(),
            watched: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            streams: Mutex::default(),
            clock_moves: watch::Sender::new(0),
            deliveries: Notify::new(),
            buffer: buffer.max(1),
        }
    }

    fn orgs(&self) -> std::sync::MutexGuard<'_, HashMap<OrgId, Feed>> {
        self.orgs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn boards(&self) -> std::sync::MutexGuard<'_, HashMap<OrgId, Boards>> {
        self.boards.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The org's live events from now on. Subscribe before reading the
    /// history a stream replays, so that nothing commits in between
    /// unseen.
    pub fn subscribe(&self, org: OrgId) -> Live {
        let mut orgs = self.orgs();
        let buffer = self.buffer as u64;
        if self.closed.load(Ordering::SeqCst) {
            // A receiver whose sender is gone: the stream ends at once.
            return Live {
                receiver: broadcast::channel(1).1,
                published: Arc::default(),
                buffer,
            };
        }
        let feed = orgs.entry(org).or_insert_with(|| {
            self.watched.fetch_add(1, Ordering::SeqCst);
            Feed {
                sender: broadcast::channel(self.buffer).0,
                published: Arc::default(),
            }
        });
        Live {
            receiver: feed.sender.subscribe(),
            published: Arc::clone(&feed.published),
            buffer,
        }
    }

    /// The tasks the org's commits change from now on, for its board
    /// feed; given back with `unwatch_changes`.
    pub fn watch_changes(&self, org: OrgId) -> Arc<Changes> {
        let mut boards = self.boards();
        if self.closed.load(Ordering::SeqCst) {
            return Changes::ended();
        }
        let watched = boards.entry(org).or_insert_with(|| {
            self.watched.fetch_add(1, Ordering::SeqCst);
            Boards {
                changes: Arc::default(),
                feeds: 0,
            }
        });
        watched.feeds += 1;
        Arc::clone(&watched.changes)
    }

    /// A board feed of the org ended: its changes go when it was the last.
    pub fn unwatch_changes(&self, org: OrgId, changes: &Arc<Changes>) {
        let mut boards = self.boards();
        let Some(watched) = boards.get_mut(&org) else {
            return;
        };
        if !Arc::ptr_eq(&watched.changes, changes) {
            return;
        }
        watched.feeds -= 1;
        if watched.feeds == 0 {
            boards.remove(&org);
            self.watched.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// A stream of the org ended: its channel goes when it was the last.
    pub fn unsubscribed(&self, org: OrgId) {
        let mut orgs = self.orgs();
        if orgs
            .get(&org)
            .is_some_and(|f| f.sender.receiver_count() == 0)
        {
            orgs.remove(&org);
            self.watched.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Sends the events of committed batches to their orgs' streams, one
    /// entry per org. The commit numbered its events from `first_id` on,
    /// batch after batch, in the order of their writes.
    pub(crate) fn publish(&self, batches: &[&WriteBatch], first_id: i64) {
        if batches.iter().any(|b| b.wakes_deliveries) {
            self.deliveries.notify_one();
        }
        if self.watched.load(Ordering::SeqCst) == 0 {
            return;
        }
        let orgs = self.orgs();
        let boards = self.boards();
        let mut entries: Vec<(OrgId, Vec<FeedEvent>)> = Vec::new();
        let mut id = first_id;
        for batch in batches {
            if let Some(watched) = boards.get(&batch.org) {
                watched.changes.gather(batch);
            }
            let feed = orgs.get(&batch.org);
            for op in &batch.ops {
                let WriteOp::InsertEvents(events) = op else {
                    continue;
                };
                if feed.is_some() && !events.is_empty() {
                    events_of(&mut entries, batch.org)
                        .extend((id..).zip(events).map(|(id, e)| FeedEvent::new(id, e)));
                }
                id += events.len() as i64;
            }
        }
        drop(boards);
        for (org, events) in entries {
            let Some(feed) = orgs.get(&org) else { continue };
            let count = events.len() as u64;
            // Counted before it is sent, so that no stream takes an entry
            // the count does not hold yet.
            let through = feed.published.fetch_add(count, Ordering::AcqRel) + count;
            let _ = feed.sender.send(Arc::new(CommitEvents {
                events,
                published_through: through,
            }));
        }
    }

    /// Ends the org's streams (after those events already sent): its
    /// commit failed, or this node no longer owns it.
    pub fn cut_off(&self, org: OrgId) {
        // What may have landed may be the worker's to deliver.
        self.deliveries.notify_one();
        let mut orgs = self.orgs();
        let mut boards = self.boards();
        if orgs.remove(&org).is_some() {
            self.watched.fetch_sub(1, Ordering::SeqCst);
        }
        if let Some(watched) = boards.remove(&org) {
            watched.changes.end();
            self.watched.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The server is stopping: every stream ends, and no new one starts.
    pub fn close(&self) {
        let mut orgs = self.orgs();
        let mut boards = self.boards();
        self.closed.store(true, Ordering::SeqCst);
        self.watched
            .fetch_sub(orgs.len() + boards.len(), Ordering::SeqCst);
        orgs.clear();
        boards
            .drain()
            .for_each(|(_, watched)| watched.changes.end());
    }

    /// A place among the key's open streams, or `None` when it holds
    /// [`STREAMS_PER_KEY`] already.
    pub fn admit_stream(self: &Arc<Self>, key: KeyId) -> Option<StreamPermit> {
        let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        let open = streams.entry(key).or_insert(0);
        if *open >= STREAMS_PER_KEY {
            return None;
        }
        *open += 1;
        Some(StreamPermit {
            hub: Arc::clone(self),
            key,
        })
    }

    /// The test clock moved.
    pub fn clock_moved(&self) {
        self.clock_moves.send_modify(|n| *n += 1);
    }

    pub fn clock_moves(&self) -> watch::Receiver<u64> {
        self.clock_moves.subscribe()
    }

    /// Waits until a commit gave the delivery worker work since it last
    /// looked.
    pub async fn deliveries(&self) {
        self.deliveries.notified().await;
    }
}

/// One of a key's open streams, given back when dropped.
#[derive(Debug)]
pub struct StreamPermit {
    hub: Arc<EventHub>,
    key: KeyId,
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut streams = self.hub.streams.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(open) = streams.get_mut(&self.key) {
            *open -= 1;
            if *open == 0 {
                streams.remove(&self.key);
            }
        }
    }
}

/// The org's events among those a commit gathered so far, added when
/// missing.
fn events_of(entries: &mut Vec<(OrgId, Vec<FeedEvent>)>, org: OrgId) -> &mut Vec<FeedEvent> {
    let at = match entries.iter().position(|(o, _)| *o == org) {
        Some(at) => at,
        None => {
            entries.push((org, Vec::new()));
            entries.len() - 1
        }
    };
    &mut entries[at].1
}

#[cfg(test)]
mod tests {
    use super::super::created;
    use super::*;
    use crate::domain::TaskId;

    fn ids(live: &mut Live) -> Vec<Vec<(i64, TaskId)>> {
        std::iter::from_fn(|| live.try_recv().unwrap())
            .map(|entry| entry.events.iter().map(|e| (e.id, e.task)).collect())
            .collect()
    }

    #[test]
    fn a_commit_sends_each_org_one_entry_numbered_batch_after_batch() {
        let hub = EventHub::default();
        let (watched, other) = (OrgId::new_v7(), OrgId::new_v7());
        let mut live = hub.subscribe(watched);
        let (a, b, c) = (TaskId::new_v7(), TaskId::new_v7(), TaskId::new_v7());
        let first = WriteBatch::new(watched, vec![WriteOp::InsertEvents(vec![created(a)])]);
        let between = WriteBatch::new(other, vec![WriteOp::InsertEvents(vec![created(b)])]);
        let last = WriteBatch::new(
            watched,
            vec![WriteOp::InsertEvents(vec![created(c), created(a)])],
        );
        hub.publish(&[&first, &between, &last], 40);
        hub.publish(&[&between], 44);
        assert_eq!(ids(&mut live), [vec![(40, a), (42, c), (43, a)]]);
    }

    #[test]
    fn an_event_is_rendered_once_for_all_its_streams() {
        let hub = EventHub::default();
        let org = OrgId::new_v7();
        let (mut one, mut two) = (hub.subscribe(org), hub.subscribe(org));
        let batch = WriteBatch::new(
            org,
            vec![WriteOp::InsertEvents(vec![created(TaskId::new_v7())])],
        );
        hub.publish(&[&batch], 1);
        let (one, two) = (
            one.try_recv().unwrap().unwrap(),
            two.try_recv().unwrap().unwrap(),
        );
        let (a, b) = (one.events[0].data(org), two.events[0].data(org));
        assert!(Arc::ptr_eq(&a, &b));
        let body: serde_json::Value = serde_json::from_str(&a).unwrap();
        assert_eq!(body["type"], "task.created");
        assert_eq!(body["data"]["org_id"], org.to_string());
        assert_eq!(one.events[0].name, Some("task.created"));
    }

    #[test]
    fn a_stream_behind_by_more_than_the_buffer_in_events_is_told() {
        let hub = EventHub::with_buffer(3);
        let org = OrgId::new_v7();
        let (mut slow, mut keeping_up) = (hub.subscribe(org), hub.subscribe(org));
        let commit = |n: usize| {
            let events = (0..n).map(|_| created(TaskId::new_v7())).collect();
            WriteBatch::new(org, vec![WriteOp::InsertEvents(events)])
        };
        hub.publish(&[&commit(2)], 1);
        assert_eq!(keeping_up.try_recv().unwrap().unwrap().events.len(), 2);
        hub.publish(&[&commit(2)], 3);
        // Two entries, four events: the slow one is behind by more than
        // three, the other by two.
        assert_eq!(slow.try_recv().unwrap_err(), LiveEnd::Behind);
        assert_eq!(keeping_up.try_recv().unwrap().unwrap().events.len(), 2);
        assert!(keeping_up.try_recv().unwrap().is_none());
    }

    #[test]
    fn a_boards_changes_gather_its_commits_and_end_with_its_org_cut_off() {
        let hub = EventHub::default();
        let (org, other) = (OrgId::new_v7(), OrgId::new_v7());
        let changes = hub.watch_changes(org);
        let mut stream = hub.subscribe(other);
        let (a, b) = (TaskId::new_v7(), TaskId::new_v7());
        let mine = WriteBatch::new(org, vec![WriteOp::InsertEvents(vec![created(a)])]);
        let theirs = WriteBatch::new(other, vec![WriteOp::InsertEvents(vec![created(b)])]);
        hub.publish(&[&mine, &theirs], 7);
        assert_eq!(changes.take().tasks, [a]);
        assert_eq!(
            ids(&mut stream),
            [vec![(8, b)]],
            "ids counted past the board's org"
        );
        let again = hub.watch_changes(org);
        assert!(Arc::ptr_eq(&changes, &again), "one org, one gathering");
        hub.unwatch_changes(org, &again);
        hub.publish(&[&mine], 9);
        assert_eq!(changes.take().tasks, [a], "kept while a feed watches");
        hub.cut_off(org);
        assert!(changes.has_ended());
        hub.unwatch_changes(org, &changes);
        drop(stream);
        hub.unsubscribed(other);
        assert_eq!(hub.watched.load(Ordering::SeqCst), 0);
        hub.close();
        assert!(hub.watch_changes(org).has_ended());
    }

    #[tokio::test]
    async fn a_commit_with_work_for_webhooks_wakes_the_worker_watched_or_not() {
        let hub = EventHub::default();
        let org = OrgId::new_v7();
        let mut quiet = WriteBatch::new(
            org,
            vec![WriteOp::InsertEvents(vec![created(TaskId::new_v7())])],
        );
        hub.publish(&[&quiet], 1);
        async fn woken(hub: &EventHub) -> bool {
            use std::future::Future;
            let mut waiting = std::pin::pin!(hub.deliveries());
            std::future::poll_fn(|cx| std::task::Poll::Ready(waiting.as_mut().poll(cx).is_ready()))
                .await
        }
        assert!(!woken(&hub).await, "an org without endpoints wakes nothing");
        quiet.wakes_deliveries = true;
        hub.publish(&[&quiet], 2);
        assert!(woken(&hub).await, "kept for the worker until it waits");
        assert!(!woken(&hub).await, "once");
    }

    #[test]
    fn channels_go_with_their_last_stream_and_keys_hold_ten() {
        let hub = Arc::new(EventHub::default());
        let org = OrgId::new_v7();
        let live = hub.subscribe(org);
        assert_eq!(hub.watched.load(Ordering::SeqCst), 1);
        drop(live);
        hub.unsubscribed(org);
        assert_eq!(hub.watched.load(Ordering::SeqCst), 0);
        hub.cut_off(org);
        let mut ended = hub.subscribe(org);
        hub.cut_off(org);
        assert_eq!(ended.try_recv().unwrap_err(), LiveEnd::Closed);

        let key = KeyId::new_v7();
        let permits: Vec<_> = (0..STREAMS_PER_KEY)
            .map(|_| hub.admit_stream(key).unwrap())
            .collect();
        assert!(hub.admit_stream(key).is_none());
        drop(permits);
        assert!(hub.admit_stream(key).is_some());
    }
}
