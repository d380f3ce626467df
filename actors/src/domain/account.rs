//! Orgs, members and API keys: who may act, and under which plan.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::error::RuleError;
use super::{KeyId, OrgId, ScheduleId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Free,
    Dev,
    Pro,
    Enterprise,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Free => "free",
            Tier::Dev => "dev",
            Tier::Pro => "pro",
            Tier::Enterprise => "enterprise",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Tier::Free, Tier::Dev, Tier::Pro, Tier::Enterprise]
            .into_iter()
            .find(|t| t.as_str() == s)
    }

    /// Billed per seated member.
    pub fn is_seat_billed(self) -> bool {
        matches!(self, Tier::Pro | Tier::Enterprise)
    }

    pub fn is_paid(self) -> bool {
        self != Tier::Free
    }

    /// Runbooks, failure clusters and planning.
    pub fn has_pro_features(self) -> bool {
        matches!(self, Tier::Pro | Tier::Enterprise)
    }

    /// The tier's numbers before operator overrides (`None`: unlimited).
    pub fn default_limits(self, seats: i64) -> Limits {
        let seats = seats.max(1);
        let (w, r, month, tags, teams, plans, webhooks, schedules) = match self {
            Tier::Free => (Some(10), Some(30), Some(10_000), 20, 0, 0, 0, 0),
            Tier::Dev => (Some(30), Some(120), Some(100_000), 100, 5, 0, 5, 10),
            Tier::Pro => (
                Some((60 * seats).min(600)),
                Some((300 * seats).min(3_000)),
                Some(300_000 * seats),
                500,
                50,
                100,
                25,
                100,
            ),
            Tier::Enterprise => (
                Some(600),
                Some(3_000),
                Some((1_000_000 * seats).max(5_000_000)),
                2_000,
                500,
                1_000,
                100,
                1_000,
            ),
        };
        Limits {
            writes_per_minute: w,
            reads_per_minute: r,
            requests_per_month: month,
            tasks_per_month: Some(1_000),
            tags: Some(tags),
            teams: Some(teams),
            plans_per_month: Some(plans),
            webhooks: Some(webhooks),
            schedules: Some(schedules),
        }
    }
}

/// The numbers an org is limited by.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum LimitKey {
    WritesPerMinute,
    ReadsPerMinute,
    RequestsPerMonth,
    TasksPerMonth,
    Tags,
    Teams,
    PlansPerMonth,
    Webhooks,
    Schedules,
}

impl LimitKey {
    pub const ALL: [LimitKey; 9] = [
        LimitKey::WritesPerMinute,
        LimitKey::ReadsPerMinute,
        LimitKey::RequestsPerMonth,
        LimitKey::TasksPerMonth,
        LimitKey::Tags,
        LimitKey::Teams,
        LimitKey::PlansPerMonth,
        LimitKey::Webhooks,
        LimitKey::Schedules,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LimitKey::WritesPerMinute => "writes_per_minute",
            LimitKey::ReadsPerMinute => "reads_per_minute",
            LimitKey::RequestsPerMonth => "requests_per_month",
            LimitKey::TasksPerMonth => "tasks_per_month",
            LimitKey::Tags => "tags",
            LimitKey::Teams => "teams",
            LimitKey::PlansPerMonth => "plans_per_month",
            LimitKey::Webhooks => "webhooks",
            LimitKey::Schedules => "schedules",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Every limit of an org; `None` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Limits {
    pub writes_per_minute: Option<i64>,
    pub reads_per_minute: Option<i64>,
    pub requests_per_month: Option<i64>,
    pub tasks_per_month: Option<i64>,
    pub tags: Option<i64>,
    pub teams: Option<i64>,
    pub plans_per_month: Option<i64>,
    pub webhooks: Option<i64>,
    pub schedules: Option<i64>,
}

impl Limits {
    pub fn get(&self, key: LimitKey) -> Option<i64> {
        *self.slot(key)
    }

    fn slot(&self, key: LimitKey) -> &Option<i64> {
        match key {
            LimitKey::WritesPerMinute => &self.writes_per_minute,
            LimitKey::ReadsPerMinute => &self.reads_per_minute,
            LimitKey::RequestsPerMonth => &self.requests_per_month,
            LimitKey::TasksPerMonth => &self.tasks_per_month,
            LimitKey::Tags => &self.tags,
            LimitKey::Teams => &self.teams,
            LimitKey::PlansPerMonth => &self.plans_per_month,
            LimitKey::Webhooks => &self.webhooks,
            LimitKey::Schedules => &self.schedules,
        }
    }

    fn set(&mut self, key: LimitKey, value: Option<i64>) {
        let slot = match key {
            LimitKey::WritesPerMinute => &mut self.writes_per_minute,
            LimitKey::ReadsPerMinute => &mut self.reads_per_minute,
            LimitKey::RequestsPerMonth => &mut self.requests_per_month,
            LimitKey::TasksPerMonth => &mut self.tasks_per_month,
            LimitKey::Tags => &mut self.tags,
            LimitKey::Teams => &mut self.teams,
            LimitKey::PlansPerMonth => &mut self.plans_per_month,
            LimitKey::Webhooks => &mut self.webhooks,
            LimitKey::Schedules => &mut self.schedules,
        };
        *slot = value;
    }
}

/// The operator's overrides of an org's tier numbers: a key present with
/// `None` lifts that limit; an absent key keeps the tier's number.
pub type LimitOverrides = BTreeMap<LimitKey, Option<i64>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Encryption {
    Managed,
    Byok,
}

impl Encryption {
    pub fn as_str(self) -> &'static str {
        match self {
            Encryption::Managed => "managed",
            Encryption::Byok => "byok",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "managed" => Some(Encryption::Managed),
            "byok" => Some(Encryption::Byok),
            _ => None,
        }
    }
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Admin,
    Owner,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Admin => "admin",
            Role::User => "user",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "owner" => Some(Role::Owner),
            "admin" => Some(Role::Admin),
            "user" => Some(Role::User),
            _ => None,
        }
    }
}

/// A data key as stored: wrapped by a master key, which it names. Only
/// `crypto` makes or opens one; the org record carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrappedDek {
    /// The fingerprint of the master key that made the wrap; `None` for
    /// wraps made before wraps named their key.
    pub master_key_id: Option<String>,
    pub bytes: Vec<u8>,
}

/// An org's row: the org, or the mark of its deletion while its other
/// rows are removed. An id with no row was never an org's, or its
/// removal has finished.
#[derive(Debug, Clone)]
pub enum StoredOrg {
    Live(OrgRecord),
    /// Its keys and data key are gone; its rows are being removed.
    Deleting,
}

#[derive(Debug, Clone)]
pub struct OrgRecord {
    pub org_id: OrgId,
    pub name: String,
    pub tier: Tier,
    pub encryption: Encryption,
    pub seats: i64,
    pub suspended: bool,
    pub limit_overrides: LimitOverrides,
    /// A managed org's data key.
    pub wrapped_dek: Option<WrappedDek>,
    pub idp_enrolled: bool,
    /// Days a finished task is kept after its last change; `None`: forever.
    pub retention_days: Option<i64>,
    pub created_at: i64,
}

impl OrgRecord {
    /// Teams (and later reports) need a paid plan; free orgs hear how to get one.
    pub fn require_paid_plan(&self, feature: &str) -> Result<(), RuleError> {
        if self.tier.is_paid() {
            Ok(())
        } else {
            Err(RuleError::UpgradeRequired(format!(
                "{feature} need a paid plan (dev, pro or enterprise)"
            )))
        }
    }

    /// Runbooks and planning need pro or enterprise.
    pub fn require_pro_plan(&self, feature: &str) -> Result<(), RuleError> {
        if self.tier.has_pro_features() {
            Ok(())
        } else {
            Err(RuleError::UpgradeRequired(format!(
                "{feature} need the pro or enterprise plan"
            )))
        }
    }

    /// Applies a settings change; answers whether anything changed.
    pub fn apply(&mut self, change: &SettingsChange) -> bool {
        let before = (
            self.tier,
            self.seats,
            self.suspended,
            self.limit_overrides.clone(),
            self.idp_enrolled,
            self.retention_days,
        );
        self.tier = change.tier.unwrap_or(self.tier);
        self.seats = change.seats.unwrap_or(self.seats);
        self.suspended = change.suspended.unwrap_or(self.suspended);
        self.idp_enrolled = change.idp_enrolled.unwrap_or(self.idp_enrolled);
        self.retention_days = change.retention_days.unwrap_or(self.retention_days);
        self.limit_overrides.extend(change.limits.clone());
        before
            != (
                self.tier,
                self.seats,
                self.suspended,
                self.limit_overrides.clone(),
                self.idp_enrolled,
                self.retention_days,
            )
    }

    /// The tier's numbers with the operator's overrides applied.
    pub fn effective_limits(&self) -> Limits {
        let mut limits = self.tier.default_limits(self.seats);
        for (key, value) in &self.limit_overrides {
            limits.set(*key, *value);
        }
        limits
    }
}

/// A change of an org's settings (the operator's PATCH, a strike
/// suspension, the identity-provider enrollment). Only the org's actor
/// applies one, to its own copy of the record, so two changes of
/// different fields never undo each other.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SettingsChange {
    pub tier: Option<Tier>,
    pub seats: Option<i64>,
    pub suspended: Option<bool>,
    /// Merged into the overrides: keys named here replace theirs, the
    /// others stay.
    pub limits: LimitOverrides,
    pub idp_enrolled: Option<bool>,
    /// `Some(None)` keeps finished tasks forever.
    pub retention_days: Option<Option<i64>>,
}

impl SettingsChange {
    pub fn suspend() -> Self {
        Self {
            suspended: Some(true),
            ..Self::default()
        }
    }

    pub fn idp_enrollment(enrolled: bool) -> Self {
        Self {
            idp_enrolled: Some(enrolled),
            ..Self::default()
        }
    }
}

#[derive(Debug, Clone)]
pub struct MemberRecord {
    pub org_id: OrgId,
    pub email: String,
    pub role: Role,
    pub seated: bool,
    pub profile_tags: Vec<String>,
    pub joined_at: i64,
}

#[derive(Debug, Clone)]
pub struct KeyRecord {
    pub key_id: KeyId,
    pub org_id: OrgId,
    pub email: String,
    pub name: String,
    pub secret_hash: Vec<u8>,
    pub active: bool,
    pub created_at: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pro_scales_with_seats_within_caps_and_overrides_win() {
        let l = Tier::Pro.default_limits(3);
        assert_eq!(l.writes_per_minute, Some(180));
        assert_eq!(Tier::Pro.default_limits(50).writes_per_minute, Some(600));
        assert_eq!(
            Tier::Enterprise.default_limits(1).requests_per_month,
            Some(5_000_000)
        );
        let mut org = dev_org();
        org.limit_overrides.insert(LimitKey::WritesPerMinute, None);
        let eff = org.effective_limits();
        assert_eq!(eff.get(LimitKey::WritesPerMinute), None);
        assert_eq!(eff.get(LimitKey::ReadsPerMinute), Some(120));
    }

    fn dev_org() -> OrgRecord {
        OrgRecord {
            org_id: OrgId::new_v7(),
            name: "x".into(),
            tier: Tier::Dev,
            encryption: Encryption::Managed,
            seats: 5,
            suspended: false,
            limit_overrides: LimitOverrides::new(),
            wrapped_dek: None,
            idp_enrolled: false,
            retention_days: None,
            created_at: 0,
        }
    }

    #[test]
    fn a_settings_change_touches_only_its_fields() {
        let mut org = dev_org();
        org.limit_overrides.insert(LimitKey::Tags, Some(7));
        let tier = SettingsChange {
            tier: Some(Tier::Pro),
            ..SettingsChange::default()
        };
        assert!(org.apply(&tier));
        let limits = SettingsChange {
            limits: [(LimitKey::WritesPerMinute, None)].into(),
            ..SettingsChange::default()
        };
        assert!(org.apply(&limits));
        assert!(org.apply(&SettingsChange::suspend()));
        assert!(org.apply(&SettingsChange::idp_enrollment(true)));
        assert_eq!(org.tier, Tier::Pro);
        assert_eq!(org.seats, 5);
        assert!(org.suspended && org.idp_enrolled);
        assert_eq!(
            org.limit_overrides,
            [(LimitKey::WritesPerMinute, None), (LimitKey::Tags, Some(7))].into()
        );
        // The same change again changes nothing.
        assert!(!org.apply(&SettingsChange::suspend()));
        assert!(!org.apply(&limits));
        assert!(!org.apply(&SettingsChange::default()));
    }

    #[test]
    fn retention_is_set_kept_and_cleared() {
        let mut org = dev_org();
        let keep = |days| SettingsChange {
            retention_days: Some(days),
            ..SettingsChange::default()
        };
        assert!(org.apply(&keep(Some(30))));
        assert!(org.apply(&SettingsChange::suspend()));
        assert_eq!(org.retention_days, Some(30));
        assert!(!org.apply(&keep(Some(30))));
        assert!(org.apply(&keep(None)));
        assert_eq!(org.retention_days, None);
    }

    #[test]
    fn plan_gates_follow_the_tier() {
        let gates = |tier: Tier| {
            let org = OrgRecord { tier, ..dev_org() };
            (
                org.require_paid_plan("teams").is_ok(),
                org.require_pro_plan("runbooks").is_ok(),
            )
        };
        assert_eq!(gates(Tier::Free), (false, false));
        assert_eq!(gates(Tier::Dev), (true, false));
        assert_eq!(gates(Tier::Pro), (true, true));
        assert_eq!(gates(Tier::Enterprise), (true, true));
    }
}

/// Who is calling: a member of one org, through one of its keys or through
/// the service acting for it.
#[derive(Debug, Clone)]
pub struct Caller {
    pub org_id: OrgId,
    pub principal: Principal,
    /// The key's name: the assignee of the tasks it claims.
    pub key_name: String,
    pub email: String,
    pub role: Role,
}

impl Caller {
    /// The key it calls with; none when the service acts for the member.
    pub fn key_id(&self) -> Option<KeyId> {
        match self.principal {
            Principal::Key(key) => Some(key),
            Principal::Schedule(_) | Principal::Feedback => None,
        }
    }
}

/// What a caller acts as: an API key, or the service itself for a named
/// reason. Logs and limits held per caller name it, so work the service
/// does for a member is never mistaken for one of the member's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Principal {
    /// An API key, authenticated.
    Key(KeyId),
    /// The schedule ticked: its task is created with its creator's rights.
    Schedule(ScheduleId),
    /// The service's feedback intake, filing feedback in its own org.
    Feedback,
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Key(key) => write!(f, "key {key}"),
            Self::Schedule(schedule) => write!(f, "schedule {schedule} ticked"),
            Self::Feedback => f.write_str("feedback intake"),
        }
    }
}

#[cfg(test)]
mod principal_tests {
    use super::*;

    #[test]
    fn a_principal_says_what_acts() {
        let key: KeyId = "0190a0c2-7f3e-7c1a-9b2d-3e4f5a6b7c8d".parse().unwrap();
        let schedule: ScheduleId = "0190a0c2-7f3e-7c1a-9b2d-3e4f5a6b7c8e".parse().unwrap();
        assert_eq!(
            Principal::Key(key).to_string(),
            "key 0190a0c2-7f3e-7c1a-9b2d-3e4f5a6b7c8d"
        );
        assert_eq!(
            Principal::Schedule(schedule).to_string(),
            "schedule 0190a0c2-7f3e-7c1a-9b2d-3e4f5a6b7c8e ticked"
        );
        assert_eq!(Principal::Feedback.to_string(), "feedback intake");
    }
}
