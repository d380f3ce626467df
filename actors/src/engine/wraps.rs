//! Wraps in flight: what a master-key rotation waits for, in place of a
//! lock held across a request.
//!
//! A request that wraps or seals with the current master key (an org's
//! data key at `POST /admin/orgs`, a webhook's secret) enters here before
//! it reads the keyring and leaves when its commit answered (the guard's
//! drop). A rotation installs the new keyring, then starts a new
//! generation and waits until no request of an older one is in flight:
//! each of those may have read the old key, and once they are gone every
//! wrap by the old key is in the store, where the rotation's passes find
//! it. Requests never wait on the rotation, nor on each other: entering
//! and leaving take a mutex for a counter's change, never across an await.

use std::collections::BTreeMap;
use std::sync::Mutex;

use tokio::sync::Notify;

#[derive(Default)]
pub(super) struct Wraps {
    in_flight: Mutex<InFlight>,
    left: Notify,
}

#[derive(Default)]
struct InFlight {
    generation: u64,
    /// Requests in flight by the generation they entered in; none is kept
    /// at zero.
    by_generation: BTreeMap<u64, usize>,
}

/// One request's wrap in flight, until dropped.
pub(super) struct WrapInFlight<'a> {
    wraps: &'a Wraps,
    generation: u64,
}

impl Wraps {
    /// Enters a wrap; the keyring is read after this returns.
    pub(super) fn enter(&self) -> WrapInFlight<'_> {
        let mut in_flight = self.in_flight.lock().expect("not poisoned");
        let generation = in_flight.generation;
        *in_flight.by_generation.entry(generation).or_default() += 1;
        WrapInFlight {
            wraps: self,
            generation,
        }
    }

    /// Called once a new keyring is installed: waits until every wrap that
    /// entered before it left, so that none by an earlier key is still to
    /// commit.
    pub(super) async fn settled(&self) {
        let generation = self.next_generation();
        self.left_before(generation).await;
    }

    fn next_generation(&self) -> u64 {
        let mut in_flight = self.in_flight.lock().expect("not poisoned");
        in_flight.generation += 1;
        in_flight.generation
    }

    async fn left_before(&self, generation: u64) {
        loop {
            let left = self.left.notified();
            tokio::pin!(left);
            left.as_mut().enable();
            if self.none_before(generation) {
                return;
            }
            left.await;
        }
    }

    fn none_before(&self, generation: u64) -> bool {
        let in_flight = self.in_flight.lock().expect("not poisoned");
        in_flight.by_generation.range(..generation).next().is_none()
    }
}

impl Drop for WrapInFlight<'_> {
    fn drop(&mut self) {
        let mut in_flight = self.wraps.in_flight.lock().expect("not poisoned");
        if let Some(count) = in_flight.by_generation.get_mut(&self.generation) {
            *count -= 1;
            if *count == 0 {
                in_flight.by_generation.remove(&self.generation);
            }
        }
        drop(in_flight);
        self.wraps.left.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::Wraps;

    #[tokio::test]
    async fn settling_waits_for_the_wraps_that_entered_before_it_only() {
        let wraps = Arc::new(Wraps::default());
        let before = wraps.enter();
        let generation = wraps.next_generation();
        // A wrap entering once the new generation began is not waited for.
        let after = wraps.enter();
        let settling = {
            let wraps = wraps.clone();
            tokio::spawn(async move { wraps.left_before(generation).await })
        };
        tokio::task::yield_now().await;
        assert!(
            !settling.is_finished(),
            "settled with a wrap of before in flight"
        );
        drop(before);
        tokio::time::timeout(Duration::from_secs(5), settling)
            .await
            .expect("settled once the wrap of before left, the one of after in flight")
            .unwrap();
        drop(after);
    }

    #[tokio::test]
    async fn with_nothing_in_flight_settling_is_at_once() {
        let wraps = Wraps::default();
        drop(wraps.enter());
        tokio::time::timeout(Duration::from_secs(5), wraps.settled())
            .await
            .expect("nothing to wait for");
    }
}
