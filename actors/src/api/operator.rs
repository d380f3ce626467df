//! The operator API: orgs, their members' first keys and key resets, the
//! identity provider's enrollment and sync, and member blocks.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::decode::{
    body, boolean, email, err, name, optional_body, present, reject_unknown, required, string,
    Result,
};
use super::teams::{email_set, team_name};
use super::{Decode, Timestamp, ValidationError, NAME_PATTERN};
use crate::domain::account::{
    Encryption, LimitKey, LimitOverrides, Limits, OrgRecord, Role, SettingsChange, Tier,
};
use crate::domain::OrgId;

fn tier(v: &Value) -> Result<Tier> {
    v.as_str()
        .and_then(Tier::parse)
        .ok_or_else(|| err("tier", "must be one of free, dev, pro, enterprise"))
}

fn seats(v: &Value) -> Result<i64> {
    match v.as_i64() {
        Some(n) if (1..=1_000_000).contains(&n) => Ok(n),
        _ => Err(err("seats", "must be a positive integer")),
    }
}

/// `POST /admin/orgs`.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateOrg {
    #[schemars(length(min = 1, max = 200), regex(pattern = NAME_PATTERN))]
    pub name: String,
    #[serde(default = "default_tier")]
    pub tier: Tier,
    #[serde(default = "default_encryption")]
    pub encryption: Encryption,
    #[schemars(email)]
    pub owner_email: String,
    /// Seats billed on pro and enterprise (default 5).
    #[serde(default = "default_seats")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub seats: i64,
}

fn default_tier() -> Tier {
    Tier::Dev
}

fn default_encryption() -> Encryption {
    Encryption::Managed
}

fn default_seats() -> i64 {
    5
}

impl Decode for CreateOrg {
    fn decode(v: &Value) -> Result<Self> {
        let obj = body(v)?;
        reject_unknown(
            obj,
            "",
            &["name", "tier", "encryption", "owner_email", "seats"],
        )?;
        Ok(CreateOrg {
            name: name(required(obj, "name")?, "name")?,
            tier: present(obj, "tier")
                .map(tier)
                .transpose()?
                .unwrap_or(Tier::Dev),
            encryption: match present(obj, "encryption") {
                None => Encryption::Managed,
                Some(v) => v
                    .as_str()
                    .and_then(Encryption::parse)
                    .ok_or_else(|| err("encryption", "must be managed or byok"))?,
            },
            seats: present(obj, "seats").map(seats).transpose()?.unwrap_or(5),
            owner_email: {
                let given = name(required(obj, "owner_email")?, "owner_email")?;
                email(&Value::String(given), "owner_email")?
            },
        })
    }
}

/// `PATCH /admin/orgs/{org_id}`: any of the fields; omitted ones stay.
#[derive(Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchOrg {
    #[serde(default)]
    #[schemars(with = "Tier")]
    pub tier: Option<Tier>,
    #[serde(default)]
    #[schemars(with = "i64", range(min = 1, max = 1_000_000))]
    pub seats: Option<i64>,
    #[serde(default)]
    #[schemars(with = "bool")]
    pub suspended: Option<bool>,
    /// Overrides of the tier's numbers: an integer, or `null` for unlimited;
    /// omitted keys keep their current value.
    #[serde(default)]
    #[schemars(with = "LimitOverrides")]
    pub limits: Option<LimitOverrides>,
}

impl From<PatchOrg> for SettingsChange {
    fn from(p: PatchOrg) -> Self {
        SettingsChange {
            tier: p.tier,
            seats: p.seats,
            suspended: p.suspended,
            limits: p.limits.unwrap_or_default(),
            idp_enrolled: None,
        }
    }
}

impl Decode for PatchOrg {
    fn decode(v: &Value) -> Result<Self> {
        let obj = body(v)?;
        reject_unknown(obj, "", &["tier", "seats", "suspended", "limits"])?;
        let limits = match obj.get("limits") {
            None => None,
            Some(v) => {
                let given = v
                    .as_object()
                    .ok_or_else(|| err("limits", "must be an object"))?;
                let mut out = LimitOverrides::new();
                for (k, v) in given {
                    let field = format!("limits.{k}");
                    let key = LimitKey::parse(k).ok_or_else(|| err(&field, "unknown limit"))?;
                    let value = match v {
                        Value::Null => None,
                        v => Some(v.as_i64().filter(|n| *n >= 0).ok_or_else(|| {
                            err(&field, "must be a non-negative integer or null (unlimited)")
                        })?),
                    };
                    out.insert(key, value);
                }
                Some(out)
            }
        };
        Ok(PatchOrg {
            tier: obj.get("tier").map(tier).transpose()?,
            seats: obj.get("seats").map(seats).transpose()?,
            suspended: obj
                .get("suspended")
                .map(|v| boolean(v, "suspended"))
                .transpose()?,
            limits,
        })
    }
}

/// An org as the operator sees it, with its effective limits.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct OrgView {
    pub org_id: OrgId,
    pub name: String,
    pub tier: Tier,
    pub encryption: Encryption,
    pub seats: i64,
    pub suspended: bool,
    /// The tier's numbers with the operator's overrides; `null` is unlimited.
    pub limits: Limits,
    pub created_at: Timestamp,
}

impl From<&OrgRecord> for OrgView {
    fn from(o: &OrgRecord) -> Self {
        Self {
            org_id: o.org_id,
            name: o.name.clone(),
            tier: o.tier,
            encryption: o.encryption,
            seats: o.seats,
            suspended: o.suspended,
            limits: o.effective_limits(),
            created_at: Timestamp(o.created_at),
        }
    }
}

/// `POST /admin/orgs` answer: the org and its owner's first key.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CreatedOrg {
    #[serde(flatten)]
    pub org: OrgView,
    pub owner: OwnerKey,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct OwnerKey {
    pub email: String,
    pub role: Role,
    pub key_name: String,
    /// Shown this once.
    pub api_key: String,
}

/// `POST /admin/orgs/{org_id}/members`: an active member and a first key.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMember {
    #[schemars(email)]
    pub email: String,
    #[serde(default = "default_role")]
    pub role: Role,
    /// Default: the email.
    #[serde(default)]
    #[schemars(length(min = 1, max = 200), regex(pattern = NAME_PATTERN))]
    pub key_name: Option<String>,
}

fn default_role() -> Role {
    Role::User
}

impl Decode for AddMember {
    fn decode(v: &Value) -> Result<Self> {
        let obj = body(v)?;
        reject_unknown(obj, "", &["email", "role", "key_name"])?;
        let given = name(required(obj, "email")?, "email")?;
        Ok(AddMember {
            email: email(&Value::String(given), "email")?,
            role: match present(obj, "role") {
                None => Role::User,
                Some(v) => v
                    .as_str()
                    .and_then(Role::parse)
                    .ok_or_else(|| err("role", "must be one of owner, admin, user"))?,
            },
            key_name: present(obj, "key_name")
                .map(|v| name(v, "key_name"))
                .transpose()?,
        })
    }
}

/// `POST /admin/orgs/{org_id}/members` answer. `seated` tells, on plans
/// billed per seat, whether the key works yet.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AddedMember {
    pub email: String,
    pub role: Role,
    pub key_name: String,
    pub api_key: String,
    pub seated: bool,
}

/// `POST /admin/orgs/{org_id}/members/{email}/keys`: the operator's key reset.
#[derive(Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetKey {
    /// Default: the member's email.
    #[serde(default)]
    #[schemars(length(min = 1, max = 200), regex(pattern = NAME_PATTERN))]
    pub key_name: Option<String>,
}

impl Decode for ResetKey {
    fn decode(v: &Value) -> Result<Self> {
        let obj = optional_body(v)?;
        reject_unknown(obj, "", &["key_name"])?;
        Ok(ResetKey {
            key_name: present(obj, "key_name")
                .map(|v| name(v, "key_name"))
                .transpose()?,
        })
    }
}

/// A key issued by the operator: its name and secret, shown once.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct IssuedKey {
    pub key_name: String,
    pub api_key: String,
}

/// `POST /admin/orgs/{org_id}/idp`, and its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub struct IdpEnrollment {
    pub enrolled: bool,
}

impl Decode for IdpEnrollment {
    fn decode(v: &Value) -> Result<Self> {
        v.as_object()
            .and_then(|o| o.get("enrolled"))
            .and_then(Value::as_bool)
            .map(|enrolled| IdpEnrollment { enrolled })
            .ok_or_else(|| ValidationError::field("enrolled", "must be a boolean"))
    }
}

/// `POST /admin/orgs/{org_id}/idp/sync`: the identity provider's whole view
/// of team membership (team name to member emails).
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdpSync {
    pub teams: BTreeMap<String, BTreeSet<String>>,
}

impl Decode for IdpSync {
    fn decode(v: &Value) -> Result<Self> {
        let obj = body(v)?;
        reject_unknown(obj, "", &["teams"])?;
        let given = obj
            .get("teams")
            .ok_or_else(|| err("teams", "is required"))?
            .as_object()
            .ok_or_else(|| err("teams", "must be an object of team name to emails"))?;
        let mut teams = BTreeMap::new();
        for (team, emails) in given {
            let field = format!("teams.{team}");
            let name = team_name(&Value::String(team.clone()), &field)?;
            teams.insert(name, email_set(emails, &field)?);
        }
        Ok(IdpSync { teams })
    }
}

/// How many `idp` sources a sync added and removed.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub struct IdpSyncAnswer {
    pub added: usize,
    pub removed: usize,
}

/// `POST /admin/members/unblock`.
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnblockMember {
    #[schemars(email)]
    pub email: String,
}

impl Decode for UnblockMember {
    fn decode(v: &Value) -> Result<Self> {
        let given = v
            .as_object()
            .and_then(|o| o.get("email"))
            .unwrap_or(&Value::Null);
        Ok(UnblockMember {
            email: email(given, "email")?,
        })
    }
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Unblocked {
    pub email: String,
    pub unblocked: bool,
}

/// `GET /admin/feedback`: the org that receives feedback.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub struct FeedbackOrg {
    pub org_id: OrgId,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn org_defaults_and_limit_overrides() {
        let o = CreateOrg::decode(&json!({"name": " acme ", "owner_email": "O@Acme.io"})).unwrap();
        assert_eq!(
            (o.name.as_str(), o.tier, o.seats, o.owner_email.as_str()),
            ("acme", Tier::Dev, 5, "o@acme.io")
        );
        assert!(CreateOrg::decode(&json!({"name": "a", "owner_email": "nope"})).is_err());
        let p = PatchOrg::decode(&json!({"limits": {"tags": 3, "teams": null}})).unwrap();
        let limits = p.limits.unwrap();
        assert_eq!(limits[&LimitKey::Tags], Some(3));
        assert_eq!(limits[&LimitKey::Teams], None);
        let e = PatchOrg::decode(&json!({"limits": {"colours": 1}})).unwrap_err();
        assert_eq!(e.0, "limits.colours: unknown limit");
        assert!(PatchOrg::decode(&json!({"limits": {"tags": -1}})).is_err());
    }

    #[test]
    fn idp_views_are_lowercased_sets() {
        let s = IdpSync::decode(&json!({"teams": {"Ops": ["A@x.io", "a@x.io"]}})).unwrap();
        assert_eq!(s.teams["ops"].len(), 1);
        assert!(IdpSync::decode(&json!({"teams": {"ops": ["nope"]}})).is_err());
    }
}

/// `POST /admin/master-key/rotate`: the new master key, base64 of 32 bytes.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateMasterKey {
    pub new_key: String,
}

impl Decode for RotateMasterKey {
    fn decode(v: &Value) -> Result<Self> {
        let obj = body(v)?;
        reject_unknown(obj, "", &["new_key"])?;
        let new_key = string(required(obj, "new_key")?, "new_key")?;
        crate::crypto::MasterKey::from_base64(&new_key)
            .map_err(|_| err("new_key", "must be base64 of exactly 32 bytes"))?;
        Ok(RotateMasterKey { new_key })
    }
}

/// What a master-key rotation did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct MasterKeyRotated {
    /// The fingerprint of the master key every wrap now names.
    pub master_key_id: String,
    /// Data keys re-wrapped by this run.
    pub rewrapped: u64,
    /// Whether the previous master keys were dropped: no wrap needs them.
    /// False: run the rotation again to finish.
    pub previous_keys_retired: bool,
}

/// `GET /admin/cluster`: the nodes seen in the last minute and the orgs
/// each owns now.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ClusterView {
    pub nodes: Vec<ClusterNode>,
    /// Orgs that live nodes own now.
    pub orgs_placed: i64,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ClusterNode {
    pub node_id: String,
    /// The URL other nodes forward requests to.
    pub advertise_url: String,
    pub started_at: Timestamp,
    /// Its last heartbeat.
    pub last_seen: Timestamp,
    /// Orgs it owns now.
    pub orgs: i64,
}
