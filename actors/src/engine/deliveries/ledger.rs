//! What the delivery worker has taken and not yet settled: the endpoints
//! whose log it is delivering, the outbox rows in delivery, the entries
//! in memory and the requests in flight to each endpoint.
//!
//! Each take is a [`Taken`] that gives everything back when it is dropped,
//! whether its turn was settled, failed, panicked or was cancelled, so no
//! path leaves an endpoint or a row taken until a restart. On SQLite this
//! is what keeps a row from being sent twice at once; on PostgreSQL the
//! store's holds do that, and the ledger bounds memory and requests.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::domain::WebhookId;

/// Entries and rows held at once, all endpoints together: what bounds the
/// worker's memory.
pub(super) const MAX_TAKEN: usize = 512;
/// Requests in flight at once to one endpoint: a slow one takes no more.
pub(super) const PER_ENDPOINT: usize = 8;

#[derive(Default)]
struct State {
    logs: HashSet<WebhookId>,
    rows: HashSet<i64>,
    entries: usize,
    streams: HashMap<WebhookId, usize>,
}

/// The worker's ledger, shared by its loop and its turns.
#[derive(Default)]
pub(super) struct Ledger {
    state: Mutex<State>,
    /// Rung whenever something is given back: there is room again.
    room: Notify,
}

/// What one turn took: given back when dropped.
pub(super) struct Taken {
    ledger: Arc<Ledger>,
    webhook: WebhookId,
    log: bool,
    rows: Vec<i64>,
    entries: usize,
    streams: usize,
}

impl Taken {
    pub(super) fn streams(&self) -> usize {
        self.streams
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        {
            let mut state = self.ledger.lock();
            if self.log {
                state.logs.remove(&self.webhook);
            }
            for id in &self.rows {
                state.rows.remove(id);
            }
            state.entries -= self.entries;
            if let Some(n) = state.streams.get_mut(&self.webhook) {
                *n -= self.streams;
                if *n == 0 {
                    state.streams.remove(&self.webhook);
                }
            }
        }
        self.ledger.room.notify_one();
    }
}

impl Ledger {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere while holding it left counts that are still
        // whole: every change below is made in one step.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Entries and rows that may still be taken.
    pub(super) fn room(&self) -> usize {
        MAX_TAKEN.saturating_sub(self.lock().entries)
    }

    /// Endpoints not to look at now: their log is in a turn, or they have
    /// no request to spare.
    pub(super) fn busy_endpoints(&self) -> Vec<WebhookId> {
        let state = self.lock();
        let full = state
            .streams
            .iter()
            .filter(|(_, n)| **n >= PER_ENDPOINT)
            .map(|(w, _)| *w);
        state.logs.iter().copied().chain(full).collect()
    }

    /// Rows in delivery.
    pub(super) fn rows(&self) -> Vec<i64> {
        self.lock().rows.iter().copied().collect()
    }

    /// Requests the endpoint can take now.
    pub(super) fn free_streams(&self, webhook: WebhookId) -> usize {
        PER_ENDPOINT.saturating_sub(self.lock().streams.get(&webhook).copied().unwrap_or(0))
    }

    /// Takes the endpoint's log for a turn of `entries` entries over up to
    /// `streams` requests; `None` if its log is in a turn already or it
    /// has no request to spare.
    pub(super) fn take_log(
        self: &Arc<Self>,
        webhook: WebhookId,
        entries: usize,
        streams: usize,
    ) -> Option<Taken> {
        let mut state = self.lock();
        let free = PER_ENDPOINT.saturating_sub(state.streams.get(&webhook).copied().unwrap_or(0));
        if free == 0 || state.logs.contains(&webhook) {
            return None;
        }
        let streams = streams.clamp(1, free);
        state.logs.insert(webhook);
        state.entries += entries;
        *state.streams.entry(webhook).or_default() += streams;
        Some(Taken {
            ledger: self.clone(),
            webhook,
            log: true,
            rows: Vec::new(),
            entries,
            streams,
        })
    }

    /// Takes rows of one endpoint for one request; `None` if it has none
    /// to spare or a row is taken already.
    pub(super) fn take_rows(self: &Arc<Self>, webhook: WebhookId, rows: Vec<i64>) -> Option<Taken> {
        let mut state = self.lock();
        let used = state.streams.get(&webhook).copied().unwrap_or(0);
        if used >= PER_ENDPOINT || rows.iter().any(|id| state.rows.contains(id)) {
            return None;
        }
        state.rows.extend(rows.iter().copied());
        state.entries += rows.len();
        *state.streams.entry(webhook).or_default() += 1;
        Some(Taken {
            ledger: self.clone(),
            webhook,
            log: false,
            entries: rows.len(),
            rows,
            streams: 1,
        })
    }

    /// Waits until something is given back.
    pub(super) async fn given_back(&self) {
        self.room.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_turn_took_comes_back_however_it_ends() {
        let ledger = Arc::new(Ledger::default());
        let wh = WebhookId::new_v7();
        let turn = ledger.take_log(wh, 10, 3).unwrap();
        assert_eq!(turn.streams(), 3);
        assert!(
            ledger.take_log(wh, 1, 1).is_none(),
            "one turn at a log at a time"
        );
        assert_eq!(ledger.room(), MAX_TAKEN - 10);
        assert_eq!(ledger.busy_endpoints(), [wh]);
        let rows = ledger.take_rows(wh, vec![1, 2]).unwrap();
        assert!(
            ledger.take_rows(wh, vec![2]).is_none(),
            "a row is taken once"
        );
        assert_eq!(ledger.free_streams(wh), PER_ENDPOINT - 4);

        // A turn that panics gives back what it took as it unwinds.
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _turn = turn;
            panic!("a send went wrong");
        }));
        assert!(panicked.is_err());
        assert!(ledger.take_log(wh, 1, 1).is_some());
        drop(rows);
        assert_eq!(ledger.room(), MAX_TAKEN);
        assert!(ledger.rows().is_empty());
        assert!(ledger.busy_endpoints().is_empty());
        assert_eq!(ledger.free_streams(wh), PER_ENDPOINT);
    }

    #[test]
    fn an_endpoint_never_gets_more_requests_than_its_share() {
        let ledger = Arc::new(Ledger::default());
        let (wh, other) = (WebhookId::new_v7(), WebhookId::new_v7());
        let taken: Vec<Taken> = (0..PER_ENDPOINT as i64)
            .map(|i| ledger.take_rows(wh, vec![i]).unwrap())
            .collect();
        assert!(ledger.take_rows(wh, vec![99]).is_none());
        assert!(ledger.take_log(wh, 1, 1).is_none());
        assert_eq!(ledger.busy_endpoints(), [wh]);
        // Another endpoint is not held back.
        assert_eq!(
            ledger.take_log(other, 5, 20).unwrap().streams(),
            PER_ENDPOINT
        );
        drop(taken);
        assert_eq!(ledger.free_streams(wh), PER_ENDPOINT);
    }
}
