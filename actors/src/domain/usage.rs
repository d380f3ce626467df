//! What an org has used this month, and when months turn over.
//!
//! Months are calendar months in UTC; every counter resets at 00:00 UTC on
//! the first. The rate buckets' state rides along so it can be stored with
//! the counters.

use chrono::{Datelike, TimeZone, Utc};

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

#[cfg(test)]
mod tests {
    use super::*;

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
