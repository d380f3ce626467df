//! What the store holds of each org, for its operator. Counting scans the
//! org's index of tasks and of events, which grows with the org: so
//! `GET /admin/orgs/{id}` counts when asked, and the operator page, which
//! refreshes every few seconds, shows the last count and has a new one
//! taken in the background once that is a minute old, one at a time per
//! org. Nothing here is on the claim path.

use dashmap::DashMap;

use super::Engine;
use crate::api::{LastCount, StoredCounts, Timestamp};
use crate::domain::OrgId;
use crate::error::EngineError;

/// How old a count the operator page shows before it asks for another.
const RECOUNT_AFTER_MS: i64 = 60_000;

/// The last count of each org, and whether a count is under way.
#[derive(Debug, Default)]
pub(super) struct StoredSizes {
    orgs: DashMap<OrgId, Slot>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Slot {
    last: Option<LastCount>,
    counting: bool,
}

/// Whether the page should have the org counted again.
fn recount_due(slot: Slot, now: i64) -> bool {
    !slot.counting
        && slot
            .last
            .is_none_or(|c| now - c.counted_at.0 >= RECOUNT_AFTER_MS)
}

impl Engine {
    /// Counts what the store holds of the org now, and keeps the count
    /// for the operator page.
    pub(super) async fn count_stored(&self, org: OrgId) -> Result<StoredCounts, EngineError> {
        let counted_at = Timestamp(self.now());
        let (tasks, events) = self.stored(self.inner.store.stored_counts(org).await)?;
        let counts = StoredCounts { tasks, events };
        let mut slot = self.inner.sizes.orgs.entry(org).or_default();
        // A count begun earlier and ended later must not hide this one.
        if slot.last.is_none_or(|last| last.counted_at <= counted_at) {
            slot.last = Some(LastCount { counts, counted_at });
        }
        Ok(counts)
    }

    /// The org's last count, with a new one started in the background
    /// when that is missing or old.
    pub(super) fn last_stored(&self, org: OrgId) -> Option<LastCount> {
        let now = self.now();
        let (last, due) = {
            let mut slot = self.inner.sizes.orgs.entry(org).or_default();
            let due = recount_due(*slot, now);
            slot.counting |= due;
            (slot.last, due)
        };
        if due {
            let engine = self.clone();
            tokio::spawn(async move {
                let counted = engine.count_stored(org).await;
                if let Some(mut slot) = engine.inner.sizes.orgs.get_mut(&org) {
                    slot.counting = false;
                }
                if let Err(e) = counted {
                    tracing::warn!(org = %org, error = %e, "could not count the org's stored tasks");
                }
            });
        }
        last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted_at(at: i64) -> Slot {
        Slot {
            last: Some(LastCount {
                counts: StoredCounts {
                    tasks: 1,
                    events: 2,
                },
                counted_at: Timestamp(at),
            }),
            counting: false,
        }
    }

    #[test]
    fn a_count_is_taken_when_missing_or_a_minute_old_and_never_twice_at_once() {
        assert!(recount_due(Slot::default(), 0));
        assert!(!recount_due(
            counted_at(1_000),
            1_000 + RECOUNT_AFTER_MS - 1
        ));
        assert!(recount_due(counted_at(1_000), 1_000 + RECOUNT_AFTER_MS));
        let under_way = Slot {
            counting: true,
            ..counted_at(0)
        };
        assert!(!recount_due(under_way, RECOUNT_AFTER_MS * 10));
    }
}
