//! What an org has used this month, and when months turn over.
//!
//! Months are calendar months in UTC; every counter resets at 00:00 UTC on
//! the first. The rate buckets' state rides along so it can be stored with
//! the counters. What a new org's limits start as is the operator's.

use chrono::{Datelike, TimeZone, Utc};

use super::account::{LimitKey, LimitOverrides};

/// How a request counts against the per-minute limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    Read,
    Write,
}

impl RequestKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestKind::Read => "read",
            RequestKind::Write => "write",
        }
    }

    /// The org limit that bounds this kind per minute.
    pub fn limit_key(self) -> super::account::LimitKey {
        match self {
            RequestKind::Read => super::account::LimitKey::ReadsPerMinute,
            RequestKind::Write => super::account::LimitKey::WritesPerMinute,
        }
    }
}

/// `YYYY-MM` of the UTC month holding `ms`.
pub fn month_of(ms: i64) -> String {
    let t = Utc.timestamp_millis_opt(ms).single().unwrap_or_default();
    format!("{:04}-{:02}", t.year(), t.month())
}

/// 00:00 UTC on the first of the month after the one holding `ms`.
pub fn next_month_start(ms: i64) -> i64 {
    let t = Utc.timestamp_millis_opt(ms).single().unwrap_or_default();
    let (year, month) = if t.month() == 12 {
        (t.year() + 1, 1)
    } else {
        (t.year(), t.month() + 1)
    };
    Utc.with_ymd_and_hms(year, month, 1, 0, 0, 0)
        .single()
        .map_or(ms, |s| s.timestamp_millis())
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Usage {
    pub month: String,
    pub requests: i64,
    pub tasks: i64,
    pub plans: i64,
    /// Token-bucket state (GCRA theoretical arrival time), ns since the epoch; 0 = full.
    pub read_tat: u64,
    pub write_tat: u64,
}

impl Usage {
    /// Starts a new month's counters if `now_ms` is past this one.
    pub fn roll(&mut self, now_ms: i64) {
        let month = month_of(now_ms);
        if self.month != month {
            *self = Usage {
                month,
                read_tat: self.read_tat,
                write_tat: self.write_tat,
                ..Usage::default()
            };
        }
    }
}

/// What a new org's limits start as: the operator's choice
/// (`TASKQ_NEW_ORG_LIMITS`) for a server of their own, where nobody is
/// billed by tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NewOrgLimits {
    /// Its tier's numbers (CONTRACT §2).
    #[default]
    Tier,
    /// No rate or volume limit: writes and reads a minute, requests and
    /// tasks a month lifted, as `PATCH /admin/orgs` with them `null` would;
    /// the tier's counts (tags, teams, plans, webhooks, schedules) stay.
    Unlimited,
}

impl NewOrgLimits {
    /// The overrides a new org is stored with.
    pub fn overrides(self) -> LimitOverrides {
        match self {
            NewOrgLimits::Tier => LimitOverrides::new(),
            NewOrgLimits::Unlimited => [
                LimitKey::WritesPerMinute,
                LimitKey::ReadsPerMinute,
                LimitKey::RequestsPerMonth,
                LimitKey::TasksPerMonth,
            ]
            .into_iter()
            .map(|key| (key, None))
            .collect(),
        }
    }
}

impl std::str::FromStr for NewOrgLimits {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tier" => Ok(NewOrgLimits::Tier),
            "unlimited" => Ok(NewOrgLimits::Unlimited),
            other => Err(format!("must be tier or unlimited, not {other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operator_may_start_new_orgs_without_rate_or_volume_limits() {
        let lifted = "unlimited".parse::<NewOrgLimits>().unwrap().overrides();
        for key in [
            LimitKey::WritesPerMinute,
            LimitKey::ReadsPerMinute,
            LimitKey::RequestsPerMonth,
            LimitKey::TasksPerMonth,
        ] {
            assert_eq!(lifted.get(&key), Some(&None), "{key:?}");
        }
        assert_eq!(lifted.len(), 4, "the tier's counts stay: {lifted:?}");
        assert!(NewOrgLimits::Tier.overrides().is_empty());
        assert!("none".parse::<NewOrgLimits>().is_err());
    }

    fn ms(y: i32, m: u32, d: u32, h: u32) -> i64 {
        Utc.with_ymd_and_hms(y, m, d, h, 0, 0)
            .unwrap()
            .timestamp_millis()
    }

    #[test]
    fn months_turn_over_at_utc_midnight_on_the_first() {
        assert_eq!(month_of(ms(2026, 11, 30, 23)), "2026-11");
        assert_eq!(next_month_start(ms(2026, 11, 21, 5)), ms(2026, 12, 1, 0));
        assert_eq!(next_month_start(ms(2026, 12, 31, 23)), ms(2027, 1, 1, 0));
        assert_eq!(next_month_start(ms(2027, 1, 1, 0)), ms(2027, 2, 1, 0));
    }

    #[test]
    fn rolling_resets_counters_but_keeps_buckets() {
        let mut u = Usage {
            month: "2026-11".into(),
            requests: 9,
            tasks: 3,
            plans: 1,
            read_tat: 7,
            write_tat: 8,
        };
        u.roll(ms(2026, 11, 30, 12));
        assert_eq!(u.requests, 9);
        u.roll(ms(2026, 12, 1, 0));
        assert_eq!(
            (u.month.as_str(), u.requests, u.tasks, u.plans),
            ("2026-12", 0, 0, 0)
        );
        assert_eq!((u.read_tat, u.write_tat), (7, 8));
    }
}
