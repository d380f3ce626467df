//! An org's deletion (`DELETE /admin/orgs/{id}`): crypto-shredding at
//! once, the removal of its rows in the background.
//!
//! The org's actor commits the shredding (the org marked deleted, its data
//! key's wrap and envelope keys destroyed, its keys, schedules, webhooks
//! and board sessions removed) and takes no message after it; the engine
//! then forgets the org's entry, cipher and authentications, so from the
//! answer on its keys are refused and nothing can open what it stored. A
//! deleted org is never loaded again: the store reads it as absent. Its
//! rows then go a batch at a time through the writer, its own row last.
//! A restart resumes a removal that did not finish.

use std::time::Duration;

use super::Engine;
use crate::api::OrgDeleting;
use crate::domain::OrgId;
use crate::error::EngineError;
use crate::org::OrgMsg;
use crate::store::{WriteBatch, WriteOp};

/// How often the engine looks for deleted orgs whose rows remain (after a
/// restart, or a removal that failed).
const RESUME_EVERY: Duration = Duration::from_secs(60);
/// The pause between two steps of a removal, so other writes pass.
const BETWEEN_STEPS: Duration = Duration::from_millis(20);

impl Engine {
    /// `DELETE /admin/orgs/{id}`.
    pub async fn delete_org(&self, org: OrgId) -> Result<OrgDeleting, EngineError> {
        let deleting = OrgDeleting {
            org_id: org,
            deleting: true,
        };
        if self.stored(self.inner.store.org_deleting(org).await)? {
            return Ok(deleting);
        }
        self.inner.directory.get(org).await?;
        if org == self.feedback_org().org_id {
            return Err(EngineError::Conflict(
                "the feedback org cannot be deleted while it receives feedback".into(),
            ));
        }
        self.request(org, |reply| OrgMsg::Delete { reply }).await?;
        self.inner.directory.forget(org);
        self.forget_org(org);
        let engine = self.clone();
        tokio::spawn(async move {
            if let Err(e) = engine.purge_org(org, BETWEEN_STEPS).await {
                tracing::warn!(org_id = %org, error = %e, "removing a deleted org's rows; resumed later");
            }
        });
        Ok(deleting)
    }

    /// Resumes, every `RESUME_EVERY`, the removal of deleted orgs' rows.
    pub(super) async fn purge_periodically(self) {
        loop {
            tokio::time::sleep(RESUME_EVERY).await;
            if let Err(e) = self.purge(BETWEEN_STEPS).await {
                tracing::warn!(error = %e, "removing deleted orgs' rows; resumed later");
            }
        }
    }

    /// Removes every deleted org's rows now (the test hook's way to await
    /// the removal).
    pub async fn purge_deleted_orgs(&self) -> Result<usize, EngineError> {
        self.purge(Duration::ZERO).await
    }

    async fn purge(&self, pause: Duration) -> Result<usize, EngineError> {
        let orgs = self.stored(self.inner.store.deleting_orgs().await)?;
        for org in &orgs {
            self.purge_org(*org, pause).await?;
        }
        Ok(orgs.len())
    }

    async fn purge_org(&self, org: OrgId, pause: Duration) -> Result<(), EngineError> {
        loop {
            self.write_directly(org, WriteOp::PurgeOrg).await?;
            if !self.stored(self.inner.store.org_rows_left(org).await)? {
                break;
            }
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
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
