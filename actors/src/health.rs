//! Whether the store is reachable, as the engine last saw it.
//!
//! The first failure that says the store itself is down (unreachable, out
//! of disk) marks it down: from then on requests are refused at once with
//! `store unavailable` instead of piling onto a dead pool, org actors whose
//! writes failed are not restarted into a loop of failing loads, and a
//! watcher probes the store until it answers, then marks it up and wakes
//! the orgs that hold leases.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tokio::sync::Notify;

use crate::store::StoreError;

#[derive(Default)]
pub struct StoreHealth {
    down: AtomicBool,
    /// When it went down, for the log line of its return.
    since: std::sync::Mutex<Option<Instant>>,
    /// Wakes the watcher when the store goes down.
    went_down: Notify,
    /// Test hook: the store refuses every write as unavailable.
    #[cfg(feature = "test-hooks")]
    simulated_outage: AtomicBool,
}

impl StoreHealth {
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    /// Marks the store down if `error` says it is.
    pub fn observe(&self, error: &StoreError) {
        if error.is_unavailable() && !self.down.swap(true, Ordering::AcqRel) {
            *self.since.lock().expect("not poisoned") = Some(Instant::now());
            tracing::error!(error = %error, "the store is unavailable; refusing requests until it answers");
            self.went_down.notify_one();
        }
    }

    pub fn mark_up(&self) {
        if self.down.swap(false, Ordering::AcqRel) {
            let since = self.since.lock().expect("not poisoned").take();
            let seconds = since.map(|s| s.elapsed().as_secs_f64()).unwrap_or_default();
            tracing::warn!(
                down_seconds = seconds,
                "the store answers again; serving requests"
            );
        }
    }

    /// Waits until the store is marked down.
    pub async fn wait_down(&self) {
        while !self.is_down() {
            self.went_down.notified().await;
        }
    }

    /// A simulated outage: writes fail and probes fail until it ends.
    #[cfg(feature = "test-hooks")]
    pub fn simulate_outage(&self, on: bool) {
        self.simulated_outage.store(on, Ordering::Release);
    }

    pub fn outage_simulated(&self) -> bool {
        #[cfg(feature = "test-hooks")]
        {
            self.simulated_outage.load(Ordering::Acquire)
        }
        #[cfg(not(feature = "test-hooks"))]
        {
            false
        }
    }
}
