//! Standup cadences and periods: a UTC day (`YYYY-MM-DD`), an ISO week
//! (`YYYY-Www`) or a calendar month (`YYYY-MM`), with their bounds in
//! milliseconds.

use std::fmt;

use chrono::{Datelike, Days, Months, NaiveDate, TimeZone, Utc, Weekday};
use serde::{Deserialize, Serialize};

/// How often a standup report is written, and the period it covers.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Cadence {
    Daily,
    Weekly,
    Monthly,
}

impl Cadence {
    pub const ALL: [Cadence; 3] = [Cadence::Daily, Cadence::Weekly, Cadence::Monthly];

    pub fn as_str(self) -> &'static str {
        match self {
            Cadence::Daily => "daily",
            Cadence::Weekly => "weekly",
            Cadence::Monthly => "monthly",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Period {
    Day(NaiveDate),
    /// The ISO week starting on this Monday.
    Week(NaiveDate),
    /// The month starting on this first day.
    Month(NaiveDate),
}

impl Period {
    /// `YYYY-MM-DD`, `YYYY-Www` or `YYYY-MM`; `None` for anything else,
    /// including dates and weeks that do not exist.
    pub fn parse(s: &str) -> Option<Self> {
        let b = s.as_bytes();
        let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
        match b.len() {
            10 if b[4] == b'-' && b[7] == b'-' && digits(0..4) && digits(5..7) && digits(8..10) => {
                NaiveDate::parse_from_str(s, "%Y-%m-%d")
                    .ok()
                    .map(Period::Day)
            }
            8 if b[4] == b'-' && b[5] == b'W' && digits(0..4) && digits(6..8) => {
                let year: i32 = s[0..4].parse().ok()?;
                let week: u32 = s[6..8].parse().ok()?;
                NaiveDate::from_isoywd_opt(year, week, Weekday::Mon).map(Period::Week)
            }
            7 if b[4] == b'-' && digits(0..4) && digits(5..7) => {
                let year: i32 = s[0..4].parse().ok()?;
                let month: u32 = s[5..7].parse().ok()?;
                NaiveDate::from_ymd_opt(year, month, 1).map(Period::Month)
            }
            _ => None,
        }
    }

    /// The UTC day holding the instant `ms`.
    pub fn day_of(ms: i64) -> Self {
        Period::Day(
            Utc.timestamp_millis_opt(ms)
                .single()
                .map(|t| t.date_naive())
                .unwrap_or_default(),
        )
    }

    /// The ISO week holding the instant `ms`.
    pub fn week_of(ms: i64) -> Self {
        let day = Self::day_of(ms).first_day();
        Period::Week(day - Days::new(u64::from(day.weekday().num_days_from_monday())))
    }

    /// The calendar month holding the instant `ms`.
    pub fn month_of(ms: i64) -> Self {
        let day = Self::day_of(ms).first_day();
        Period::Month(day.with_day(1).unwrap_or(day))
    }

    fn first_day(self) -> NaiveDate {
        match self {
            Period::Day(d) | Period::Week(d) | Period::Month(d) => d,
        }
    }

    /// The first day after the period.
    fn end_day(self) -> NaiveDate {
        match self {
            Period::Day(d) => d + Days::new(1),
            Period::Week(d) => d + Days::new(7),
            Period::Month(d) => d + Months::new(1),
        }
    }

    /// `[start, end)` in milliseconds since the epoch.
    pub fn bounds(self) -> (i64, i64) {
        let ms = |d: NaiveDate| {
            d.and_hms_opt(0, 0, 0)
                .map(|t| t.and_utc().timestamp_millis())
                .unwrap_or_default()
        };
        (ms(self.first_day()), ms(self.end_day()))
    }

    /// The period just before this one.
    pub fn previous(self) -> Self {
        match self {
            Period::Day(d) => Period::Day(d - Days::new(1)),
            Period::Week(d) => Period::Week(d - Days::new(7)),
            Period::Month(d) => Period::Month(d - Months::new(1)),
        }
    }
}

impl Period {
    /// The period of `cadence` holding the instant `ms`.
    pub fn containing(cadence: Cadence, ms: i64) -> Self {
        match cadence {
            Cadence::Daily => Period::day_of(ms),
            Cadence::Weekly => Period::week_of(ms),
            Cadence::Monthly => Period::month_of(ms),
        }
    }

    pub fn cadence(self) -> Cadence {
        match self {
            Period::Day(_) => Cadence::Daily,
            Period::Week(_) => Cadence::Weekly,
            Period::Month(_) => Cadence::Monthly,
        }
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Period::Day(d) => write!(f, "{}", d.format("%Y-%m-%d")),
            Period::Week(d) => {
                let w = d.iso_week();
                write!(f, "{:04}-W{:02}", w.year(), w.week())
            }
            Period::Month(d) => write!(f, "{}", d.format("%Y-%m")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_parse_and_print_the_same() {
        for s in [
            "2026-11-24",
            "2026-W48",
            "2026-11",
            "2020-W53",
            "2024-02-29",
        ] {
            assert_eq!(Period::parse(s).unwrap().to_string(), s);
        }
        for bad in [
            "2026-02-30",
            "2026-13",
            "2026-00",
            "2026-W00",
            "2026-W54",
            "2021-W53",
            "2026-1-01",
            "26-11-24",
            "2026-11-24T",
            "2026-w48",
            "",
        ] {
            assert_eq!(Period::parse(bad), None, "{bad}");
        }
    }

    fn at(s: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .timestamp_millis()
    }

    #[test]
    fn the_period_holding_an_instant_has_utc_bounds() {
        let t = at("2026-11-24T13:30:00Z");
        let day = Period::containing(Cadence::Daily, t);
        assert_eq!(day.to_string(), "2026-11-24");
        assert_eq!(
            day.bounds(),
            (at("2026-11-24T00:00:00Z"), at("2026-11-25T00:00:00Z"))
        );
        let week = Period::containing(Cadence::Weekly, t);
        assert_eq!(week.to_string(), "2026-W48");
        assert_eq!(week.bounds().0, at("2026-11-23T00:00:00Z"));
        assert_eq!(week.bounds().1, at("2026-11-30T00:00:00Z"));
        let month = Period::containing(Cadence::Monthly, t);
        assert_eq!(
            month.bounds(),
            (at("2026-11-01T00:00:00Z"), at("2026-12-01T00:00:00Z"))
        );
        assert_eq!(month.previous().to_string(), "2026-10");
        assert_eq!(week.previous().to_string(), "2026-W47");
        assert_eq!(
            Period::containing(Cadence::Weekly, at("2027-01-01T00:00:00Z")).to_string(),
            "2026-W53"
        );
    }
}
