//! Time as the engine sees it: milliseconds since the Unix epoch, UTC.
//!
//! The clock is injected so tests can move time without waiting.

use std::sync::atomic::{AtomicI64, Ordering};

pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> i64;
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        chrono::Utc::now().timestamp_millis()
    }
}

/// A clock that follows the system clock plus an offset a test can change.
#[derive(Debug, Default)]
pub struct OffsetClock {
    offset_ms: AtomicI64,
}

impl OffsetClock {
    pub fn advance(&self, ms: i64) {
        self.offset_ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for OffsetClock {
    fn now_ms(&self) -> i64 {
        SystemClock.now_ms() + self.offset_ms.load(Ordering::SeqCst)
    }
}

/// RFC 3339, UTC, millisecond precision, `Z` suffix. Every task in an
/// answer carries two or three of these, so the usual years are written
/// digit by digit rather than through the formatting machinery.
pub fn format_ms(ms: i64) -> String {
    use chrono::{Datelike as _, Timelike as _};
    let Some(t) = chrono::DateTime::from_timestamp_millis(ms) else {
        return String::from("1970-01-01T00:00:00.000Z");
    };
    let Ok(year @ 0..=9999) = u32::try_from(t.year()) else {
        return t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    };
    let mut text = *b"0000-00-00T00:00:00.000Z";
    let fields = [
        (0..4, year),
        (5..7, t.month()),
        (8..10, t.day()),
        (11..13, t.hour()),
        (14..16, t.minute()),
        (17..19, t.second()),
        (20..23, t.timestamp_subsec_millis()),
    ];
    for (range, mut n) in fields {
        for digit in text[range].iter_mut().rev() {
            *digit = b'0' + (n % 10) as u8;
            n /= 10;
        }
    }
    String::from(std::str::from_utf8(&text).expect("ASCII digits and separators"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_millis_and_z() {
        assert_eq!(format_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(format_ms(0), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn writes_what_chrono_writes_for_every_year() {
        let chrono = |ms| {
            chrono::DateTime::from_timestamp_millis(ms)
                .unwrap()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        };
        // From before year 0 to after 9999, in steps that hit every field.
        let (first, last) = (-62_200_000_000_000_i64, 253_500_000_000_000_i64);
        let mut ms = first;
        while ms < last {
            assert_eq!(format_ms(ms), chrono(ms), "{ms}");
            ms += 77_777_785_697;
        }
        for ms in [
            -1,
            1,
            999,
            1_000,
            86_399_999,
            951_782_400_000,
            253_402_300_799_999,
        ] {
            assert_eq!(format_ms(ms), chrono(ms), "{ms}");
        }
    }
}
