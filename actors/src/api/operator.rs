//! The operator API: orgs, their members' first keys and key resets, the
//! identity provider's enrollment and sync, and member blocks.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::decode::{normal_email, trim, Result};
use super::teams::normal_team_name;
use super::{Decode, Timestamp, NAME_PATTERN, TEAM_NAME_PATTERN};
use crate::domain::account::{
    Encryption, LimitKey, LimitOverrides, Limits, OrgRecord, Role, SettingsChange, Tier,
};
use crate::domain::OrgId;

/// The largest limit an override sets: JSON's largest exact integer.
const MAX_LIMIT: i64 = (1 << 53) - 1;

/// The most seats an org can be billed for.
pub const MAX_SEATS: i64 = 1_000_000;

/// Limit overrides: an object of limit names, each a non-negative integer
/// or `null` (unlimited).
fn limit_overrides_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let names: Vec<&str> = LimitKey::ALL.iter().map(|k| k.as_str()).collect();
    schemars::json_schema!({
        "type": "object",
        "propertyNames": { "enum": names },
        "additionalProperties": { "type": ["integer", "null"], "minimum": 0, "maximum": MAX_LIMIT },
    })
}

/// The most days an org keeps its finished tasks, when it does not keep
/// them forever (about ten years).
pub const MAX_RETENTION_DAYS: i64 = 3650;

/// Days to keep finished tasks, or `null` to keep them forever.
fn retention_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": ["integer", "null"],
        "minimum": 1,
        "maximum": MAX_RETENTION_DAYS,
    })
}

/// The identity provider's view: team names to member emails.
fn idp_teams_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "propertyNames": { "minLength": 1, "maxLength": 32, "pattern": TEAM_NAME_PATTERN },
        "additionalProperties": {
            "type": "array",
            "uniqueItems": true,
            "items": { "type": "string", "format": "email" },
        },
    })
}

/// `POST /admin/orgs`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
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
    #[schemars(range(min = 1, max = MAX_SEATS))]
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
    fn validate(&mut self) -> Result<()> {
        trim(&mut self.name);
        normal_email(&mut self.owner_email);
        Ok(())
    }
}

/// `PATCH /admin/orgs/{org_id}`: any of the fields; omitted ones stay.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchOrg {
    #[serde(default)]
    #[schemars(with = "Tier")]
    pub tier: Option<Tier>,
    #[serde(default)]
    #[schemars(with = "i64", range(min = 1, max = MAX_SEATS))]
    pub seats: Option<i64>,
    #[serde(default)]
    #[schemars(with = "bool")]
    pub suspended: Option<bool>,
    /// Overrides of the tier's numbers: an integer, or `null` for unlimited;
    /// omitted keys keep their current value.
    #[serde(default)]
    #[schemars(schema_with = "limit_overrides_schema")]
    pub limits: Option<LimitOverrides>,
    /// Finished tasks (completed, failed, canceled) are removed this many
    /// days after their last change, with their history; `null` keeps
    /// them forever.
    #[serde(default, deserialize_with = "super::double_option")]
    #[schemars(schema_with = "retention_schema")]
    pub retention_days: Option<Option<i64>>,
}

impl From<PatchOrg> for SettingsChange {
    fn from(p: PatchOrg) -> Self {
        SettingsChange {
            tier: p.tier,
            seats: p.seats,
            suspended: p.suspended,
            limits: p.limits.unwrap_or_default(),
            idp_enrolled: None,
            retention_days: p.retention_days,
        }
    }
}

impl Decode for PatchOrg {
    fn validate(&mut self) -> Result<()> {
        match self.retention_days {
            Some(Some(days)) if !(1..=MAX_RETENTION_DAYS).contains(&days) => {
                Err(super::ValidationError::field(
                    "retention_days",
                    format!("must be from 1 to {MAX_RETENTION_DAYS}, or null"),
                ))
            }
            _ => Ok(()),
        }
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
    /// Days finished tasks are kept; `null`: forever.
    pub retention_days: Option<i64>,
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
            retention_days: o.retention_days,
            created_at: Timestamp(o.created_at),
        }
    }
}

/// `GET /admin/orgs/{org_id}` answer: the org, and what the store holds
/// of it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct OrgDetail {
    #[serde(flatten)]
    pub org: OrgView,
    pub stored: StoredCounts,
}

/// `GET /admin/orgs/{org_id}` answer: the org, or, while its deletion
/// runs, what is left of it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum OrgAnswer {
    Org(OrgDetail),
    Deleting(OrgBeingDeleted),
}

/// An org whose deletion is under way, and what is left of it. Once its
/// rows are gone the org answers 404.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct OrgBeingDeleted {
    #[serde(flatten)]
    pub org: OrgDeleting,
    /// Its tasks and events still stored, counted exactly when asked (as
    /// `stored` is for an org not deleted): they fall as the removal goes,
    /// a batch at a time.
    pub remaining: StoredCounts,
}

/// What the store holds of an org: its tasks (finished ones included,
/// until retention removes them) and their history's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub struct StoredCounts {
    pub tasks: i64,
    pub events: i64,
}

/// A count of what the store holds of an org, and when it was taken.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub struct LastCount {
    #[serde(flatten)]
    pub counts: StoredCounts,
    pub counted_at: Timestamp,
}

/// `DELETE /admin/orgs/{org_id}` answer: the org is being deleted.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct OrgDeleting {
    pub org_id: OrgId,
    /// Always `true`: its keys are refused and its data key is destroyed;
    /// its rows are being removed.
    #[schemars(extend("const" = true))]
    deleting: bool,
}

impl OrgDeleting {
    pub fn new(org_id: OrgId) -> Self {
        Self {
            org_id,
            deleting: true,
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
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
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
    fn validate(&mut self) -> Result<()> {
        normal_email(&mut self.email);
        if let Some(name) = self.key_name.as_mut() {
            trim(name);
        }
        Ok(())
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
#[derive(Debug, Clone, PartialEq, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetKey {
    /// Default: the member's email.
    #[serde(default)]
    #[schemars(length(min = 1, max = 200), regex(pattern = NAME_PATTERN))]
    pub key_name: Option<String>,
}

impl Decode for ResetKey {
    fn validate(&mut self) -> Result<()> {
        if let Some(name) = self.key_name.as_mut() {
            trim(name);
        }
        Ok(())
    }
}

/// A key issued by the operator: its name and secret, shown once.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct IssuedKey {
    pub key_name: String,
    pub api_key: String,
}

/// `POST /admin/orgs/{org_id}/idp`, and its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdpEnrollment {
    pub enrolled: bool,
}

impl Decode for IdpEnrollment {}

/// `POST /admin/orgs/{org_id}/idp/sync`: the identity provider's whole view
/// of team membership (team name to member emails).
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdpSync {
    #[schemars(schema_with = "idp_teams_schema")]
    pub teams: BTreeMap<String, BTreeSet<String>>,
}

impl Decode for IdpSync {
    /// Team names and emails as stored: lowercased, trimmed.
    fn validate(&mut self) -> Result<()> {
        let given = std::mem::take(&mut self.teams);
        for (team, emails) in given {
            let members = self.teams.entry(normal_team_name(&team)).or_default();
            members.extend(emails.into_iter().map(|mut e| {
                normal_email(&mut e);
                e
            }));
        }
        Ok(())
    }
}

/// How many `idp` sources a sync added and removed.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub struct IdpSyncAnswer {
    pub added: usize,
    pub removed: usize,
}

/// `POST /admin/members/unblock`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnblockMember {
    #[schemars(email)]
    pub email: String,
}

impl Decode for UnblockMember {
    fn validate(&mut self) -> Result<()> {
        normal_email(&mut self.email);
        Ok(())
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
        assert_eq!(e.0, "limits.colours: is not an accepted name");
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
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateMasterKey {
    #[schemars(regex(pattern = MASTER_KEY_PATTERN))]
    pub new_key: String,
}

impl Decode for RotateMasterKey {}

/// Standard base64 of exactly 32 bytes: 43 characters, the last carrying
/// no stray bits, and one `=`.
const MASTER_KEY_PATTERN: &str = "^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$";

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
    /// The URL clients may reach it at directly (`--public-url`), named in
    /// the `X-Taskq-Owner` header of answers forwarded from it; only when
    /// its operator set one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
    pub started_at: Timestamp,
    /// Its last heartbeat.
    pub last_seen: Timestamp,
    /// Orgs it owns now.
    pub orgs: i64,
    /// Its requests for an org and how many went through two nodes; only
    /// with several nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forwarding: Option<NodeForwarding>,
}

/// Requests for an org a node answered since it started, as of its last
/// heartbeat (a second old at most): how many, how many it forwarded to
/// the org's owner, how many another node forwarded to it, and those two
/// as shares of all it answered (0 before any). Behind a balancer that
/// hashes the org in the API key as the nodes do, the two stay near 0:
/// requests without such a key and the moments orgs move are forwarded.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct NodeForwarding {
    pub requests: i64,
    pub forwarded: i64,
    pub received: i64,
    pub forwarded_share: f64,
    pub received_share: f64,
}
