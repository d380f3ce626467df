//! The operator API (orgs, members, key resets) and members' own keys.

use std::sync::Arc;

use super::Engine;
use crate::api::{
    AddMember, AddedMember, CreateKey, CreateOrg, CreatedOrg, IssuedKey, KeyCreated, KeyList,
    KeyView, OrgAnswer, OrgBeingDeleted, OrgDeleting, OrgDetail, OrgView, OwnerKey, PatchOrg,
    ResetKey, StoredCounts, Timestamp,
};
use crate::directory::OrgEntry;
use crate::domain::account::{
    Caller, Encryption, KeyRecord, MemberRecord, OrgRecord, Role, SettingsChange,
};
use crate::domain::usage::RequestKind;
use crate::domain::{KeyId, OrgId};
use crate::error::EngineError;
use crate::org::{format_api_key, NewMember, OrgMsg};

/// An org id from a path; one that does not parse names no org.
pub fn parse_org_id(s: &str) -> Result<OrgId, EngineError> {
    s.parse()
        .map_err(|_| EngineError::NotFound("organization not found".into()))
}

impl Engine {
    /// `POST /admin/orgs`.
    pub async fn create_org(&self, request: CreateOrg) -> Result<CreatedOrg, EngineError> {
        self.refuse_if_blocked(&request.owner_email).await?;
        // A rotation waits for this wrap to be stored.
        let _wrap = self.inner.wraps.enter();
        let now = self.now();
        let org_id = OrgId::new_v7();
        let record = OrgRecord {
            org_id,
            name: request.name,
            tier: request.tier,
            encryption: request.encryption,
            seats: request.seats,
            suspended: false,
            limit_overrides: self.inner.new_org_limits.overrides(),
            wrapped_dek: (request.encryption == Encryption::Managed)
                .then(|| self.keyring().current().new_wrapped_dek(org_id)),
            idp_enrolled: false,
            retention_days: None,
            created_at: now,
        };
        let owner = MemberRecord {
            org_id,
            email: request.owner_email.clone(),
            role: Role::Owner,
            seated: true,
            profile_tags: Vec::new(),
            joined_at: now,
        };
        let key_id = KeyId::new_v7();
        let secret = crate::crypto::new_key_secret();
        let key = KeyRecord {
            key_id,
            org_id,
            email: request.owner_email.clone(),
            name: "owner".into(),
            secret_hash: crate::crypto::hash_secret(&secret),
            active: true,
            created_at: now,
        };
        self.inner.store.insert_org(&record, &owner, &key).await?;
        let created = CreatedOrg {
            org: OrgView::from(&record),
            owner: OwnerKey {
                email: request.owner_email,
                role: Role::Owner,
                key_name: key.name,
                api_key: format_api_key(org_id, key_id, &secret),
            },
        };
        let org = record.org_id;
        self.inner.directory.install_stored(record)?;
        self.report_on(org);
        self.unless_blocked_meanwhile(org, &created.owner.email)
            .await?;
        Ok(created)
    }

    /// The org's record as stored now; `OrgDeleting` while its deletion runs.
    pub(super) async fn org_record(&self, org: OrgId) -> Result<OrgRecord, EngineError> {
        crate::directory::live(self.stored(self.inner.store.find_org(org).await)?)
    }

    /// `GET /admin/orgs/{id}`: the org, or what is left of it while its
    /// deletion runs.
    pub async fn get_org(&self, org: OrgId) -> Result<OrgAnswer, EngineError> {
        match self.org_record(org).await {
            Ok(record) => Ok(OrgAnswer::Org(OrgDetail {
                org: OrgView::from(&record),
                stored: self.count_stored(org).await?,
            })),
            Err(EngineError::OrgDeleting) => {
                let (tasks, events) = self.stored(self.inner.store.stored_counts(org).await)?;
                Ok(OrgAnswer::Deleting(OrgBeingDeleted {
                    org: OrgDeleting::new(org),
                    remaining: StoredCounts { tasks, events },
                }))
            }
            Err(e) => Err(e),
        }
    }

    /// `PATCH /admin/orgs/{id}`.
    pub async fn patch_org(&self, org: OrgId, patch: PatchOrg) -> Result<OrgView, EngineError> {
        let entry = self.change_settings(org, patch.into()).await?;
        Ok(OrgView::from(&entry.record))
    }

    /// Changes an org's settings through its actor, the record's one
    /// writer, and installs the new entry in the directory once the change
    /// is durable, so the next request (its authentication, its limits)
    /// sees it, whichever path made the change.
    pub(super) async fn change_settings(
        &self,
        org: OrgId,
        change: SettingsChange,
    ) -> Result<Arc<OrgEntry>, EngineError> {
        self.inner.directory.get(org).await?;
        let entry = self
            .request(org, |reply| OrgMsg::ChangeSettings {
                change: change.clone(),
                reply,
            })
            .await?;
        self.inner.directory.install(entry.clone());
        Ok(entry)
    }

    /// `POST /admin/orgs/{id}/members`.
    pub async fn add_member(
        &self,
        org: OrgId,
        request: AddMember,
    ) -> Result<AddedMember, EngineError> {
        self.org_record(org).await?;
        self.refuse_if_blocked(&request.email).await?;
        let member = NewMember {
            email: request.email,
            role: request.role,
            key_name: request.key_name,
        };
        let (member, key) = self
            .request(org, |reply| OrgMsg::AddMember {
                member: member.clone(),
                reply,
            })
            .await?;
        self.unless_blocked_meanwhile(org, &member.email).await?;
        Ok(AddedMember {
            email: member.email,
            role: member.role,
            key_name: key.record.name,
            api_key: key.api_key,
            seated: member.seated,
        })
    }

    /// `POST /admin/orgs/{id}/members/{email}/keys`: the operator's key reset.
    pub async fn reset_key(
        &self,
        org: OrgId,
        email: &str,
        request: ResetKey,
    ) -> Result<IssuedKey, EngineError> {
        self.org_record(org).await?;
        let email = email.to_lowercase();
        self.refuse_if_blocked(&email).await?;
        let key = self
            .request(org, |reply| OrgMsg::IssueKey {
                email: email.clone(),
                name: request.key_name.clone(),
                reply,
            })
            .await?;
        self.unless_blocked_meanwhile(org, &email).await?;
        Ok(IssuedKey {
            key_name: key.record.name,
            api_key: key.api_key,
        })
    }

    /// `POST /keys`: a new key for the caller's own member.
    pub async fn create_key(
        &self,
        caller: &Caller,
        request: CreateKey,
    ) -> Result<KeyCreated, EngineError> {
        let key = self
            .request(caller.org_id, |reply| OrgMsg::CreateKey {
                caller: caller.clone(),
                name: request.name.clone(),
                reply,
            })
            .await?;
        Ok(KeyCreated {
            key_id: key.record.key_id,
            name: key.record.name,
            api_key: key.api_key,
        })
    }

    /// `GET /keys`: the caller's member's keys, never their secrets.
    pub async fn list_keys(&self, caller: &Caller) -> Result<KeyList, EngineError> {
        self.check_store()?;
        self.admit(caller, RequestKind::Read).await?;
        let keys = self
            .stored(self.inner.store.org_keys(caller.org_id).await)?
            .into_iter()
            .filter(|k| k.email == caller.email)
            .map(|k| KeyView {
                key_id: k.key_id,
                name: k.name,
                created_at: Timestamp(k.created_at),
                active: k.active,
            })
            .collect();
        Ok(KeyList { keys })
    }

    /// `DELETE /keys/{key_id}`: the key stops working at once. An id that
    /// does not parse names no key of the caller's.
    pub async fn revoke_key(&self, caller: &Caller, key_id: &str) -> Result<(), EngineError> {
        let key_id: Option<KeyId> = key_id.parse().ok();
        self.request(caller.org_id, |reply| OrgMsg::RevokeKey {
            caller: caller.clone(),
            key_id,
            reply,
        })
        .await?;
        if let Some(key_id) = key_id {
            self.forget_keys(&[key_id]);
        }
        Ok(())
    }

    /// Test hook, after the engine's clock moved: every running org actor
    /// looks at what became due (leases, waiting tasks, schedule ticks) now
    /// rather than when its timers, armed for the old time, fire.
    #[cfg(feature = "test-hooks")]
    pub fn clock_moved(&self) {
        self.inner.hub.clock_moved();
        for route in self.inner.routes.iter() {
            let _ = route.actor.cast(OrgMsg::TimeTick);
        }
    }

    /// Test hook: expires the org's leases that are due by the engine's
    /// clock, without waiting for the actor's timer, and waits until the
    /// expiry is committed.
    #[cfg(feature = "test-hooks")]
    pub async fn expire_leases_now(&self, org: OrgId) -> Result<(), EngineError> {
        let route = self.resolve(org, None).await?;
        match route
            .actor
            .call(OrgMsg::ExpireLeases, Some(self.inner.call_timeout))
            .await
        {
            Ok(ractor::rpc::CallResult::Success(())) => {}
            Ok(ractor::rpc::CallResult::Timeout) => return Err(EngineError::Timeout),
            _ => return Err(EngineError::ActorUnavailable),
        }
        self.inner.writers.barrier(org).await?;
        Ok(())
    }

    /// Test hook: the store refuses every write as unavailable until the
    /// outage is lifted (a disk full or read-only, for a backend a test
    /// cannot cut the connection to).
    #[cfg(feature = "test-hooks")]
    pub fn simulate_store_outage(&self, on: bool) {
        self.inner.health.simulate_outage(on);
    }

    /// Test hook: panics the org's actor and returns once it has restarted.
    #[cfg(feature = "test-hooks")]
    pub async fn crash_org(&self, org: OrgId) -> Result<(), EngineError> {
        self.org_record(org).await?;
        self.resolve(org, None).await?;
        let _ = self
            .inner
            .supervisor
            .call(
                |r| crate::supervisor::SupervisorMsg::Crash(org, r),
                Some(self.inner.call_timeout),
            )
            .await;
        Ok(())
    }
}

/// How long an operator page session lasts after login.
pub const OPERATOR_SESSION: std::time::Duration = std::time::Duration::from_secs(12 * 3600);

impl Engine {
    /// Opens a session of the operator page; answers its id, which only
    /// the client keeps (the store keeps its hash).
    pub async fn open_operator_session(&self) -> Result<String, EngineError> {
        let id = crate::crypto::new_key_secret();
        let now = self.now();
        self.inner
            .store
            .open_session(
                &crate::crypto::hash_secret(&id),
                now + OPERATOR_SESSION.as_millis() as i64,
                now,
            )
            .await?;
        Ok(id)
    }

    /// Whether `id` names an open session of the operator page, on any node.
    pub async fn operator_session(&self, id: &str) -> Result<bool, EngineError> {
        Ok(self
            .inner
            .store
            .session_open(&crate::crypto::hash_secret(id), self.now())
            .await?)
    }

    /// Ends a session of the operator page on every node.
    pub async fn close_operator_session(&self, id: &str) -> Result<(), EngineError> {
        Ok(self
            .inner
            .store
            .close_session(&crate::crypto::hash_secret(id))
            .await?)
    }
}
