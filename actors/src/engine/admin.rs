//! The operator API (orgs, members, key resets) and members' own keys.

use serde_json::{json, Map, Value};

use super::{committed, Engine};
use crate::clock::format_ms;
use crate::domain::account::{
    Caller, Encryption, KeyRecord, MemberRecord, OrgRecord, Role, Tier, LIMIT_KEYS,
};
use crate::domain::usage::RequestKind;
use crate::domain::{KeyId, OrgId};
use crate::error::{EngineError, ValidationError};
use crate::org::{format_api_key, NewMember, OrgMsg};

const MAX_NAME_CHARS: usize = 200;

fn object(body: &Value) -> Result<&Map<String, Value>, ValidationError> {
    body.as_object()
        .ok_or_else(|| ValidationError::new("request body must be a JSON object"))
}

fn reject_unknown(obj: &Map<String, Value>, known: &[&str]) -> Result<(), ValidationError> {
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(ValidationError::field(k, "unknown field")),
        None => Ok(()),
    }
}

fn name_field(
    obj: &Map<String, Value>,
    key: &str,
    required: bool,
) -> Result<Option<String>, ValidationError> {
    match obj.get(key) {
        None | Some(Value::Null) if !required => Ok(None),
        None | Some(Value::Null) => Err(ValidationError::field(key, "is required")),
        Some(Value::String(s)) if s.trim().is_empty() => {
            Err(ValidationError::field(key, "must not be empty"))
        }
        Some(Value::String(s)) if s.chars().count() > MAX_NAME_CHARS => Err(
            ValidationError::field(key, format!("must be at most {MAX_NAME_CHARS} characters")),
        ),
        Some(Value::String(s)) => Ok(Some(s.trim().to_owned())),
        Some(_) => Err(ValidationError::field(key, "must be a string")),
    }
}

fn email_field(obj: &Map<String, Value>, key: &str) -> Result<String, ValidationError> {
    let email = name_field(obj, key, true)?.expect("required");
    validate_email(&email).map_err(|m| ValidationError::field(key, m))?;
    Ok(email.to_lowercase())
}

pub fn validate_email(email: &str) -> Result<(), &'static str> {
    match email.split_once('@') {
        Some((local, domain))
            if !local.is_empty() && !domain.is_empty() && !email.contains(char::is_whitespace) =>
        {
            Ok(())
        }
        _ => Err("must be an email address"),
    }
}

fn org_json(o: &OrgRecord) -> Value {
    json!({
        "org_id": o.org_id,
        "name": o.name,
        "tier": o.tier.as_str(),
        "encryption": o.encryption.as_str(),
        "seats": o.seats,
        "suspended": o.suspended,
        "limits": o.effective_limits(),
        "created_at": format_ms(o.created_at),
    })
}

fn parse_tier(v: &Value) -> Result<Tier, ValidationError> {
    v.as_str()
        .and_then(Tier::parse)
        .ok_or_else(|| ValidationError::field("tier", "must be one of free, dev, pro, enterprise"))
}

fn parse_seats(v: &Value) -> Result<i64, ValidationError> {
    match v.as_i64() {
        Some(n) if (1..=1_000_000).contains(&n) => Ok(n),
        _ => Err(ValidationError::field(
            "seats",
            "must be a positive integer",
        )),
    }
}

fn parse_org_id(s: &str) -> Result<OrgId, EngineError> {
    s.parse()
        .map_err(|_| EngineError::NotFound("organization not found".into()))
}

impl Engine {
    /// `POST /admin/orgs`.
    pub async fn create_org(&self, body: &Value) -> Result<Value, EngineError> {
        let obj = object(body)?;
        reject_unknown(obj, &["name", "tier", "encryption", "owner_email", "seats"])?;
        let name = name_field(obj, "name", true)?.expect("required");
        let tier = match obj.get("tier") {
            None | Some(Value::Null) => Tier::Dev,
            Some(v) => parse_tier(v)?,
        };
        let encryption = match obj.get("encryption") {
            None | Some(Value::Null) => Encryption::Managed,
            Some(v) => v
                .as_str()
                .and_then(Encryption::parse)
                .ok_or_else(|| ValidationError::field("encryption", "must be managed or byok"))?,
        };
        let seats = match obj.get("seats") {
            None | Some(Value::Null) => 5,
            Some(v) => parse_seats(v)?,
        };
        let owner_email = email_field(obj, "owner_email")?;
        self.refuse_if_blocked(&owner_email).await?;
        let now = self.now();
        let org_id = OrgId::new_v7();
        let record = OrgRecord {
            org_id,
            name,
            tier,
            encryption,
            seats,
            suspended: false,
            limit_overrides: Map::new(),
            wrapped_dek: (encryption == Encryption::Managed)
                .then(|| self.inner.directory.master().new_wrapped_dek(org_id)),
            idp_enrolled: false,
            created_at: now,
        };
        let owner = MemberRecord {
            org_id,
            email: owner_email.clone(),
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
            email: owner_email.clone(),
            name: "owner".into(),
            secret_hash: crate::crypto::hash_secret(&secret),
            active: true,
            created_at: now,
        };
        self.inner.store.insert_org(&record, &owner, &key).await?;
        let mut out = org_json(&record);
        out["owner"] = json!({
            "email": owner_email,
            "role": "owner",
            "key_name": key.name,
            "api_key": format_api_key(key_id, &secret),
        });
        self.inner.directory.refresh(record)?;
        Ok(out)
    }

    pub(super) async fn org_record(&self, org: OrgId) -> Result<OrgRecord, EngineError> {
        self.inner
            .store
            .get_org(org)
            .await?
            .ok_or_else(|| EngineError::NotFound("organization not found".into()))
    }

    /// `GET /admin/orgs/{id}`.
    pub async fn get_org(&self, org_id: &str) -> Result<Value, EngineError> {
        Ok(org_json(&self.org_record(parse_org_id(org_id)?).await?))
    }

    /// `PATCH /admin/orgs/{id}`.
    pub async fn patch_org(&self, org_id: &str, body: &Value) -> Result<Value, EngineError> {
        let obj = object(body)?;
        reject_unknown(obj, &["tier", "seats", "suspended", "limits"])?;
        let mut record = self.org_record(parse_org_id(org_id)?).await?;
        if let Some(v) = obj.get("tier") {
            record.tier = parse_tier(v)?;
        }
        if let Some(v) = obj.get("seats") {
            record.seats = parse_seats(v)?;
        }
        if let Some(v) = obj.get("suspended") {
            record.suspended = v
                .as_bool()
                .ok_or_else(|| ValidationError::field("suspended", "must be a boolean"))?;
        }
        if let Some(v) = obj.get("limits") {
            let limits = v
                .as_object()
                .ok_or_else(|| ValidationError::field("limits", "must be an object"))?;
            for (k, v) in limits {
                if !LIMIT_KEYS.contains(&k.as_str()) {
                    return Err(
                        ValidationError::field(format!("limits.{k}"), "unknown limit").into(),
                    );
                }
                if !(v.is_null() || v.as_i64().is_some_and(|n| n >= 0)) {
                    return Err(ValidationError::field(
                        format!("limits.{k}"),
                        "must be a non-negative integer or null (unlimited)",
                    )
                    .into());
                }
                record.limit_overrides.insert(k.clone(), v.clone());
            }
        }
        self.inner.store.update_org(&record).await?;
        let out = org_json(&record);
        self.inner.directory.refresh(record)?;
        Ok(out)
    }

    /// `POST /admin/orgs/{id}/members`.
    pub async fn add_member(&self, org_id: &str, body: &Value) -> Result<Value, EngineError> {
        let org = parse_org_id(org_id)?;
        let obj = object(body)?;
        reject_unknown(obj, &["email", "role", "key_name"])?;
        let email = email_field(obj, "email")?;
        let role = match obj.get("role") {
            None | Some(Value::Null) => Role::User,
            Some(v) => v.as_str().and_then(Role::parse).ok_or_else(|| {
                ValidationError::field("role", "must be one of owner, admin, user")
            })?,
        };
        let key_name = name_field(obj, "key_name", false)?;
        self.org_record(org).await?;
        self.refuse_if_blocked(&email).await?;
        let new = NewMember {
            email,
            role,
            key_name,
        };
        let (member, key, commit) = self.ask(org, |r| OrgMsg::AddMember(new.clone(), r)).await?;
        committed(commit).await?;
        // `seated` tells, on plans billed per seat, whether the key works yet.
        Ok(json!({
            "email": member.email,
            "role": member.role.as_str(),
            "key_name": key.record.name,
            "api_key": key.api_key,
            "seated": member.seated,
        }))
    }

    /// `POST /admin/orgs/{id}/members/{email}/keys`: the operator's key reset.
    pub async fn reset_key(
        &self,
        org_id: &str,
        email: &str,
        body: &Value,
    ) -> Result<Value, EngineError> {
        let org = parse_org_id(org_id)?;
        let empty = Map::new();
        let obj = match body {
            Value::Null => &empty,
            other => object(other)?,
        };
        reject_unknown(obj, &["key_name"])?;
        let key_name = name_field(obj, "key_name", false)?;
        self.org_record(org).await?;
        let email = email.to_lowercase();
        self.refuse_if_blocked(&email).await?;
        let (key, commit) = self
            .ask(org, |r| {
                OrgMsg::IssueKey(email.clone(), key_name.clone(), r)
            })
            .await?;
        committed(commit).await?;
        Ok(json!({ "key_name": key.record.name, "api_key": key.api_key }))
    }

    /// `POST /keys`: a new key for the caller's own member.
    pub async fn create_key(&self, caller: &Caller, body: &Value) -> Result<Value, EngineError> {
        self.admit(caller, RequestKind::Write, 1, 0).await?;
        let obj = object(body)?;
        reject_unknown(obj, &["name"])?;
        let name = name_field(obj, "name", true)?;
        let (key, commit) = self
            .ask(caller.org_id, |r| {
                OrgMsg::IssueKey(caller.email.clone(), name.clone(), r)
            })
            .await?;
        committed(commit).await?;
        Ok(json!({
            "key_id": key.record.key_id,
            "name": key.record.name,
            "api_key": key.api_key,
        }))
    }

    /// `GET /keys`: the caller's member's keys, never their secrets.
    pub async fn list_keys(&self, caller: &Caller) -> Result<Value, EngineError> {
        self.admit(caller, RequestKind::Read, 1, 0).await?;
        let keys: Vec<Value> = self
            .inner
            .store
            .org_keys(caller.org_id)
            .await?
            .into_iter()
            .filter(|k| k.email == caller.email)
            .map(|k| {
                json!({
                    "key_id": k.key_id,
                    "name": k.name,
                    "created_at": format_ms(k.created_at),
                    "active": k.active,
                })
            })
            .collect();
        Ok(json!({ "keys": keys }))
    }

    /// `DELETE /keys/{key_id}`: the key stops working at once.
    pub async fn revoke_key(&self, caller: &Caller, key_id: &str) -> Result<(), EngineError> {
        self.admit(caller, RequestKind::Write, 1, 0).await?;
        let key_id: KeyId = key_id
            .parse()
            .map_err(|_| EngineError::NotFound("key not found".into()))?;
        let commit = self
            .ask(caller.org_id, |r| {
                OrgMsg::RevokeKey(caller.email.clone(), key_id, r)
            })
            .await?;
        committed(commit).await?;
        self.forget_key(key_id);
        Ok(())
    }

    /// Test hook: panics the org's actor and returns once it has restarted.
    #[cfg(feature = "test-hooks")]
    pub async fn crash_org(&self, org_id: &str) -> Result<(), EngineError> {
        let org = parse_org_id(org_id)?;
        self.org_record(org).await?;
        self.org_actor(org).await?;
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
