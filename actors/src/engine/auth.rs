//! Authentication: an `X-Api-Key` value to its `Caller`, with each key's
//! record and its member's role and seat cached, so a request costs no
//! store read.
//!
//! A change of a key or a member (a revocation, a block, a role or seat)
//! commits first and then forgets the entries it touched, before its answer
//! leaves. A miss that read the store before that commit must not put the
//! old record back afterwards: every forget advances a generation, and a
//! miss keeps what it read only if no forget happened since it began. The
//! check and the insert hold the entry's shard, which a forget also takes,
//! so a forget either sees the insert or the insert sees the forget.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use super::Engine;
use crate::domain::account::{Caller, KeyRecord, Principal, Role};
use crate::domain::{KeyId, OrgId};
use crate::error::EngineError;
use crate::org::{parse_api_key, OrgMsg};

pub(super) struct AuthEntry {
    key: KeyRecord,
    role: Role,
    seated: bool,
}

#[derive(Default)]
pub(super) struct AuthCache {
    entries: DashMap<KeyId, Arc<AuthEntry>>,
    /// Advanced by every forget.
    generation: AtomicU64,
}

impl AuthCache {
    fn get(&self, key_id: KeyId) -> Option<Arc<AuthEntry>> {
        self.entries.get(&key_id).map(|e| e.clone())
    }

    /// The generation a miss starts from, read before the store is.
    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Keeps what a miss read, unless something was forgotten since it
    /// began (`since`): its record may predate that change.
    fn fill(&self, key_id: KeyId, entry: Arc<AuthEntry>, since: u64) {
        if let Entry::Vacant(v) = self.entries.entry(key_id) {
            if self.generation.load(Ordering::SeqCst) == since {
                v.insert(entry);
            }
        }
    }

    fn forget(&self, keys: &[KeyId]) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        for key in keys {
            self.entries.remove(key);
        }
    }

    /// Every key of an org: this node stops owning it, and another may
    /// change its keys meanwhile.
    fn forget_org(&self, org: OrgId) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.entries.retain(|_, e| e.key.org_id != org);
    }

    fn forget_member(&self, org: OrgId, email: &str) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.entries
            .retain(|_, e| !(e.key.org_id == org && e.key.email == email));
    }
}

impl Engine {
    /// Resolves an `X-Api-Key` value to its caller.
    pub async fn authenticate(&self, api_key: Option<&str>) -> Result<Caller, EngineError> {
        let key = api_key
            .and_then(parse_api_key)
            .ok_or(EngineError::InvalidApiKey)?;
        let entry = self.key_entry(key.key_id).await?;
        let secret = crate::crypto::secret_matches(key.secret, &entry.key.secret_hash);
        // A key whose org part was changed is refused as a wrong secret is.
        let org = key.org.is_none_or(|org| org == entry.key.org_id);
        if !(secret && org) {
            return Err(EngineError::InvalidApiKey);
        }
        self.caller_of(key.key_id, &entry).await
    }

    /// The caller of a key whose secret was shown earlier (a board
    /// session's): checked as [`Engine::authenticate`] checks it, less the
    /// secret, so a revoked key, a lost seat, a changed role or a suspended
    /// org take effect at once.
    pub(super) async fn caller_of_key(&self, key_id: KeyId) -> Result<Caller, EngineError> {
        let entry = self.key_entry(key_id).await?;
        self.caller_of(key_id, &entry).await
    }

    /// The key's record and its member's role and seat, from the cache or
    /// the store.
    async fn key_entry(&self, key_id: KeyId) -> Result<Arc<AuthEntry>, EngineError> {
        if let Some(e) = self.inner.keys.get(key_id) {
            return Ok(e);
        }
        self.check_store()?;
        let since = self.inner.keys.generation();
        let key = self
            .stored(self.inner.store.get_key(key_id).await)?
            .ok_or(EngineError::InvalidApiKey)?;
        let member = self
            .stored(self.inner.store.org_members(key.org_id).await)?
            .into_iter()
            .find(|m| m.email == key.email)
            .ok_or(EngineError::InvalidApiKey)?;
        let entry = Arc::new(AuthEntry {
            key,
            role: member.role,
            seated: member.seated,
        });
        self.inner.keys.fill(key_id, entry.clone(), since);
        Ok(entry)
    }

    /// The caller behind a key's entry, unless the key or its org may not
    /// act.
    async fn caller_of(&self, key_id: KeyId, entry: &AuthEntry) -> Result<Caller, EngineError> {
        if !entry.key.active {
            return Err(EngineError::InvalidApiKey);
        }
        let org = self.inner.directory.get(entry.key.org_id).await?;
        // On a plan billed per seat, an unseated member's keys are inactive.
        if org.record.tier.is_seat_billed() && !entry.seated {
            return Err(EngineError::InvalidApiKey);
        }
        if org.record.suspended {
            return Err(EngineError::OrgSuspended);
        }
        Ok(Caller {
            org_id: entry.key.org_id,
            principal: Principal::Key(key_id),
            key_name: entry.key.name.clone(),
            email: entry.key.email.clone(),
            role: entry.role,
        })
    }

    /// Forgets every key of an org whose node changes.
    pub(super) fn forget_org_keys(&self, org: OrgId) {
        self.inner.keys.forget_org(org);
    }

    /// Forgets keys whose revocation has committed.
    pub(super) fn forget_keys(&self, keys: &[KeyId]) {
        self.inner.keys.forget(keys);
    }

    /// Forgets every key of a member whose role or seat change has committed.
    pub(super) fn forget_member_keys(&self, org: OrgId, email: &str) {
        self.inner.keys.forget_member(org, email);
    }

    /// Revokes every key of a member in one org and forgets them.
    pub(super) async fn revoke_member_keys(
        &self,
        org: OrgId,
        email: &str,
    ) -> Result<(), EngineError> {
        let revoked = self
            .request(org, |reply| OrgMsg::RevokeMemberKeys {
                email: email.to_owned(),
                reply,
            })
            .await?;
        self.forget_keys(&revoked);
        Ok(())
    }

    /// After a key was issued to `email` in `org`: a block of the member
    /// that committed meanwhile revokes it. A block first commits, then
    /// revokes the member's keys in the orgs it finds; a key whose commit
    /// that search missed committed after the block, so this check, made
    /// after the key's commit, sees the block.
    pub(super) async fn unless_blocked_meanwhile(
        &self,
        org: OrgId,
        email: &str,
    ) -> Result<(), EngineError> {
        if self.inner.store.is_blocked(email).await? {
            self.on_owner(super::peers::PeerOp::RevokeMemberKeys {
                org,
                email: email.to_owned(),
            })
            .await?;
            return Err(EngineError::MemberBlocked);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(org: OrgId, email: &str) -> Arc<AuthEntry> {
        Arc::new(AuthEntry {
            key: KeyRecord {
                key_id: KeyId::new_v7(),
                org_id: org,
                email: email.into(),
                name: "k".into(),
                secret_hash: Vec::new(),
                active: true,
                created_at: 0,
            },
            role: Role::User,
            seated: true,
        })
    }

    #[test]
    fn a_miss_keeps_its_read_only_when_nothing_was_forgotten_since() {
        let cache = AuthCache::default();
        let org = OrgId::new_v7();
        let (a, b) = (KeyId::new_v7(), KeyId::new_v7());

        let since = cache.generation();
        cache.fill(a, entry(org, "a@x.test"), since);
        assert!(cache.get(a).is_some());

        // A revocation of some key commits while b's miss reads the store.
        let since = cache.generation();
        cache.forget(&[KeyId::new_v7()]);
        cache.fill(b, entry(org, "b@x.test"), since);
        assert!(
            cache.get(b).is_none(),
            "a read older than a forget was kept"
        );

        cache.forget_member(org, "a@x.test");
        assert!(cache.get(a).is_none());
    }
}
