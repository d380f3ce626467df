//! Data keys: the `/org/dek` routes of BYOK orgs, the one rule for features
//! that must read content, and master-key rotation.
//!
//! A rotation installs a keyring whose current key is the new one and whose
//! previous keys still open old wraps, then re-wraps every managed org's data
//! key under the current key, one org per statement, each conditional on the
//! wrap it read. A crash at any point leaves every wrap naming a key the
//! keyring holds; running the rotation again finishes it. The previous keys
//! are dropped only when the store holds no wrap by them, counted once no
//! wrap that may have read an old key is still in flight (`wraps`), on
//! any node, so no wrap by a dropped key can appear later.
//! Webhook signing secrets are sealed by the master key itself (a BYOK org
//! has no data key) and move the same way: re-sealed by the current key,
//! each conditional on the seal read, and counted with the wraps, so the
//! old keys stay until no secret needs them.

use std::sync::Arc;

use super::Engine;
use crate::api::{MasterKeyRotated, OrgDekCreated, OrgDekView, PutOrgDek, Timestamp, Unavailable};
use crate::crypto::Keyring;
use crate::domain::account::{Caller, Encryption, Role};
use crate::domain::error::RuleError;
use crate::domain::usage::RequestKind;
use crate::domain::OrgId;
use crate::error::EngineError;
use crate::store::ClientDek;

/// Wraps re-wrapped per store read.
const REWRAP_PAGE: i64 = 256;

impl Engine {
    /// `{available: false, reason: "byok"}` when the server cannot read the
    /// org's content: every feature that must read it answers this first.
    pub async fn unreadable_content(
        &self,
        caller: &Caller,
    ) -> Result<Option<Unavailable>, EngineError> {
        let entry = self.inner.directory.get(caller.org_id).await?;
        Ok((entry.record.encryption == Encryption::Byok).then(|| Unavailable::because("byok")))
    }

    /// `GET /org/dek`: the BYOK org's enrolled data key.
    pub async fn org_dek(&self, caller: &Caller) -> Result<OrgDekView, EngineError> {
        self.admit(caller, RequestKind::Read).await?;
        self.require_client_keys(caller.org_id).await?;
        let dek = self
            .inner
            .store
            .client_dek(caller.org_id)
            .await?
            .ok_or_else(|| EngineError::NotFound("no data key enrolled for this org".into()))?;
        Ok(OrgDekView {
            wrapped_dek: dek.wrapped_dek,
            kms_key_id: dek.kms_key_id,
            key_provider: "client_byok",
            org_id: caller.org_id,
            created_at: Timestamp(dek.created_at),
        })
    }

    /// `PUT /org/dek`: the owner enrolls the org's data key, once.
    pub async fn put_org_dek(
        &self,
        caller: &Caller,
        request: PutOrgDek,
    ) -> Result<OrgDekCreated, EngineError> {
        self.admit(caller, RequestKind::Write).await?;
        if caller.role != Role::Owner {
            return Err(RuleError::Forbidden("owner role required".into()).into());
        }
        self.require_client_keys(caller.org_id).await?;
        let dek = ClientDek {
            wrapped_dek: request.wrapped_dek,
            kms_key_id: request.kms_key_id,
            created_at: self.now(),
        };
        if !self
            .inner
            .store
            .insert_client_dek(caller.org_id, &dek)
            .await?
        {
            return Err(EngineError::Conflict(
                "a data key is already enrolled for this org".into(),
            ));
        }
        tracing::info!(org_id = %caller.org_id, "BYOK data key enrolled");
        Ok(OrgDekCreated {
            status: "created",
            org_id: caller.org_id,
        })
    }

    async fn require_client_keys(&self, org: OrgId) -> Result<(), EngineError> {
        match self.inner.directory.get(org).await?.record.encryption {
            Encryption::Byok => Ok(()),
            Encryption::Managed => Err(EngineError::ManagedKeys),
        }
    }

    /// The master keys in use.
    pub fn keyring(&self) -> Arc<Keyring> {
        self.inner.directory.keyring()
    }

    /// Installs `keyring`, re-wraps every managed org's data key under its
    /// current key, and drops its previous keys once no wrap needs them.
    pub async fn rotate_master(&self, keyring: Keyring) -> Result<MasterKeyRotated, EngineError> {
        let current = keyring.current().id().to_owned();
        // Several nodes: every live node must hold the new key before any
        // wrap moves to it; then all of them make new wraps with it.
        if let Some(cluster) = &self.inner.cluster {
            let others = self.stored(cluster.nodes().await)?;
            for node in others
                .iter()
                .filter(|n| n.live && n.node_id != cluster.node_id())
            {
                if !node.master_keys.split(',').any(|k| k == current) {
                    return Err(EngineError::Conflict(format!(
                        "node {} ({}) does not hold the new master key {current}: restart \
                         every node with it in TASKQ_MASTER_KEY_PREVIOUS first",
                        node.node_id, node.advertise_url
                    )));
                }
            }
        }
        // On PostgreSQL, the key every node makes new wraps with, also when
        // the rotation runs with the servers stopped.
        if self.backend() == "postgres" {
            self.stored(self.inner.store.set_cluster_master_key(&current).await)?;
        }
        // New wraps use the new key; once the ones that may have read the
        // old key are stored, the heartbeat may say this node wraps with it.
        self.inner.directory.set_keyring(keyring.clone());
        self.inner.wraps.settled().await;
        if let Some(cluster) = &self.inner.cluster {
            cluster.hold_keys(&keyring);
        }
        let everywhere = self.until_every_node_makes_wraps_with(&current).await?;
        tracing::info!(master_key_id = %current, "master key rotation: re-wrapping data keys");
        let mut rewrapped = 0;
        // Every wrap by an old key is stored by now (on every node, once
        // `everywhere`), but a pass racing a crash-resumed one may leave
        // one behind: a few passes find it.
        for _ in 0..3 {
            rewrapped += self.rewrap_all(&current).await?;
            self.reseal_webhook_secrets(&current).await?;
            if everywhere && self.inner.store.count_wraps_not_under(&current).await? == 0 {
                let ring = self.keyring();
                let retired = ring.previous().len();
                let kept = Keyring::new(ring.current().clone(), Vec::new());
                if let Some(cluster) = &self.inner.cluster {
                    cluster.hold_keys(&kept);
                }
                self.inner.directory.set_keyring(kept);
                tracing::info!(
                    master_key_id = %current,
                    rewrapped,
                    retired,
                    "master key rotation finished"
                );
                return Ok(MasterKeyRotated {
                    master_key_id: current,
                    rewrapped,
                    previous_keys_retired: true,
                });
            }
        }
        Ok(MasterKeyRotated {
            master_key_id: current,
            rewrapped,
            previous_keys_retired: false,
        })
    }

    /// Several nodes: waits (a few heartbeats at most) until every live
    /// node says `current` is the key it wraps with; true at once alone.
    /// False when one did not follow, and then the old keys are kept.
    async fn until_every_node_makes_wraps_with(&self, current: &str) -> Result<bool, EngineError> {
        let Some(cluster) = &self.inner.cluster else {
            return Ok(true);
        };
        for _ in 0..50 {
            let nodes = self.stored(cluster.nodes().await)?;
            if nodes
                .iter()
                .filter(|n| n.live)
                .all(|n| n.master_keys.split(',').next() == Some(current))
            {
                return Ok(true);
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        tracing::warn!(
            master_key_id = %current,
            "not every node wraps with the new master key yet: the old keys are kept"
        );
        Ok(false)
    }

    /// One pass over the webhook secrets not sealed by `current`: each
    /// re-sealed by it, conditional on the seal read.
    async fn reseal_webhook_secrets(&self, current: &str) -> Result<u64, EngineError> {
        let ring = self.keyring();
        let mut moved = 0;
        for slot in self.inner.store.webhook_secrets_not_under(current).await? {
            let (org, webhook, _, sealed) = &slot;
            let Some(new) = ring
                .reseal_webhook_secret(*org, *webhook, sealed)
                .map_err(|e| {
                    EngineError::Internal(format!(
                        "a webhook secret of org {org} does not open: {e}"
                    ))
                })?
            else {
                continue;
            };
            if self.inner.store.reseal_webhook_secret(&slot, &new).await? {
                moved += 1;
            }
        }
        Ok(moved)
    }

    /// One pass over the wraps not under `current`.
    async fn rewrap_all(&self, current: &str) -> Result<u64, EngineError> {
        let mut after = None;
        let mut moved = 0;
        loop {
            let page = self
                .inner
                .store
                .wraps_not_under(current, after, REWRAP_PAGE)
                .await?;
            let Some((last, _)) = page.last() else {
                return Ok(moved);
            };
            after = Some(*last);
            let ring = self.keyring();
            for (org, wrapped) in page {
                let Some(new) = ring.rewrap(org, &wrapped).map_err(|e| {
                    EngineError::Internal(format!("the data key of org {org} does not open: {e}"))
                })?
                else {
                    continue;
                };
                if self.inner.store.rewrap_dek(org, &wrapped, &new).await? {
                    moved += 1;
                    self.pause_rewrap_for_tests(moved).await;
                }
            }
        }
    }

    #[cfg(feature = "test-hooks")]
    async fn pause_rewrap_for_tests(&self, moved: u64) {
        if self.inner.rewrap_pause_after == Some(moved) {
            tracing::warn!(moved, "test hook: master key rotation paused");
            std::future::pending::<()>().await;
        }
    }

    #[cfg(not(feature = "test-hooks"))]
    async fn pause_rewrap_for_tests(&self, _moved: u64) {}
}
