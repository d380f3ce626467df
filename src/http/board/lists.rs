//! The tasks a board page lists, shared by the boards of an org.
//!
//! One notice reaches every open board of an org at once, and each that
//! cannot update its cards alone fetches its page again: fifty boards made
//! fifty reads of the same 200 tasks for one change. A page's list is
//! therefore kept a few seconds, stamped with the mark of the org's last
//! notice sent before it was read; the script says which notice it fetches
//! for (`X-Board-Mark`), and a list stamped at or after that mark shows
//! every change the notice named (`ChangeMark::covers`), so the page is
//! made from it. The stamp is the server's own, never the client's: a list
//! read before a notice is never served for it. A page asked without the
//! header, or with one that is not a mark (a navigation, a form's
//! redirect, the poll without the stream), is read afresh. A shared list is
//! still counted against the org's limits as the read it stands for. The
//! lists are kept in a `moka` cache: its time to live and bound are the
//! few seconds and the number of lists.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use moka::ops::compute::Op;
use moka::policy::EvictionPolicy;
use moka::sync::Cache;
use taskq_actors::domain::mark::ChangeMark;
use taskq_actors::domain::OrgId;

use super::model::Card;

/// The header by which the script names the notice it fetches for.
pub const MARK_HEADER: &str = "x-board-mark";

/// How long a list is kept for the boards that fetch after it.
const KEPT: Duration = Duration::from_secs(10);
/// Lists kept at most, over every org and filter.
const MOST: u64 = 64;

/// What a page lists: its cards, open work first, and the next page.
pub struct Listed {
    pub cards: Vec<Card>,
    pub next_cursor: Option<String>,
}

#[derive(Clone)]
struct Kept {
    read_after: ChangeMark,
    listed: Arc<Listed>,
}

type Key = (OrgId, String);

/// The lists kept, by org and the list's own query, each for [`KEPT`];
/// when there are [`MOST`], the least recently used goes first.
pub struct SharedLists {
    kept: Cache<Key, Kept>,
    /// Pages made from a list another page read (`/metrics`).
    shared: AtomicU64,
}

impl Default for SharedLists {
    fn default() -> Self {
        Self {
            kept: Cache::builder()
                .max_capacity(MOST)
                .time_to_live(KEPT)
                // A list just read is the likeliest to be shared: none is
                // refused a place for being new, as TinyLFU would.
                .eviction_policy(EvictionPolicy::lru())
                .build(),
            shared: AtomicU64::new(0),
        }
    }
}

/// The notice a request fetches for, if it names one that reads as a
/// mark.
pub fn wanted(headers: &HeaderMap) -> Option<ChangeMark> {
    headers.get(MARK_HEADER)?.to_str().ok()?.parse().ok()
}

impl SharedLists {
    /// A list of the org for `query` that shows every change the notices
    /// up to `wanted` named.
    pub fn get(&self, org: OrgId, query: &str, wanted: ChangeMark) -> Option<Arc<Listed>> {
        let found = self.kept.get(&(org, query.to_owned()))?;
        found.read_after.covers(&wanted).then(|| {
            self.shared.fetch_add(1, Ordering::Relaxed);
            found.listed
        })
    }

    /// Pages made from a list another page read, since the start.
    pub fn shared_total(&self) -> u64 {
        self.shared.load(Ordering::Relaxed)
    }

    /// Keeps a list read after the notice of mark `read_after`, unless a
    /// later one is kept.
    pub fn put(&self, org: OrgId, query: String, read_after: ChangeMark, listed: Arc<Listed>) {
        self.kept.entry((org, query)).and_compute_with(|old| {
            let later_kept = old.is_some_and(|old| {
                let old = old.value().read_after;
                old != read_after && old.covers(&read_after)
            });
            if later_kept {
                Op::Nop
            } else {
                Op::Put(Kept { read_after, listed })
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn at(actor: u64, version: u64) -> ChangeMark {
        ChangeMark::At { actor, version }
    }

    fn listed(n: usize) -> Arc<Listed> {
        Arc::new(Listed {
            cards: Vec::with_capacity(n),
            next_cursor: Some(n.to_string()),
        })
    }

    #[test]
    fn a_list_serves_the_notices_up_to_its_stamp_and_the_same_query_only() {
        let lists = SharedLists::default();
        let org = OrgId::new_v7();
        lists.put(org, "limit=200".into(), at(3, 10), listed(1));
        assert!(lists.get(org, "limit=200", at(3, 10)).is_some());
        assert!(lists.get(org, "limit=200", at(3, 9)).is_some());
        assert!(
            lists.get(org, "limit=200", at(3, 11)).is_none(),
            "a later notice"
        );
        assert!(
            lists.get(org, "limit=200", at(4, 1)).is_none(),
            "another actor"
        );
        assert!(lists.get(org, "limit=200&status=done", at(3, 1)).is_none());
        let other = OrgId::new_v7();
        assert!(lists.get(other, "limit=200", at(3, 1)).is_none());
        assert_eq!(lists.shared_total(), 2);
    }

    #[test]
    fn a_fetch_wants_the_notice_its_header_names_when_it_is_a_mark() {
        let header = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(MARK_HEADER, value.parse().unwrap());
            wanted(&headers)
        };
        assert_eq!(header("3.10"), Some(at(3, 10)));
        assert_eq!(header("idle"), Some(ChangeMark::Idle));
        assert_eq!(header("garbage"), None);
        assert_eq!(header("3.x"), None);
        assert_eq!(wanted(&HeaderMap::new()), None);
    }

    #[test]
    fn the_latest_list_is_kept() {
        let lists = SharedLists::default();
        let org = OrgId::new_v7();
        lists.put(org, "q".into(), at(3, 10), listed(1));
        lists.put(org, "q".into(), at(3, 8), listed(2));
        let kept = lists
            .get(org, "q", at(3, 10))
            .expect("the later list stays");
        assert_eq!(kept.next_cursor.as_deref(), Some("1"));
        lists.put(org, "q".into(), at(3, 12), listed(3));
        let kept = lists
            .get(org, "q", at(3, 12))
            .expect("a later list replaces it");
        assert_eq!(kept.next_cursor.as_deref(), Some("3"));
    }

    #[test]
    fn the_lists_kept_are_bounded() {
        let lists = SharedLists::default();
        let org = OrgId::new_v7();
        for i in 0..MOST + 10 {
            lists.put(org, format!("q{i}"), at(1, 1), listed(0));
        }
        lists.kept.run_pending_tasks();
        assert_eq!(lists.kept.entry_count(), MOST);
        assert!(lists
            .get(org, &format!("q{}", MOST + 9), at(1, 1))
            .is_some());
        assert!(
            lists.get(org, "q0", at(1, 1)).is_none(),
            "the oldest went first"
        );
    }
}
