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
//!
//! A chart of durations takes its unit from its largest value: short cycles
//! drawn in hours all read 0.0.

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

/// The unit a chart of durations is drawn in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unit {
    pub name: &'static str,
    /// How many of the unit make an hour.
    pub per_hour: f64,
}

const SECONDS: Unit = Unit {
    name: "seconds",
    per_hour: 3600.0,
};
const MINUTES: Unit = Unit {
    name: "minutes",
    per_hour: 60.0,
};
const HOURS: Unit = Unit {
    name: "hours",
    per_hour: 1.0,
};
const DAYS: Unit = Unit {
    name: "days",
    per_hour: 1.0 / 24.0,
};

/// The unit of a chart whose largest duration is `largest_hours`:
/// seconds below a minute, minutes below an hour, hours below two days,
/// else days.
pub fn unit_for(largest_hours: f64) -> Unit {
    if largest_hours < 1.0 / 60.0 {
        SECONDS
    } else if largest_hours < 1.0 {
        MINUTES
    } else if largest_hours < 48.0 {
        HOURS
    } else {
        DAYS
    }
}

/// A figure as a bar's label: one decimal below 10, whole above.
pub fn figure(value: f64) -> String {
    if value < 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.0}")
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

    #[test]
    fn a_charts_unit_follows_its_largest_duration() {
        assert_eq!(unit_for(12.0 / 3600.0), SECONDS);
        assert_eq!(unit_for(1.0 / 60.0), MINUTES);
        assert_eq!(unit_for(0.5), MINUTES);
        assert_eq!(unit_for(1.0), HOURS);
        assert_eq!(unit_for(47.9), HOURS);
        assert_eq!(unit_for(48.0), DAYS);
        assert_eq!(0.5 * unit_for(0.5).per_hour, 30.0);
        assert_eq!(figure(12.0 / 3600.0 * SECONDS.per_hour), "12");
        assert_eq!(figure(1.24), "1.2");
    }
}
