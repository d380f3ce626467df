//! Orgs, members and API keys: who may act, and under which plan.

use serde_json::{Map, Value};

use super::{KeyId, OrgId};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

    /// The tier's numbers before operator overrides (`None`: unlimited).
    pub fn default_limits(self, seats: i64) -> Map<String, Value> {
        let seats = seats.max(1);
        let (w, r, month, tags, teams, plans) = match self {
            Tier::Free => (Some(10), Some(30), Some(10_000), 20, None, None),
            Tier::Dev => (Some(30), Some(120), Some(100_000), 100, Some(5), None),
            Tier::Pro => (
                Some((60 * seats).min(600)),
                Some((300 * seats).min(3_000)),
                Some(300_000 * seats),
                500,
                Some(50),
                Some(100),
            ),
            Tier::Enterprise => (
                Some(600),
                Some(3_000),
                Some((1_000_000 * seats).max(5_000_000)),
                2_000,
                Some(500),
                Some(1_000),
            ),
        };
        let mut m = Map::new();
        let mut put = |k: &str, v: Option<i64>| {
            m.insert(k.to_owned(), v.map_or(Value::Null, Value::from));
        };
        put("writes_per_minute", w);
        put("reads_per_minute", r);
        put("requests_per_month", month);
        put("tasks_per_month", Some(1_000));
        put("tags", Some(tags));
        put("teams", teams.or(Some(0)));
        put("plans_per_month", plans.or(Some(0)));
        m
    }
}

pub const LIMIT_KEYS: [&str; 7] = [
    "writes_per_minute",
    "reads_per_minute",
    "requests_per_month",
    "tasks_per_month",
    "tags",
    "teams",
    "plans_per_month",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
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

#[derive(Debug, Clone)]
pub struct OrgRecord {
    pub org_id: OrgId,
    pub name: String,
    pub tier: Tier,
    pub encryption: Encryption,
    pub seats: i64,
    pub suspended: bool,
    /// Operator overrides only; a key present with `null` means unlimited.
    pub limit_overrides: Map<String, Value>,
    pub wrapped_dek: Option<Vec<u8>>,
    pub idp_enrolled: bool,
    pub created_at: i64,
}

impl OrgRecord {
    /// Teams (and later reports) need a paid plan; free orgs hear how to get one.
    pub fn require_paid_plan(&self, feature: &str) -> Result<(), crate::error::EngineError> {
        if self.tier.is_paid() {
            Ok(())
        } else {
            Err(crate::error::EngineError::UpgradeRequired(format!(
                "{feature} need a paid plan (dev, pro or enterprise)"
            )))
        }
    }

    /// The tier's numbers with the operator's overrides applied.
    pub fn effective_limits(&self) -> Map<String, Value> {
        let mut limits = self.tier.default_limits(self.seats);
        for (k, v) in &self.limit_overrides {
            limits.insert(k.clone(), v.clone());
        }
        limits
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
        assert_eq!(l["writes_per_minute"], 180);
        assert_eq!(Tier::Pro.default_limits(50)["writes_per_minute"], 600);
        assert_eq!(
            Tier::Enterprise.default_limits(1)["requests_per_month"],
            5_000_000
        );
        let mut org = OrgRecord {
            org_id: OrgId::new_v7(),
            name: "x".into(),
            tier: Tier::Dev,
            encryption: Encryption::Managed,
            seats: 5,
            suspended: false,
            limit_overrides: Map::new(),
            wrapped_dek: None,
            idp_enrolled: false,
            created_at: 0,
        };
        org.limit_overrides
            .insert("writes_per_minute".into(), Value::Null);
        let eff = org.effective_limits();
        assert!(eff["writes_per_minute"].is_null());
        assert_eq!(eff["reads_per_minute"], 120);
    }
}

/// Who is calling: an authenticated key of a member of one org.
#[derive(Debug, Clone)]
pub struct Caller {
    pub org_id: OrgId,
    pub key_id: KeyId,
    /// The key's name: the assignee of the tasks it claims.
    pub key_name: String,
    pub email: String,
    pub role: Role,
}
