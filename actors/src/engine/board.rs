//! The board's sessions and its change mark.
//!
//! A member signs in to the board with an API key; the engine checks it as
//! `X-Api-Key` is checked, then opens a session named by a random id that
//! only the member's browser keeps (the store keeps its SHA-256, with the
//! org and key, so every node knows the session and a sign-out through any
//! node ends it at once). Every request of the session resolves the key
//! again, so a revoked key, a lost seat or a changed role takes effect on
//! the next request, as it does on the API.
//!
//! The change mark is a token that changes whenever the org's open tasks
//! do (the org actor's published version). The board's stream
//! (`watch_board`) sends it with each notice, and a page without the
//! stream polls it. Both read only memory and are not counted against the
//! org's limits; the pages and cards the script then fetches are.

use std::sync::Arc;

use super::Engine;
use crate::domain::account::Caller;
use crate::domain::open::StatusCounts;
use crate::domain::OrgId;
use crate::error::EngineError;
use crate::stats::OrgSnapshots;
use crate::supervisor::Routes;
use crate::watch::{BoardStream, OrgState};

/// How long a board session lasts after sign-in.
pub const BOARD_SESSION: std::time::Duration = std::time::Duration::from_secs(12 * 3600);

impl Engine {
    /// Opens a board session for the holder of `api_key`: its id, which
    /// only the client keeps, and the caller it acts as.
    pub async fn open_board_session(&self, api_key: &str) -> Result<(String, Caller), EngineError> {
        let caller = self.authenticate(Some(api_key)).await?;
        let id = crate::crypto::new_key_secret();
        let now = self.now();
        self.stored(
            self.inner
                .store
                .open_board_session(
                    &crate::crypto::hash_secret(&id),
                    caller.org_id,
                    caller.key_id,
                    now + BOARD_SESSION.as_millis() as i64,
                    now,
                )
                .await,
        )?;
        Ok((id, caller))
    }

    /// The caller of an open board session, its key checked afresh;
    /// `None` when the session is unknown, expired, or its key no longer
    /// works.
    pub async fn board_caller(&self, id: &str) -> Result<Option<Caller>, EngineError> {
        let Some(org_key) = self.board_session_of(id).await? else {
            return Ok(None);
        };
        match self.caller_of_key(org_key.1).await {
            Ok(caller) => Ok(Some(caller)),
            Err(EngineError::InvalidApiKey) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The org of an open board session (where a cluster sends its
    /// requests).
    pub async fn board_session_org(&self, id: &str) -> Result<Option<OrgId>, EngineError> {
        Ok(self.board_session_of(id).await?.map(|(org, _)| org))
    }

    async fn board_session_of(
        &self,
        id: &str,
    ) -> Result<Option<(OrgId, crate::domain::KeyId)>, EngineError> {
        self.check_store()?;
        self.stored(
            self.inner
                .store
                .board_session(&crate::crypto::hash_secret(id), self.now())
                .await,
        )
    }

    /// Ends a board session on every node.
    pub async fn close_board_session(&self, id: &str) -> Result<(), EngineError> {
        self.stored(
            self.inner
                .store
                .close_board_session(&crate::crypto::hash_secret(id))
                .await,
        )
    }

    /// A token that changes whenever the org's open tasks change (created,
    /// moved, edited, claimed, expired): the org actor's published version,
    /// named by the actor that published it. `idle` while no actor of the
    /// org runs here (nothing of it can change until one starts).
    pub fn org_change_mark(&self, org: OrgId) -> String {
        change_mark(&self.inner.routes, &self.inner.snapshots, org)
    }

    /// The org's open tasks per status as its actor last published them
    /// (none before its actor first ran here).
    pub fn org_open_counts(&self, org: OrgId) -> Option<StatusCounts> {
        self.inner.snapshots.counts(org)
    }

    /// The board's stream of the caller's org: a notice at most once a
    /// `watch::WINDOW_MS` while its tasks change, nothing while they do
    /// not. A page made at another mark than the current one (`since`) is
    /// told at once that it missed changes. Not counted: the fetches the
    /// notices lead to are. With several nodes only the org's owner
    /// serves it, since only its writer commits the org's events.
    pub fn watch_board(
        &self,
        caller: &Caller,
        since: Option<&str>,
    ) -> Result<BoardStream, EngineError> {
        let org = caller.org_id;
        if let Some(cluster) = &self.inner.cluster {
            if !cluster.serves(org) {
                return Err(cluster.refusal());
            }
        }
        let hub = &self.inner.hub;
        let notices = self
            .inner
            .board_feeds
            .subscribe(org, hub, &self.inner.board_state);
        let first = since.and_then(|since| {
            let (mark, counts) = (self.inner.board_state)(org);
            (mark != since).then(|| crate::watch::missed(mark, counts))
        });
        Ok(BoardStream::new(
            notices,
            first,
            hub,
            self.inner.clock.clone(),
        ))
    }

    /// The engine's clock (what a board compares a task's `run_at` with).
    pub fn board_now(&self) -> i64 {
        self.now()
    }

    /// The mark of the last notice the org's boards were sent here, while
    /// a board of the org streams here: what is read from now on shows
    /// every change the notices up to it named (`mark_covers`).
    pub fn board_noticed_mark(&self, org: OrgId) -> Option<Arc<str>> {
        self.inner.board_feeds.noticed(org)
    }

    /// Orgs whose boards' feed runs (one each, however many boards).
    pub fn board_feeds(&self) -> usize {
        self.inner.board_feeds.open()
    }
}

fn change_mark(routes: &Routes, snapshots: &OrgSnapshots, org: OrgId) -> String {
    match routes.get(&org) {
        Some(route) => format!(
            "{}.{}",
            route.actor.get_id().pid(),
            snapshots.version(org).unwrap_or(0)
        ),
        None => "idle".to_owned(),
    }
}

/// Whether a read made once the notice of mark `read_after` was sent shows
/// every change that the notices up to mark `wanted` named: both marks of
/// the same actor (a version counts within one actor's run only), and
/// `wanted` not later. A mark that does not read as one covers nothing.
pub fn mark_covers(read_after: &str, wanted: &str) -> bool {
    let version = |mark: &str| {
        let (actor, version) = mark.rsplit_once('.')?;
        Some((actor.to_owned(), version.parse::<u64>().ok()?))
    };
    match (version(read_after), version(wanted)) {
        (Some((a, read)), Some((b, wanted))) => a == b && wanted <= read,
        _ => false,
    }
}

/// What a board notice reads of an org: its change mark and its open
/// tasks per status, from memory.
pub(super) fn org_state(routes: &Routes, snapshots: &Arc<OrgSnapshots>) -> OrgState {
    let (routes, snapshots) = (routes.clone(), Arc::clone(snapshots));
    Arc::new(move |org| {
        (
            change_mark(&routes, &snapshots, org),
            snapshots.counts(org).unwrap_or_default(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::mark_covers;

    #[test]
    fn a_read_covers_the_notices_up_to_its_own_of_the_same_actor() {
        assert!(mark_covers("7.40", "7.40"));
        assert!(mark_covers("7.40", "7.3"));
        assert!(!mark_covers("7.40", "7.41"));
        assert!(!mark_covers("8.40", "7.3"), "another actor's versions");
        for bad in ["idle", "7.", "7.x", "", "7.-1"] {
            assert!(!mark_covers("7.40", bad), "{bad}");
            assert!(!mark_covers(bad, "7.1"), "{bad}");
        }
    }
}
