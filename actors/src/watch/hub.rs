//! The live half of the event stream: one broadcast channel per watched
//! org, fed by the group-commit writer after each commit, with the ids the
//! commit gave its events.
//!
//! An org nobody watches has no channel, and a commit then costs the
//! writer one atomic load (`watched`). A channel holds the last
//! [`BUFFER`] events; a stream that falls further behind than that is told
//! so by its receiver (`Lagged`) and ends, so a slow client never holds up
//! the writer, the org's actor or the other streams. Ending a stream loses
//! nothing: the client resumes by id and the rest comes from the store.
//!
//! The writer publishes an org's commits in commit order (one lane per
//! org), and only commits it knows to have landed. A commit that failed
//! may have landed all the same (an answer lost with the connection), so
//! the org's streams are cut off (`cut_off`), and their clients' replay
//! finds whatever did land.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, watch};

use crate::domain::{KeyId, OrgId};
use crate::store::{LoggedEvent, WriteBatch, WriteOp};

/// How far behind the live events a stream may fall (CONTRACT §10).
pub const BUFFER: usize = 10_000;

/// Streams one key may hold open at once (CONTRACT §10).
pub const STREAMS_PER_KEY: usize = 10;

pub type Live = broadcast::Receiver<Arc<LoggedEvent>>;

#[derive(Debug)]
pub struct EventHub {
    orgs: Mutex<HashMap<OrgId, broadcast::Sender<Arc<LoggedEvent>>>>,
    /// How many orgs have a channel.
    watched: AtomicUsize,
    /// Set when the server stops: every stream ends and none starts.
    closed: AtomicBool,
    /// Streams open, per key.
    streams: Mutex<HashMap<KeyId, usize>>,
    /// Moved by a test that moves the clock: streams look again at when
    /// their keep-alive is due.
    clock_moves: watch::Sender<u64>,
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
            watched: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            streams: Mutex::default(),
            clock_moves: watch::Sender::new(0),
            buffer: buffer.max(1),
        }
    }

    fn orgs(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<OrgId, broadcast::Sender<Arc<LoggedEvent>>>> {
        self.orgs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The org's live events from now on. Subscribe before reading the
    /// history a stream replays, so that nothing commits in between
    /// unseen.
    pub fn subscribe(&self, org: OrgId) -> Live {
        let mut orgs = self.orgs();
        if self.closed.load(Ordering::SeqCst) {
            // A receiver whose sender is gone: the stream ends at once.
            return broadcast::channel(1).1;
        }
        let sender = orgs.entry(org).or_insert_with(|| {
            self.watched.fetch_add(1, Ordering::SeqCst);
            broadcast::channel(self.buffer).0
        });
        sender.subscribe()
    }

    /// A stream of the org ended: its channel goes when it was the last.
    pub fn unsubscribed(&self, org: OrgId) {
        let mut orgs = self.orgs();
        if orgs.get(&org).is_some_and(|s| s.receiver_count() == 0) {
            orgs.remove(&org);
            self.watched.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Sends the events of committed batches to their orgs' streams. The
    /// commit numbered its events from `first_id` on, batch after batch,
    /// in the order of their writes.
    pub(crate) fn publish(&self, batches: &[&WriteBatch], first_id: i64) {
        if self.watched.load(Ordering::SeqCst) == 0 {
            return;
        }
        let orgs = self.orgs();
        let mut id = first_id;
        for batch in batches {
            let sender = orgs.get(&batch.org);
            for op in &batch.ops {
                let WriteOp::InsertEvents(events) = op else {
                    continue;
                };
                for event in events {
                    if let Some(sender) = sender {
                        let _ = sender.send(Arc::new(LoggedEvent {
                            event_id: id,
                            task_id: event.task_id.to_string(),
                            from_status: event.from_status.map(|s| s.as_str().to_owned()),
                            to_status: event.to_status.as_str().to_owned(),
                            agent_id: event.agent_id.clone(),
                            at: event.at,
                            lease_expired: Some(i64::from(event.lease_expired)),
                        }));
                    }
                    id += 1;
                }
            }
        }
    }

    /// Ends the org's streams (after those events already sent): its
    /// commit failed, or this node no longer owns it.
    pub fn cut_off(&self, org: OrgId) {
        if self.orgs().remove(&org).is_some() {
            self.watched.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The server is stopping: every stream ends, and no new one starts.
    pub fn close(&self) {
        let mut orgs = self.orgs();
        self.closed.store(true, Ordering::SeqCst);
        self.watched.fetch_sub(orgs.len(), Ordering::SeqCst);
        orgs.clear();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{StoredEvent, TaskId, TaskStatus};

    fn created(task: TaskId) -> StoredEvent {
        StoredEvent {
            task_id: task,
            from_status: None,
            to_status: TaskStatus::Pending,
            agent_id: "bot".into(),
            at: 1,
            note: None,
            lease_expired: false,
        }
    }

    #[test]
    fn a_commit_numbers_its_events_batch_after_batch() {
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
        let seen: Vec<(i64, String)> = std::iter::from_fn(|| live.try_recv().ok())
            .map(|e| (e.event_id, e.task_id.clone()))
            .collect();
        assert_eq!(
            seen,
            [
                (40, a.to_string()),
                (42, c.to_string()),
                (43, a.to_string())
            ]
        );
    }

    #[test]
    fn a_stream_behind_by_more_than_the_buffer_is_told() {
        let hub = EventHub::with_buffer(2);
        let org = OrgId::new_v7();
        let mut live = hub.subscribe(org);
        let events = (0..3).map(|_| created(TaskId::new_v7())).collect();
        hub.publish(
            &[&WriteBatch::new(org, vec![WriteOp::InsertEvents(events)])],
            1,
        );
        assert!(matches!(
            live.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(1))
        ));
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

        let key = KeyId::new_v7();
        let permits: Vec<_> = (0..STREAMS_PER_KEY)
            .map(|_| hub.admit_stream(key).unwrap())
            .collect();
        assert!(hub.admit_stream(key).is_none());
        drop(permits);
        assert!(hub.admit_stream(key).is_some());
    }
}
