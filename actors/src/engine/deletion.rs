//! An org's deletion (`DELETE /admin/orgs/{id}`): crypto-shredding at
//! once, the removal of its rows in the background.
//!
//! The org's actor commits the shredding (the org marked deleted, its data
//! key's wrap and envelope keys destroyed, its keys, schedules, webhooks
//! and board sessions removed) and takes no message after it; the engine
//! then forgets the org's entry, cipher and authentications, so from the
//! answer on its keys are refused and nothing can open what it stored. A
//! deleted org is never loaded again: the store reads it as being deleted
//! (`StoredOrg::Deleting`), which the operator's `GET` shows with what is
//! left of it, a repeated `DELETE` answers as the first did, and every
//! other operator route refuses (409). Its rows then go a batch at a time
//! through the writer, its own row last; from then on the org answers 404
//! as an id that never was. A restart resumes a removal that did not
//! finish.

use std::time::Duration;

use super::writer_load::{Pacer, Pacing};
use super::Engine;
use crate::api::OrgDeleting;
use crate::domain::OrgId;
use crate::error::EngineError;
use crate::org::OrgMsg;
use crate::store::{WriteBatch, WriteOp};

/// How often the engine looks for deleted orgs whose rows remain (after a
/// restart, or a removal that failed).
const RESUME_EVERY: Duration = Duration::from_secs(60);
/// The pause between two steps of a removal, so other writes pass; longer
/// while the writers are busy with others' work. A step is one `PurgeOrg`
/// batch, whatever the load.
const PACED: Pacing = Pacing {
    step: 1,
    pause: Duration::from_millis(20),
    busy_step: 1,
    busy_pause: Duration::from_millis(100),
};
/// The test hook's removal: at once.
const AT_ONCE: Pacing = Pacing::unpaced(1);

impl Engine {
    /// `DELETE /admin/orgs/{id}`; again while its rows are removed, the
    /// same answer.
    pub async fn delete_org(&self, org: OrgId) -> Result<OrgDeleting, EngineError> {
        match self.inner.directory.get(org).await {
            Err(EngineError::OrgDeleting) => return Ok(OrgDeleting::new(org)),
            found => found?,
        };
        if org == self.feedback_org().org_id {
            return Err(EngineError::Conflict(
                "the feedback org cannot be deleted while it receives feedback".into(),
            ));
        }
        if let Err(e) = self.request(org, |reply| OrgMsg::Delete { reply }).await {
            // A DELETE racing this one shredded the org first.
            return match self.org_record(org).await {
                Err(EngineError::OrgDeleting) => Ok(OrgDeleting::new(org)),
                _ => Err(e),
            };
        }
        self.inner.directory.forget(org);
        self.forget_org(org);
        let engine = self.clone();
        tokio::spawn(async move {
            if let Err(e) = engine.purge_org(org, PACED).await {
                tracing::warn!(org_id = %org, error = %e, "removing a deleted org's rows; resumed later");
            }
        });
        Ok(OrgDeleting::new(org))
    }

    /// Resumes, every `RESUME_EVERY`, the removal of deleted orgs' rows.
    pub(super) async fn purge_periodically(self) {
        loop {
            tokio::time::sleep(RESUME_EVERY).await;
            if let Err(e) = self.purge(PACED).await {
                tracing::warn!(error = %e, "removing deleted orgs' rows; resumed later");
            }
        }
    }

    /// Removes every deleted org's rows now (the test hook's way to await
    /// the removal).
    pub async fn purge_deleted_orgs(&self) -> Result<usize, EngineError> {
        self.purge(AT_ONCE).await
    }

    async fn purge(&self, pacing: Pacing) -> Result<usize, EngineError> {
        let orgs = self.stored(self.inner.store.deleting_orgs().await)?;
        for org in &orgs {
            self.purge_org(*org, pacing).await?;
        }
        Ok(orgs.len())
    }

    async fn purge_org(&self, org: OrgId, pacing: Pacing) -> Result<(), EngineError> {
        let mut pacer = Pacer::new(pacing);
        let mut steps = 0;
        loop {
            self.removal_step_allowed().await;
            let pace = pacer.pace(self, steps);
            self.write_directly(org, WriteOp::PurgeOrg).await?;
            steps += 1;
            if !self.stored(self.inner.store.org_rows_left(org).await)? {
                break;
            }
            Pacer::pause(pace).await;
        }
        // Steps racing (a resumed removal and the first) may both get here.
        self.write_directly(org, WriteOp::PurgeOrg).await?;
        // The org's row goes last: once it is gone, nothing of it is left.
        self.stored(self.inner.store.drop_org_owner(org).await)?;
        self.write_directly(org, WriteOp::DropOrg).await?;
        tracing::info!(org_id = %org, "deleted org's rows removed");
        Ok(())
    }

    /// A write of a deleted org, which has no actor to make it.
    async fn write_directly(&self, org: OrgId, op: WriteOp) -> Result<(), EngineError> {
        let commit = self
            .inner
            .writers
            .reserve(org)?
            .submit(WriteBatch::new(org, vec![op]));
        match commit.await {
            Ok(result) => self.stored(result),
            Err(_) => Err(EngineError::Internal("the writer stopped".into())),
        }
    }
}

/// Test hook: how many more steps the removals of deleted orgs' rows may
/// take before they wait, so a test can look at an org while its removal
/// runs; `None` (as at start): as many as they need.
#[cfg(feature = "test-hooks")]
pub(super) struct RemovalHold(tokio::sync::watch::Sender<Option<u64>>);

#[cfg(feature = "test-hooks")]
impl Default for RemovalHold {
    fn default() -> Self {
        Self(tokio::sync::watch::Sender::new(None))
    }
}

#[cfg(feature = "test-hooks")]
impl RemovalHold {
    /// Waits until a step is allowed, and takes it.
    async fn step(&self) {
        let mut allowance = self.0.subscribe();
        loop {
            // Errs only once the sender is gone, and `self` holds it.
            let _ = allowance.wait_for(|a| *a != Some(0)).await.map(drop);
            let mut taken = false;
            self.0.send_if_modified(|a| match a {
                None => {
                    taken = true;
                    false
                }
                Some(0) => false,
                Some(n) => {
                    *n -= 1;
                    taken = true;
                    true
                }
            });
            if taken {
                return;
            }
        }
    }
}

impl Engine {
    /// Test hook: the removals of deleted orgs' rows take `steps` more
    /// steps, then wait until this is called again; `None` lets them run.
    /// The test hook that runs the removals at once waits too.
    #[cfg(feature = "test-hooks")]
    pub fn hold_removals(&self, steps: Option<u64>) {
        self.inner.removal_hold.0.send_replace(steps);
    }

    #[cfg(feature = "test-hooks")]
    async fn removal_step_allowed(&self) {
        self.inner.removal_hold.step().await;
    }

    #[cfg(not(feature = "test-hooks"))]
    async fn removal_step_allowed(&self) {}
}
