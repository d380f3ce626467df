//! Feedback and abuse: feedback becomes a task in the operator's feedback
//! org; a message the content filter rejects earns its sender a strike.
//! Strikes follow a member's email across orgs: enough of them block the
//! member (every key revoked, no new key issued anywhere until an operator
//! lifts it), and enough across one org suspend the org.

use serde_json::json;

use super::Engine;
use crate::api::{
    CreateOrg, CreateTasks, FeedbackFiled, FeedbackKind, FeedbackOrg, NewTag, NewTask, PatchOrg,
    SendFeedback, Text, UnblockMember, Unblocked,
};
use crate::domain::account::{Caller, Encryption, LimitKey, Principal, Role, SettingsChange, Tier};
use crate::domain::usage::RequestKind;
use crate::domain::OrgId;
use crate::error::EngineError;
use crate::filter::Verdict;
use crate::org::OrgMsg;

use super::peers::PeerOp;

/// Strikes that block a member.
pub const MEMBER_STRIKE_LIMIT: i64 = 3;
/// Strikes across one org's members that suspend the org.
pub const ORG_STRIKE_LIMIT: i64 = 10;
/// Name of the feedback org created at first start.
pub const FEEDBACK_ORG_NAME: &str = "taskq-feedback";
const FEEDBACK_OWNER: &str = "feedback@taskq.invalid";
/// The advisory lock under which a node finds or creates the feedback org.
const FEEDBACK_ORG_LOCK: i64 = 0x7461_736b_7166_6231;

impl Engine {
    /// The org that receives feedback: the configured one, the one created
    /// at an earlier start, or a new one. Makes sure its vocabulary has the
    /// feedback types.
    pub(super) async fn prepare_feedback_org(
        &self,
        configured: Option<OrgId>,
    ) -> Result<(OrgId, Caller), EngineError> {
        let store = &self.inner.store;
        let org = match configured {
            Some(org) => match store.get_org(org).await? {
                Some(_) => org,
                None => {
                    return Err(EngineError::Internal(format!(
                        "TASKQ_FEEDBACK_ORG names no org: {org}"
                    )))
                }
            },
            // Nodes starting together create it once.
            None => {
                store
                    .exclusively(FEEDBACK_ORG_LOCK, self.find_or_create_feedback_org())
                    .await??
            }
        };
        let owner = store
            .org_members(org)
            .await?
            .into_iter()
            .find(|m| m.role == Role::Owner)
            .ok_or_else(|| EngineError::Internal("the feedback org has no owner".into()))?;
        let caller = Caller {
            org_id: org,
            principal: Principal::Feedback,
            key_name: "feedback".into(),
            email: owner.email,
            role: Role::Owner,
        };
        // An org whose data key does not open (its master key is lost)
        // answers 500, as every such org does; the rest of the service
        // starts. Its tags are checked at a start that can open it.
        if let Err(e) = self.inner.directory.get(org).await {
            tracing::error!(
                org_id = %org,
                error = %e,
                "the feedback org does not open: feedback is refused until it does"
            );
            return Ok((org, caller));
        }
        let existing = match self.request(org, |reply| OrgMsg::ListTags { reply }).await {
            Ok(tags) => tags,
            // Another node owns it, and made its vocabulary when it did.
            Err(EngineError::OrgMoving) => return Ok((org, caller)),
            Err(e) => return Err(e),
        };
        let missing: Vec<NewTag> = FeedbackKind::ALL
            .iter()
            .map(|k| k.as_str())
            .filter(|t| !existing.iter().any(|e| e.name == *t))
            .map(|t| NewTag {
                name: t.to_owned(),
                strict: false,
                is_default: false,
                description: Some(format!("{t} feedback")),
            })
            .collect();
        if !missing.is_empty() {
            self.request(org, |reply| OrgMsg::CreateTags {
                caller: caller.clone(),
                items: missing.clone(),
                reply,
            })
            .await?;
        }
        Ok((org, caller))
    }

    async fn find_or_create_feedback_org(&self) -> Result<OrgId, EngineError> {
        if let Some(org) = self.inner.store.org_by_name(FEEDBACK_ORG_NAME).await? {
            return Ok(org);
        }
        let created = self
            .create_org(CreateOrg {
                name: FEEDBACK_ORG_NAME.into(),
                tier: Tier::Enterprise,
                encryption: Encryption::Managed,
                owner_email: FEEDBACK_OWNER.into(),
                seats: 5,
            })
            .await?;
        let org_id = created.org.org_id;
        let unlimited = PatchOrg {
            limits: Some(LimitKey::ALL.into_iter().map(|k| (k, None)).collect()),
            ..PatchOrg::default()
        };
        self.patch_org(org_id, unlimited).await?;
        tracing::info!(%org_id, "created the feedback org");
        Ok(org_id)
    }

    fn feedback(&self) -> &(OrgId, Caller) {
        self.inner
            .feedback
            .get()
            .expect("the feedback org is settled before the engine is handed out")
    }

    /// `GET /admin/feedback`.
    pub fn feedback_org(&self) -> FeedbackOrg {
        FeedbackOrg {
            org_id: self.feedback().0,
        }
    }

    /// `POST /feedback`.
    pub async fn send_feedback(
        &self,
        caller: &Caller,
        fb: SendFeedback,
    ) -> Result<FeedbackFiled, EngineError> {
        let (org, _) = self.feedback();
        // A feedback org that does not open is the server's fault, not
        // worth a retry, and not charged to the sender.
        self.inner.directory.get(*org).await?;
        self.admit(caller, RequestKind::Write).await?;
        let verdict = self
            .inner
            .feedback_filter
            .check(&fb.message)
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "feedback content filter unavailable");
                EngineError::FilterUnavailable
            })?;
        if verdict == Verdict::Abusive {
            self.strike(caller).await?;
            return Err(EngineError::invalid(
                "feedback rejected by the content filter",
            ));
        }
        let (org, _) = self.feedback();
        self.on_owner(PeerOp::FileFeedback {
            org: *org,
            from_org: caller.org_id,
            from_email: caller.email.clone(),
            feedback: fb,
        })
        .await?
        .filed()
    }

    /// Files feedback as a task of the feedback org, whose node this is.
    pub(super) async fn file_feedback_here(
        &self,
        org: OrgId,
        from_org: OrgId,
        from_email: &str,
        fb: &SendFeedback,
    ) -> Result<FeedbackFiled, EngineError> {
        let (feedback_org, system) = self.feedback();
        if org != *feedback_org {
            return Err(EngineError::Internal(format!(
                "{org} is not the feedback org"
            )));
        }
        let metadata = json!({
            "from_org": from_org,
            "from_email": from_email,
            "type": fb.kind,
        });
        let item = NewTask {
            description: Some(Text::Plain(fb.message.clone())),
            tags: Some(vec![fb.kind.as_str().to_owned()]),
            metadata: metadata.as_object().cloned(),
            ..NewTask::titled(fb.title())
        };
        let mut created = self
            .request(org, |reply| OrgMsg::CreateTasks {
                caller: system.clone(),
                request: CreateTasks {
                    tasks: vec![item.clone()],
                },
                reply,
            })
            .await?;
        let created = created
            .pop()
            .ok_or_else(|| EngineError::Internal("feedback task not created".into()))?;
        Ok(FeedbackFiled {
            task_id: created.task_id,
            created_at: created.created_at,
        })
    }

    async fn strike(&self, caller: &Caller) -> Result<(), EngineError> {
        let store = &self.inner.store;
        let (member, org_total) = store
            .record_strike(&caller.email, caller.org_id, self.now())
            .await?;
        tracing::warn!(org_id = %caller.org_id, email = %caller.email, strikes = member, "feedback rejected by the content filter: strike recorded");
        if member >= MEMBER_STRIKE_LIMIT {
            self.block_member(&caller.email).await?;
        }
        if org_total >= ORG_STRIKE_LIMIT {
            let was = self.inner.directory.get(caller.org_id).await?;
            self.change_settings(caller.org_id, SettingsChange::suspend())
                .await?;
            if !was.record.suspended {
                tracing::warn!(org_id = %caller.org_id, strikes = org_total, "organization suspended after repeated strikes");
            }
        }
        Ok(())
    }

    /// Blocks a member: every key of theirs in every org stops working.
    async fn block_member(&self, email: &str) -> Result<(), EngineError> {
        self.inner.store.block_member(email, self.now()).await?;
        // Read after the block committed: a key issued in an org this
        // misses checks for the block itself (`unless_blocked_meanwhile`).
        for org in self.inner.store.member_orgs(email).await? {
            self.on_owner(PeerOp::RevokeMemberKeys {
                org,
                email: email.to_owned(),
            })
            .await?;
        }
        tracing::warn!(email, "member blocked after repeated strikes");
        Ok(())
    }

    /// Refuses issuing a key to a blocked member.
    pub(super) async fn refuse_if_blocked(&self, email: &str) -> Result<(), EngineError> {
        if self.inner.store.is_blocked(email).await? {
            return Err(EngineError::MemberBlocked);
        }
        Ok(())
    }

    /// `POST /admin/members/unblock`.
    pub async fn unblock_member(&self, request: UnblockMember) -> Result<Unblocked, EngineError> {
        let email = request.email;
        if !self.inner.store.unblock_member(&email).await? {
            return Err(EngineError::NotFound(format!("{email} is not blocked")));
        }
        tracing::info!(email, "member unblocked by the operator");
        Ok(Unblocked {
            email,
            unblocked: true,
        })
    }
}
