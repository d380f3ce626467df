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
//! The change mark (`domain::mark`) changes whenever the org's open tasks
//! do (the org actor's version). The board's stream (`watch_board`) sends
//! it with each notice, and a page without the stream polls it. Both read
//! only memory and are not counted against the org's limits; the pages
//! and cards the script then fetches are.

use std::sync::Arc;

use super::Engine;
use crate::domain::account::Caller;
use crate::domain::mark::{ChangeMark, MarkedCounts};
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
                    caller.key_id().ok_or(EngineError::InvalidApiKey)?,
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

    /// A mark that changes whenever the org's open tasks change (created,
    /// moved, edited, claimed, expired): the org actor's published version,
    /// named by the actor that published it. Idle while no actor of the
    /// org runs here (nothing of it can change until one starts).
    pub fn org_change_mark(&self, org: OrgId) -> ChangeMark {
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
        since: Option<ChangeMark>,
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
            let now = (self.inner.board_state)(org);
            (now.mark != since).then(|| crate::watch::missed(now))
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
    /// every change the notices up to it named (`ChangeMark::covers`).
    pub fn board_noticed_mark(&self, org: OrgId) -> Option<ChangeMark> {
        self.inner.board_feeds.noticed(org)
    }

    /// Orgs whose boards' feed runs (one each, however many boards).
    pub fn board_feeds(&self) -> usize {
        self.inner.board_feeds.open()
    }
}

fn change_mark(routes: &Routes, snapshots: &OrgSnapshots, org: OrgId) -> ChangeMark {
    match routes.get(&org) {
        Some(route) => ChangeMark::At {
            actor: route.actor.get_id().pid(),
            version: snapshots.version(org).unwrap_or(0),
        },
        None => ChangeMark::Idle,
    }
}

/// What a board notice reads of an org: its change mark and its open
/// tasks per status, from memory.
pub(super) fn org_state(routes: &Routes, snapshots: &Arc<OrgSnapshots>) -> OrgState {
    let (routes, snapshots) = (routes.clone(), Arc::clone(snapshots));
    Arc::new(move |org| MarkedCounts {
        mark: change_mark(&routes, &snapshots, org),
        counts: snapshots.counts(org).unwrap_or_default(),
    })
}
