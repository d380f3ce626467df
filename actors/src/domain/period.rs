//! Standup periods: a UTC day (`YYYY-MM-DD`), an ISO week (`YYYY-Www`) or
//! a calendar month (`YYYY-MM`), with their bounds in milliseconds. Their
//! link to the api's `Cadence` (`containing`, `cadence`) is in
//! `reports/period.rs`, since the domain imports nothing of the crate.

use std::fmt;

use chrono::{Datelike, Days, Months, NaiveDate, TimeZone, Utc, Weekday};

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
}
