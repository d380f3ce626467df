//! What one node asks of another (several nodes on one PostgreSQL): an
//! operation on an org this node does not own, run by the org's owner, as
//! every change of an org is. Three need it: filing feedback in the feedback
//! org, revoking a blocked member's keys in each of the member's orgs, and
//! disabling a webhook endpoint the delivery worker gave up on.
//! The front end carries them (`Peers`, over HTTP), authenticated by a
//! token every node derives from the shared master key.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Engine;
use crate::api::{FeedbackFiled, SendFeedback, Timestamp};
use crate::cluster::Placement;
use crate::domain::{OrgId, TaskId, WebhookId};
use crate::error::EngineError;

/// An operation for the node that owns `org`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum PeerOp {
    /// A blocked member's keys in one org.
    RevokeMemberKeys { org: OrgId, email: String },
    /// A webhook endpoint that answered 410 or ran out of retries.
    DisableWebhook { org: OrgId, webhook: WebhookId },
    /// Feedback, as a task of the feedback org (`org`), from a member of
    /// another org.
    FileFeedback {
        org: OrgId,
        from_org: OrgId,
        from_email: String,
        feedback: SendFeedback,
    },
}

impl PeerOp {
    pub fn org(&self) -> OrgId {
        match self {
            PeerOp::RevokeMemberKeys { org, .. }
            | PeerOp::DisableWebhook { org, .. }
            | PeerOp::FileFeedback { org, .. } => *org,
        }
    }
}

/// Another node of the cluster, its token checked ([`Engine::peer_of`]):
/// what running its operations takes.
pub struct Peer(());

/// What the owner answers: the task feedback became, if it was that.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PeerAnswer {
    pub task_id: Option<TaskId>,
    pub created_at: Option<i64>,
}

impl PeerAnswer {
    pub fn filed(&self) -> Result<FeedbackFiled, EngineError> {
        match (self.task_id, self.created_at) {
            (Some(task_id), Some(at)) => Ok(FeedbackFiled {
                task_id,
                created_at: Timestamp(at),
            }),
            _ => Err(EngineError::Internal(
                "the feedback org's node filed no task".into(),
            )),
        }
    }
}

pub type PeerCall<'a> = Pin<Box<dyn Future<Output = Result<PeerAnswer, EngineError>> + Send + 'a>>;

/// How a node reaches another: implemented by the front end.
pub trait Peers: Send + Sync {
    /// Runs `op` on the node at `url`, presenting `token`.
    fn call<'a>(&'a self, url: &'a str, token: &'a str, op: &'a PeerOp) -> PeerCall<'a>;
}

impl Engine {
    /// Sets how this node reaches the others.
    pub fn set_peers(&self, peers: Arc<dyn Peers>) {
        let _ = self.inner.peers.set(peers);
    }

    /// The token nodes present to each other: derived from the master key
    /// they share, so only a node of the cluster has it.
    pub fn peer_token(&self) -> String {
        self.inner.directory.keyring().current().peer_token()
    }

    /// Runs `op` on the org's owner: here, or at the node that owns it,
    /// looked up afresh once if that node answers that the org moved.
    pub(super) async fn on_owner(&self, op: PeerOp) -> Result<PeerAnswer, EngineError> {
        let org = op.org();
        let mut fresh = false;
        loop {
            let result = match self.place(org, false, fresh).await? {
                Placement::Here => self.run_here(op.clone()).await,
                Placement::At(url) => match self.inner.peers.get() {
                    Some(peers) => peers.call(&url, &self.peer_token(), &op).await,
                    None => Err(EngineError::OrgMoving),
                },
                Placement::Moving => Err(EngineError::OrgMoving),
            };
            match result {
                Err(EngineError::OrgMoving) if !fresh => fresh = true,
                other => return other,
            }
        }
    }

    /// The node that presents `token` (none when the request carries
    /// none), if it is one of this cluster's: checked before anything of
    /// its request is read.
    pub fn peer_of(&self, token: Option<&str>) -> Result<Peer, EngineError> {
        let keyring = self.inner.directory.keyring();
        let known = token.is_some_and(|token| {
            std::iter::once(keyring.current())
                .chain(keyring.previous())
                .any(|k| crate::crypto::tokens_match(&k.peer_token(), token))
        });
        if !known {
            return Err(EngineError::Forbidden("not a node of this cluster".into()));
        }
        Ok(Peer(()))
    }

    /// `POST /internal/peer`: an operation another node asks of this one,
    /// run only if this node may own the org (never sent on again).
    pub async fn run_peer_op(&self, _: &Peer, op: PeerOp) -> Result<PeerAnswer, EngineError> {
        match self.place(op.org(), true, false).await? {
            Placement::Here => self.run_here(op).await,
            _ => Err(EngineError::OrgMoving),
        }
    }

    async fn run_here(&self, op: PeerOp) -> Result<PeerAnswer, EngineError> {
        match op {
            PeerOp::RevokeMemberKeys { org, email } => {
                self.revoke_member_keys(org, &email).await?;
                Ok(PeerAnswer::default())
            }
            PeerOp::DisableWebhook { org, webhook } => {
                self.disable_webhook_here(org, webhook).await?;
                Ok(PeerAnswer::default())
            }
            PeerOp::FileFeedback {
                org,
                from_org,
                from_email,
                feedback,
            } => {
                let filed = self
                    .file_feedback_here(org, from_org, &from_email, &feedback)
                    .await?;
                Ok(PeerAnswer {
                    task_id: Some(filed.task_id),
                    created_at: Some(filed.created_at.0),
                })
            }
        }
    }
}
