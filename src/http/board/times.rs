//! Times and durations as people read them.
//!
//! The API's times are exact instants in UTC to the millisecond
//! (`2026-12-08T02:00:00.000Z`): right for a program, hard on a person, who
//! then converts a 03:00 Berlin schedule in their head. A page shows each
//! time as a `<time>` whose `datetime` and `title` keep that exact value
//! (what a hover shows, and what the script reads), with a UTC wall-clock
//! time to the minute as its text, so a page read without the script still
//! says which zone it means. The script then writes it in the reader's own
//! zone with how far off it is ("in 3 h"). A schedule's ticks are shown in
//! the schedule's own zone instead, since that is the zone its pattern
//! speaks of.

use taskq_actors::api::Timestamp;
use taskq_actors::domain::schedule::Zone;

/// A time as a page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct When {
    /// The API's exact text of the instant.
    pub iso: String,
    /// The wall-clock time, to the minute, with its zone.
    pub text: String,
    /// The zone the text is in, when it is not the reader's to choose.
    pub zone: Option<String>,
}

impl When {
    /// In UTC (`2026-12-08 02:00 UTC`); the script shows it in the
    /// reader's zone.
    pub fn utc(at: Timestamp) -> When {
        When {
            iso: at.to_string(),
            text: Zone::utc()
                .wall_clock(at.0)
                .unwrap_or_else(|| at.to_string()),
            zone: None,
        }
    }

    /// In the IANA zone `zone` (`2026-12-08 03:00 CET`), which the script
    /// keeps; a zone that is not one is read as UTC.
    pub fn in_zone(at: Timestamp, zone: &str) -> When {
        match Zone::parse(zone).ok().and_then(|z| z.wall_clock(at.0)) {
            Some(text) => When {
                iso: at.to_string(),
                text,
                zone: Some(zone.to_owned()),
            },
            None => When::utc(at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-08T02:00:00Z.
    const TICK: Timestamp = Timestamp(1_796_695_200_000);

    #[test]
    fn a_time_reads_to_the_minute_in_utc_and_keeps_its_exact_value() {
        let at = When::utc(TICK);
        assert_eq!(at.iso, "2026-12-08T02:00:00.000Z");
        assert_eq!(at.text, "2026-12-08 02:00 UTC");
        assert_eq!(at.zone, None);
    }

    #[test]
    fn a_schedules_tick_reads_in_its_own_zone() {
        let at = When::in_zone(TICK, "Europe/Berlin");
        assert_eq!(at.text, "2026-12-08 03:00 CET");
        assert_eq!(at.iso, "2026-12-08T02:00:00.000Z");
        assert_eq!(at.zone.as_deref(), Some("Europe/Berlin"));
        assert_eq!(When::in_zone(TICK, "Mars/Base"), When::utc(TICK));
    }
}
