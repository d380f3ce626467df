//! Members and keys inside the org actor: who may be assigned work, whose
//! keys are live, and the tags that decide who may claim what.

use std::collections::HashSet;

use super::work::Work;
use super::{IssuedKey, NewMember, OrgActor, OrgState};
use crate::crypto;
use crate::domain::account::{Caller, KeyRecord, MemberRecord, Role};
use crate::domain::{KeyId, OrgId};
use crate::error::EngineError;
use crate::store::WriteOp;

/// What a key's secret is: 32 random bytes, unpadded base64url
/// (`crypto::new_key_secret`), so always this many characters. Its
/// alphabet holds `_` and the hex digits, so the length is what tells the
/// two shapes of key apart.
const SECRET_CHARS: usize = 43;

/// The full secret a client sends: `tq_`, its org's id, the key's id, then
/// its random part, ids as 32 lowercase hex digits. The org comes first so
/// that a balancer can read it with a regex (`^tq_([0-9a-f]{32})_`) and
/// send each org's requests to the node that owns it.
pub fn format_api_key(org: OrgId, key_id: KeyId, secret: &str) -> String {
    format!("tq_{}_{}_{secret}", org.0.simple(), key_id.0.simple())
}

/// An API key's parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiKey<'a> {
    /// The org the key says it belongs to: `None` for keys issued before
    /// keys named their org (`tq_<key id>_<secret>`). Only a claim until
    /// the key's record confirms it.
    pub org: Option<OrgId>,
    pub key_id: KeyId,
    pub secret: &'a str,
}

/// Splits an API key into its parts, if it has one of our shapes. After
/// the first id comes either the secret alone (an older key: exactly
/// [`SECRET_CHARS`] characters) or the key's id and the secret (longer);
/// no older key is ever read as a newer one, whatever its secret holds.
pub fn parse_api_key(api_key: &str) -> Option<ApiKey<'_>> {
    let rest = api_key.strip_prefix("tq_")?;
    let (first, after) = rest.split_once('_')?;
    let first = uuid::Uuid::try_parse(first).ok()?;
    if after.len() > SECRET_CHARS {
        if let Some((key_id, secret)) = after.split_once('_').and_then(|(id, secret)| {
            let simple = id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit());
            let id = uuid::Uuid::try_parse(id).ok().filter(|_| simple)?;
            Some((id, secret))
        }) {
            return (!secret.is_empty()).then_some(ApiKey {
                org: Some(OrgId(first)),
                key_id: KeyId(key_id),
                secret,
            });
        }
    }
    (!after.is_empty()).then_some(ApiKey {
        org: None,
        key_id: KeyId(first),
        secret: after,
    })
}

impl OrgState {
    /// Who may be named as an assignee: a member's email or a live key's name.
    pub(super) fn is_assignable(&self, who: &str) -> bool {
        self.members.contains_key(who) || self.keys.values().any(|k| k.active && k.name == who)
    }

    /// Tags a create item gets when it names none.
    pub(super) fn default_tags(&self) -> Vec<String> {
        self.tags
            .values()
            .filter(|t| t.is_default)
            .map(|t| t.name.clone())
            .collect()
    }

    /// The tags a member may claim strict work for: profile plus team tags.
    pub(super) fn effective_tags(&self, email: &str) -> HashSet<String> {
        let mut tags: HashSet<String> = self.team_tags(email).into_iter().collect();
        if let Some(m) = self.members.get(email) {
            tags.extend(m.profile_tags.iter().cloned());
        }
        tags
    }

    /// The caller's key is live here, whatever its authentication saw.
    pub(super) fn require_live_key(&self, caller: &Caller) -> Result<(), EngineError> {
        match caller.key_id().and_then(|key| self.keys.get(&key)) {
            Some(k) if k.active => Ok(()),
            _ => Err(EngineError::InvalidApiKey),
        }
    }

    fn seats_taken(&self) -> i64 {
        self.members.values().filter(|m| m.seated).count() as i64
    }
}

impl OrgActor {
    fn new_key(&self, state: &OrgState, email: &str, name: String) -> IssuedKey {
        let key_id = KeyId::new_v7();
        let secret = crypto::new_key_secret();
        IssuedKey {
            record: KeyRecord {
                key_id,
                org_id: state.org,
                email: email.to_owned(),
                name,
                secret_hash: crypto::hash_secret(&secret),
                active: true,
                created_at: self.deps.clock.now_ms(),
            },
            api_key: format_api_key(state.org, key_id, &secret),
        }
    }

    pub(super) fn add_member(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        new: NewMember,
    ) -> Result<(MemberRecord, IssuedKey), EngineError> {
        if state.members.contains_key(&new.email) {
            return Err(EngineError::Conflict(format!(
                "{} is already a member of this org",
                new.email
            )));
        }
        // New members take a free seat; on plans billed per seat, a member
        // without one has inactive keys until an admin grants a seat.
        let member = MemberRecord {
            org_id: state.org,
            email: new.email.clone(),
            role: new.role,
            seated: new.role == Role::Owner || state.seats_taken() < state.entry.record.seats,
            profile_tags: Vec::new(),
            joined_at: self.deps.clock.now_ms(),
        };
        let key = self.new_key(
            state,
            &new.email,
            new.key_name.unwrap_or_else(|| new.email.clone()),
        );
        work.accounts.push(WriteOp::InsertMember(member.clone()));
        work.accounts.push(WriteOp::InsertKey(key.record.clone()));
        state.members.insert(member.email.clone(), member.clone());
        state.keys.insert(key.record.key_id, key.record.clone());
        Ok((member, key))
    }

    pub(super) fn issue_key(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        email: &str,
        name: Option<String>,
    ) -> Result<IssuedKey, EngineError> {
        if !state.members.contains_key(email) {
            return Err(EngineError::NotFound(format!(
                "{email} is not a member of this org"
            )));
        }
        let key = self.new_key(state, email, name.unwrap_or_else(|| email.to_owned()));
        work.accounts.push(WriteOp::InsertKey(key.record.clone()));
        state.keys.insert(key.record.key_id, key.record.clone());
        Ok(key)
    }

    pub(super) fn revoke_key(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        email: &str,
        key_id: Option<KeyId>,
    ) -> Result<(), EngineError> {
        let key = key_id
            .and_then(|id| state.keys.get_mut(&id))
            .filter(|k| k.email == email)
            .ok_or_else(|| EngineError::NotFound("key not found".into()))?;
        let key_id = key.key_id;
        key.active = false;
        work.accounts.push(WriteOp::DeactivateKey(key_id));
        Ok(())
    }

    pub(super) fn revoke_member_keys(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        email: &str,
    ) -> Vec<KeyId> {
        let mut revoked = Vec::new();
        for key in state
            .keys
            .values_mut()
            .filter(|k| k.email == email && k.active)
        {
            key.active = false;
            revoked.push(key.key_id);
            work.accounts.push(WriteOp::DeactivateKey(key.key_id));
        }
        revoked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_keys_round_trip_and_name_their_org() {
        let (org, id) = (OrgId::new_v7(), KeyId::new_v7());
        let secret = crypto::new_key_secret();
        assert_eq!(secret.len(), SECRET_CHARS);
        let key = format_api_key(org, id, &secret);
        assert_eq!(
            parse_api_key(&key),
            Some(ApiKey {
                org: Some(org),
                key_id: id,
                secret: &secret
            })
        );
        assert!(key.starts_with(&format!("tq_{}_", org.0.simple())));
        assert_eq!(parse_api_key("nope"), None);
        assert_eq!(parse_api_key(&format!("tq_{}_", id.0.simple())), None);
    }

    #[test]
    fn keys_issued_before_keys_named_their_org_still_parse() {
        let id = KeyId::new_v7();
        // A secret that starts as a newer key's id would: the length says
        // it is a secret.
        let secret = format!("{}_{}", "a".repeat(32), "b".repeat(SECRET_CHARS - 33));
        let key = format!("tq_{}_{secret}", id.0.simple());
        assert_eq!(
            parse_api_key(&key),
            Some(ApiKey {
                org: None,
                key_id: id,
                secret: &secret
            })
        );
        for _ in 0..100 {
            let secret = crypto::new_key_secret();
            let key = format!("tq_{}_{secret}", id.0.simple());
            let parsed = parse_api_key(&key).expect("parses");
            assert_eq!(
                (parsed.org, parsed.key_id, parsed.secret),
                (None, id, &*secret)
            );
        }
    }
}
