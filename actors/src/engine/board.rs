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
//! The change mark is what the board's script polls: a token that changes
//! whenever the org's open tasks do (the org actor's published version).
//! It reads only memory and is not counted against the org's limits; the
//! pages the script then fetches are.

use super::Engine;
use crate::domain::account::Caller;
use crate::domain::OrgId;
use crate::error::EngineError;

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
        match self.inner.routes.get(&org) {
            Some(route) => format!(
                "{}.{}",
                route.actor.get_id().pid(),
                self.inner.snapshots.version(org).unwrap_or(0)
            ),
            None => "idle".to_owned(),
        }
    }
}
