//! When a schedule ticks: its cron pattern, its time zone, and the id of the
//! task each tick creates. Pure: the org actor asks for the next tick to arm
//! its timer and for the latest missed tick when it is served again.
//!
//! A pattern is the five standard fields (minute hour day-of-month month
//! day-of-week) with `*`, numbers, ranges, steps and lists, and nothing
//! else: every cron users know reads these the same way, while names, `?`,
//! `L`, `W`, `#`, seconds and nicknames differ from one cron to the next.
//! When both day fields are restricted (neither is a bare `*`), a day that
//! matches either fires, as in POSIX cron. A pattern that can never match
//! (`0 0 31 2 *`) is refused when it is written, not discovered as a
//! schedule that silently never runs.
//!
//! Ticks are wall-clock times in the schedule's zone: `0 9 * * 1-5` in
//! `Europe/Berlin` is 09:00 in Berlin all year, 07:00 or 08:00 UTC. They
//! are computed on the zone's local clock (croner on a naive date and time,
//! where no hour is missing or repeated) and then placed on the time line,
//! so that each local tick fires once, whatever daylight saving time does:
//! - a local time that does not exist (the hour skipped when clocks spring
//!   forward, 02:30 on the change day in `America/New_York`) fires at the
//!   first instant after the gap (03:00 there). A user sees that day's run
//!   at 03:00 rather than no run at all; an hourly pattern's 02:00 and
//!   03:00 runs are that one instant, so that hour has one run;
//! - a local time that exists twice (the hour repeated when clocks fall
//!   back, 01:30) fires at the first of its two instants. A user sees one
//!   run, not two; an hourly or minutely pattern has no runs in the repeated
//!   hour, since every local time in it has already fired.
//!
//! So ticks are strictly increasing instants, one per local tick, and all
//! whole minutes. A tick's task id is a name-based UUID of the schedule and
//! the tick's instant: however often a tick is fired (a takeover, a crash
//! between commit and answer), it names one task, and the store keeps one.

use chrono::{DateTime, LocalResult, NaiveDateTime, SubsecRound, TimeDelta, TimeZone};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use uuid::Uuid;

use super::TaskId;

/// A validated five-field cron pattern (minute hour day-of-month month
/// day-of-week) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronSpec {
    /// The fields as written, joined by single spaces.
    text: String,
    cron: Cron,
}

impl CronSpec {
    /// Only the five standard fields, each `*`, a number, a range `a-b`, a
    /// step `*/n` or `a-b/n`, or a comma-separated list of those, with
    /// numbers in range (minute 0-59, hour 0-23, day 1-31, month 1-12,
    /// day-of-week 0-7 with 0 and 7 both Sunday). Anything else, and a
    /// pattern that can never match, is an error that says what is wrong,
    /// phrased to follow `cron: `.
    pub fn parse(text: &str) -> Result<Self, String> {
        let fields: Vec<&str> = text.split_ascii_whitespace().collect();
        if let Some(nickname) = fields.first().filter(|field| field.starts_with('@')) {
            return Err(format!(
                "nicknames such as `{nickname}` are not supported: write the five fields \
                 (minute hour day-of-month month day-of-week), e.g. `0 0 * * *` for daily"
            ));
        }
        let count = fields.len();
        let Ok(fields) = <[&str; 5]>::try_from(fields) else {
            return Err(format!(
                "expected five fields (minute hour day-of-month month day-of-week), found {count}"
            ));
        };
        let mut values = [0u64; 5];
        for ((field, written), value) in FIELDS.iter().zip(fields).zip(&mut values) {
            *value = field.values(written)?;
        }
        check_some_day_exists(fields, values)?;

        let text = fields.join(" ");
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .dom_and_dow(false)
            .alternative_weekdays(false)
            .build()
            .parse(&text)
            .map_err(|error| format!("cannot be evaluated: {error}"))?;
        Ok(Self { text, cron })
    }

    pub fn text(&self) -> &str {
        &self.text
    }
}

/// An IANA time zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone(Tz);

impl Zone {
    /// A name of the IANA database (`Europe/Berlin`, `UTC`), as spelt there;
    /// an unknown one is an error naming it.
    pub fn parse(name: &str) -> Result<Self, String> {
        name.parse::<Tz>().map(Self).map_err(|_| {
            format!("unknown time zone `{name}`: expected an IANA name such as `Europe/Berlin` or `UTC`")
        })
    }

    pub fn utc() -> Self {
        Self(Tz::UTC)
    }

    pub fn name(&self) -> &str {
        self.0.name()
    }
}

/// The first tick strictly after `after_ms` (milliseconds since the Unix
/// epoch), as milliseconds. `None` only past croner's search bound (the
/// local year 5000) or for an `after_ms` chrono cannot represent: every
/// pattern [`CronSpec::parse`] accepts ticks at least once in eight years.
pub fn next_tick(cron: &CronSpec, zone: &Zone, after_ms: i64) -> Option<i64> {
    // No local tick up to the local time of `after` is later than `after`;
    // one after it may still not be, when `after` is in the second pass of a
    // repeated hour and the tick is in that hour: those have fired already.
    let mut local = local_time(zone, after_ms)?;
    loop {
        local = next_local_tick(cron, local)?;
        let instant = first_instant(zone, local)?;
        if instant > after_ms {
            return Some(instant);
        }
    }
}

/// The latest tick in `(after_ms, until_ms]`, if any: the one tick fired
/// after an outage. It searches back from `until_ms` on the local clock, so
/// a span of years costs no more than a short one.
pub fn latest_tick(cron: &CronSpec, zone: &Zone, after_ms: i64, until_ms: i64) -> Option<i64> {
    if until_ms <= after_ms {
        return None;
    }
    let until_local = local_time(zone, until_ms)?;
    let mut latest =
        previous_local_tick(cron, until_local).and_then(|local| first_instant(zone, local));
    // When `until` is in the second pass of a repeated hour, local ticks
    // after its local time can still lie before it, in the first pass.
    let mut local = until_local;
    while let Some(next) = next_local_tick(cron, local) {
        match first_instant(zone, next) {
            Some(instant) if instant <= until_ms => {
                latest = Some(instant);
                local = next;
            }
            _ => break,
        }
    }
    latest.filter(|&instant| instant > after_ms)
}

/// The id of the task a schedule's tick creates: a name-based UUID (v5)
/// under [`TICK_NAMESPACE`] of the schedule id's 16 bytes followed by the
/// tick's milliseconds as 8 big-endian bytes. A tick fired twice derives
/// one id; these ids are not time-ordered as minted ones (v7) are.
pub fn tick_task_id(schedule_id: Uuid, tick_ms: i64) -> TaskId {
    let mut name = [0u8; 24];
    name[..16].copy_from_slice(schedule_id.as_bytes());
    name[16..].copy_from_slice(&tick_ms.to_be_bytes());
    TaskId(Uuid::new_v5(&TICK_NAMESPACE, &name))
}

/// The namespace of tick task ids: fixed forever, since changing it would
/// give a tick fired again after an upgrade a second task.
pub const TICK_NAMESPACE: Uuid = Uuid::from_u128(0x9546c207_2e8b_4b70_ad28_746a43faf5d9);

/// The longest run of local times that do not exist. The longest in the
/// IANA database is a whole day (Samoa skipped 30 December 2011).
const LONGEST_GAP_MINUTES: u32 = 48 * 60;

/// One of the five fields: its name in messages and its range.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
}

const FIELDS: [Field; 5] = [
    Field::new("minute", 0, 59),
    Field::new("hour", 0, 23),
    Field::new("day-of-month", 1, 31),
    Field::new("month", 1, 12),
    Field::new("day-of-week", 0, 7),
];

impl Field {
    const fn new(name: &'static str, min: u32, max: u32) -> Self {
        Self { name, min, max }
    }

    /// The values `written` stands for, as bits; an error says which part
    /// of which field is wrong.
    fn values(&self, written: &str) -> Result<u64, String> {
        let refuse = |reason: String| format!("{} field `{written}`: {reason}", self.name);
        let mut values = 0u64;
        for item in written.split(',') {
            if item.is_empty() {
                return Err(refuse("a list item is empty".into()));
            }
            let (range, step) = match item.split_once('/') {
                Some((range, step)) => (range, Some(step)),
                None => (item, None),
            };
            let (low, high) = if range == "*" {
                (self.min, self.max)
            } else if let Some((low, high)) = range.split_once('-') {
                let (low, high) = (
                    self.number(low).map_err(refuse)?,
                    self.number(high).map_err(refuse)?,
                );
                if low > high {
                    return Err(refuse(format!("range `{range}` runs backwards")));
                }
                (low, high)
            } else {
                let value = self.number(range).map_err(refuse)?;
                if let Some(step) = step {
                    return Err(refuse(format!(
                        "a step follows `*` or a range, as in `*/{step}` or `{value}-{}/{step}`",
                        self.max
                    )));
                }
                (value, value)
            };
            let step = match step {
                None => 1,
                Some(step) => self.step(step).map_err(refuse)?,
            };
            for value in (low..=high).step_by(step as usize) {
                values |= 1 << value;
            }
        }
        Ok(values)
    }

    fn number(&self, text: &str) -> Result<u32, String> {
        if text.is_empty() {
            return Err("a number is missing".into());
        }
        if !is_digits(text) {
            return Err(format!(
                "`{text}` is not a number (names, `?`, `L`, `W` and `#` are not supported)"
            ));
        }
        match text.parse() {
            Ok(value) if (self.min..=self.max).contains(&value) => Ok(value),
            _ => Err(format!(
                "`{text}` is out of range {}-{}",
                self.min, self.max
            )),
        }
    }

    fn step(&self, text: &str) -> Result<u32, String> {
        if text.is_empty() {
            return Err("a step is missing after `/`".into());
        }
        match text.parse() {
            Ok(step) if is_digits(text) && (1..=self.max).contains(&step) => Ok(step),
            _ => Err(format!(
                "step `{text}` is not a number from 1 to {}",
                self.max
            )),
        }
    }
}

/// Decimal digits only: no sign, which `str::parse` would take.
fn is_digits(text: &str) -> bool {
    text.bytes().all(|byte| byte.is_ascii_digit())
}

/// Refuses a pattern whose days of the month fall in none of its months
/// (`31` in `2,4`). Only a bare `*` day-of-week leaves the day-of-month
/// alone to choose days; a restricted day-of-week matches some day of every
/// month. February counts its 29th, which leap years have.
fn check_some_day_exists(fields: [&str; 5], values: [u64; 5]) -> Result<(), String> {
    const DAYS_IN_MONTH: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let [.., day_of_month, month, day_of_week] = fields;
    if day_of_week != "*" {
        return Ok(());
    }
    let [_, _, days, months, _] = values;
    let some_day_exists = (1..=12u32)
        .filter(|month| months & (1 << month) != 0)
        .any(|month| days & ((1u64 << (DAYS_IN_MONTH[month as usize - 1] + 1)) - 1) != 0);
    if some_day_exists {
        Ok(())
    } else {
        Err(format!(
            "never matches: day-of-month `{day_of_month}` does not occur in month `{month}`"
        ))
    }
}

/// The wall-clock time in `zone` at `at_ms`.
fn local_time(zone: &Zone, at_ms: i64) -> Option<NaiveDateTime> {
    Some(
        DateTime::from_timestamp_millis(at_ms)?
            .with_timezone(&zone.0)
            .naive_local(),
    )
}

/// The first local tick strictly after `local`.
fn next_local_tick(cron: &CronSpec, local: NaiveDateTime) -> Option<NaiveDateTime> {
    cron.cron
        .find_next_occurrence(&local.trunc_subsecs(0), false)
        .ok()
}

/// The last local tick at or before `local`.
fn previous_local_tick(cron: &CronSpec, local: NaiveDateTime) -> Option<NaiveDateTime> {
    cron.cron
        .find_previous_occurrence(&local.trunc_subsecs(0), true)
        .ok()
}

/// Where the local time `local` lies on the time line, in milliseconds:
/// the first of its instants when it exists twice, the first instant after
/// the gap when it does not exist. Floored to the minute, so that the few
/// zones whose offsets once had seconds tick on whole minutes too.
fn first_instant(zone: &Zone, local: NaiveDateTime) -> Option<i64> {
    let mut candidate = local;
    for _ in 0..=LONGEST_GAP_MINUTES {
        match zone.0.from_local_datetime(&candidate) {
            LocalResult::Single(instant) | LocalResult::Ambiguous(instant, _) => {
                let ms = instant.timestamp_millis();
                return Some(ms - ms.rem_euclid(60_000));
            }
            LocalResult::None => candidate = candidate.checked_add_signed(TimeDelta::minutes(1))?,
        }
    }
    None
}
#[cfg(test)]
mod tests {
    use chrono::Timelike;

    use super::*;

    fn cron(text: &str) -> CronSpec {
        CronSpec::parse(text).unwrap()
    }

    fn zone(name: &str) -> Zone {
        Zone::parse(name).unwrap()
    }

    /// An RFC 3339 time as milliseconds since the epoch.
    fn ms(text: &str) -> i64 {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .timestamp_millis()
    }

    /// The rows of a table: `|`-separated columns, trimmed; blank lines and
    /// `#` comments skipped.
    fn rows(table: &str) -> impl Iterator<Item = Vec<&str>> {
        table
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .map(|line| line.split('|').map(str::trim).collect())
    }

    /// Rows `pattern | zone | after | ticks`: the ticks after `after`, each
    /// found from the one before.
    fn assert_ticks(table: &str) {
        for row in rows(table) {
            let [pattern, zone_name, after, expected] = row[..] else {
                panic!("bad row {row:?}");
            };
            let (cron, zone) = (cron(pattern), zone(zone_name));
            let expected: Vec<i64> = expected.split_whitespace().map(ms).collect();
            let mut from = ms(after);
            let found: Vec<i64> = expected
                .iter()
                .map(|_| {
                    from = next_tick(&cron, &zone, from).unwrap();
                    from
                })
                .collect();
            assert_eq!(found, expected, "{row:?}");
        }
    }

    #[test]
    fn the_five_standard_fields_are_accepted_and_their_text_kept() {
        for (written, text) in [
            ("* * * * *", "* * * * *"),
            ("*/15 * * * *", "*/15 * * * *"),
            ("0,15,30,45 * * * *", "0,15,30,45 * * * *"),
            ("0-30/10 9-17 * * 1-5", "0-30/10 9-17 * * 1-5"),
            ("0 0 1,15 * *", "0 0 1,15 * *"),
            ("5 4 * * 0", "5 4 * * 0"),
            ("5 4 * * 7", "5 4 * * 7"),
            ("0 0 * * 5-7", "0 0 * * 5-7"),
            ("59 23 31 12 0-7", "59 23 31 12 0-7"),
            ("00 09 01 01 00", "00 09 01 01 00"),
            ("0 0 29 2 *", "0 0 29 2 *"),
            ("0 0 31 2 1", "0 0 31 2 1"),
            ("*/59 */23 */31 */12 */7", "*/59 */23 */31 */12 */7"),
            ("  0\t9  * * 1-5 ", "0 9 * * 1-5"),
        ] {
            let parsed = CronSpec::parse(written).map(|spec| spec.text().to_owned());
            assert_eq!(parsed, Ok(text.to_owned()), "{written:?}");
        }
    }

    #[test]
    fn anything_else_is_refused_saying_what_is_wrong() {
        let table = "
            |expected five fields (minute hour day-of-month month day-of-week), found 0
            * * * *|expected five fields (minute hour day-of-month month day-of-week), found 4
            0 * * * * *|expected five fields (minute hour day-of-month month day-of-week), found 6
            0 0 1 1 * 2030|expected five fields (minute hour day-of-month month day-of-week), found 6
            @daily|nicknames such as `@daily` are not supported: write the five fields (minute hour day-of-month month day-of-week), e.g. `0 0 * * *` for daily
            60 * * * *|minute field `60`: `60` is out of range 0-59
            99999999999 * * * *|minute field `99999999999`: `99999999999` is out of range 0-59
            * 24 * * *|hour field `24`: `24` is out of range 0-23
            * * 0 * *|day-of-month field `0`: `0` is out of range 1-31
            * * 32 * *|day-of-month field `32`: `32` is out of range 1-31
            * * * 13 *|month field `13`: `13` is out of range 1-12
            * * * * 8|day-of-week field `8`: `8` is out of range 0-7
            * * * JAN *|month field `JAN`: `JAN` is not a number (names, `?`, `L`, `W` and `#` are not supported)
            * * * * MON|day-of-week field `MON`: `MON` is not a number (names, `?`, `L`, `W` and `#` are not supported)
            * * ? * *|day-of-month field `?`: `?` is not a number (names, `?`, `L`, `W` and `#` are not supported)
            * * L * *|day-of-month field `L`: `L` is not a number (names, `?`, `L`, `W` and `#` are not supported)
            * * 15W * *|day-of-month field `15W`: `15W` is not a number (names, `?`, `L`, `W` and `#` are not supported)
            * * * * 5#3|day-of-week field `5#3`: `5#3` is not a number (names, `?`, `L`, `W` and `#` are not supported)
            * * * * 5L|day-of-week field `5L`: `5L` is not a number (names, `?`, `L`, `W` and `#` are not supported)
            1.5 * * * *|minute field `1.5`: `1.5` is not a number (names, `?`, `L`, `W` and `#` are not supported)
            -5 * * * *|minute field `-5`: a number is missing
            1- * * * *|minute field `1-`: a number is missing
            1-2-3 * * * *|minute field `1-2-3`: `2-3` is not a number (names, `?`, `L`, `W` and `#` are not supported)
            5-1 * * * *|minute field `5-1`: range `5-1` runs backwards
            * * * * 7-0|day-of-week field `7-0`: range `7-0` runs backwards
            */0 * * * *|minute field `*/0`: step `0` is not a number from 1 to 59
            */60 * * * *|minute field `*/60`: step `60` is not a number from 1 to 59
            */+5 * * * *|minute field `*/+5`: step `+5` is not a number from 1 to 59
            */2/3 * * * *|minute field `*/2/3`: step `2/3` is not a number from 1 to 59
            * */ * * *|hour field `*/`: a step is missing after `/`
            5/15 * * * *|minute field `5/15`: a step follows `*` or a range, as in `*/15` or `5-59/15`
            1,,2 * * * *|minute field `1,,2`: a list item is empty
            1, * * * *|minute field `1,`: a list item is empty
            0 0 31 2 *|never matches: day-of-month `31` does not occur in month `2`
            0 0 30,31 2 *|never matches: day-of-month `30,31` does not occur in month `2`
            0 0 31 4,6,9,11 *|never matches: day-of-month `31` does not occur in month `4,6,9,11`
        ";
        for row in rows(table) {
            let [written, message] = row[..] else {
                panic!("bad row {row:?}");
            };
            assert_eq!(
                CronSpec::parse(written),
                Err(message.to_owned()),
                "{written:?}"
            );
        }
    }

    #[test]
    fn zones_are_iana_names() {
        assert_eq!(zone("Europe/Berlin").name(), "Europe/Berlin");
        assert_eq!(Zone::utc().name(), "UTC");
        assert_eq!(Zone::parse("UTC"), Ok(Zone::utc()));
        for unknown in ["Mars/Olympus_Mons", "europe/berlin", "", "+02:00"] {
            let message = format!(
                "unknown time zone `{unknown}`: expected an IANA name such as `Europe/Berlin` or `UTC`"
            );
            assert_eq!(Zone::parse(unknown), Err(message));
        }
    }

    #[test]
    fn steps_lists_and_ranges_pick_their_minutes() {
        assert_ticks(
            "
            */15 * * * *|UTC|2026-01-01T00:07:30.250Z|2026-01-01T00:15:00Z 2026-01-01T00:30:00Z 2026-01-01T00:45:00Z 2026-01-01T01:00:00Z
            0,30 9,17 * * *|UTC|2026-01-01T09:00:00Z|2026-01-01T09:30:00Z 2026-01-01T17:00:00Z 2026-01-01T17:30:00Z 2026-01-02T09:00:00Z
            10-40/15 * * * *|UTC|2026-01-01T00:00:00Z|2026-01-01T00:10:00Z 2026-01-01T00:25:00Z 2026-01-01T00:40:00Z 2026-01-01T01:10:00Z
            0 22-23,2-6/2 * * *|UTC|2026-01-01T12:00:00Z|2026-01-01T22:00:00Z 2026-01-01T23:00:00Z 2026-01-02T02:00:00Z 2026-01-02T04:00:00Z 2026-01-02T06:00:00Z 2026-01-02T22:00:00Z
            ",
        );
    }

    #[test]
    fn a_day_matching_either_restricted_day_field_fires() {
        // April 2026: the 13th is a Monday, Fridays are the 3rd, 10th, 17th
        // and 24th. A step restricts too: only a bare `*` leaves a day field
        // out. Sunday is 0 and 7.
        assert_ticks(
            "
            0 0 13 * 5|UTC|2026-04-01T00:00:00Z|2026-04-03T00:00:00Z 2026-04-10T00:00:00Z 2026-04-13T00:00:00Z 2026-04-17T00:00:00Z 2026-04-24T00:00:00Z 2026-05-01T00:00:00Z
            0 0 13 * *|UTC|2026-04-01T00:00:00Z|2026-04-13T00:00:00Z 2026-05-13T00:00:00Z
            0 0 * * 5|UTC|2026-04-01T00:00:00Z|2026-04-03T00:00:00Z 2026-04-10T00:00:00Z 2026-04-17T00:00:00Z
            0 0 */10 * 5|UTC|2026-04-01T00:00:00Z|2026-04-03T00:00:00Z 2026-04-10T00:00:00Z 2026-04-11T00:00:00Z 2026-04-17T00:00:00Z 2026-04-21T00:00:00Z 2026-04-24T00:00:00Z 2026-05-01T00:00:00Z
            0 0 * * 7|UTC|2026-04-01T00:00:00Z|2026-04-05T00:00:00Z 2026-04-12T00:00:00Z
            0 0 * * 0|UTC|2026-04-01T00:00:00Z|2026-04-05T00:00:00Z 2026-04-12T00:00:00Z
            0 0 * * 6-7|UTC|2026-04-01T00:00:00Z|2026-04-04T00:00:00Z 2026-04-05T00:00:00Z 2026-04-11T00:00:00Z
            ",
        );
    }

    #[test]
    fn weekdays_at_nine_in_berlin_follow_berlin_clocks() {
        // Berlin moves to summer time on Sunday 29 March 2026: 09:00 is
        // 08:00 UTC before, 07:00 UTC after.
        assert_ticks(
            "
            0 9 * * 1-5|Europe/Berlin|2026-03-26T07:00:00Z|2026-03-26T08:00:00Z 2026-03-27T08:00:00Z 2026-03-30T07:00:00Z 2026-03-31T07:00:00Z
            0 9 * * 1-5|Europe/Berlin|2026-10-23T12:00:00Z|2026-10-26T09:00:00+01:00
            ",
        );
    }

    #[test]
    fn ticks_cross_month_and_year_ends_and_find_leap_days() {
        // 2100 is not a leap year; New Year in Tokyo is 15:00 UTC the day before.
        assert_ticks(
            "
            0 0 1 * *|UTC|2025-12-15T00:00:00Z|2026-01-01T00:00:00Z 2026-02-01T00:00:00Z
            59 23 31 12 *|UTC|2025-12-31T23:59:00Z|2026-12-31T23:59:00Z
            0 12 31 * *|UTC|2026-04-01T00:00:00Z|2026-05-31T12:00:00Z 2026-07-31T12:00:00Z 2026-08-31T12:00:00Z
            0 0 29 2 *|UTC|2025-03-01T00:00:00Z|2028-02-29T00:00:00Z 2032-02-29T00:00:00Z
            0 0 29 2 *|UTC|2096-03-01T00:00:00Z|2104-02-29T00:00:00Z
            0 0 28-29 2 *|UTC|2027-01-01T00:00:00Z|2027-02-28T00:00:00Z 2028-02-28T00:00:00Z 2028-02-29T00:00:00Z
            0 0 1 1 *|Asia/Tokyo|2026-06-01T00:00:00Z|2026-12-31T15:00:00Z
            ",
        );
    }

    // America/New_York in 2026: clocks spring forward from 02:00 EST to
    // 03:00 EDT on 8 March (07:00 UTC) and fall back from 02:00 EDT to
    // 01:00 EST on 1 November (06:00 UTC).

    #[test]
    fn a_local_time_in_the_spring_forward_gap_fires_once_when_the_gap_ends() {
        // An hourly pattern's run at 03:00 stands for 02:00 and 03:00 both.
        assert_ticks(
            "
            30 2 * * *|America/New_York|2026-03-07T12:00:00Z|2026-03-08T03:00:00-04:00 2026-03-09T02:30:00-04:00
            30 2 * * *|America/New_York|2026-03-08T06:59:59.999Z|2026-03-08T07:00:00Z 2026-03-09T06:30:00Z
            0 * * * *|America/New_York|2026-03-08T05:30:00Z|2026-03-08T01:00:00-05:00 2026-03-08T03:00:00-04:00 2026-03-08T04:00:00-04:00
            30 * * * *|America/New_York|2026-03-08T05:45:00Z|2026-03-08T01:30:00-05:00 2026-03-08T03:00:00-04:00 2026-03-08T03:30:00-04:00
            ",
        );
    }

    #[test]
    fn a_local_time_in_the_fall_back_overlap_fires_once_at_its_first_instant() {
        // From the repeated hour's second pass (06:00-07:00 UTC), its local
        // times have fired already.
        assert_ticks(
            "
            30 1 * * *|America/New_York|2026-10-31T12:00:00Z|2026-11-01T01:30:00-04:00 2026-11-02T01:30:00-05:00
            30 1 * * *|America/New_York|2026-11-01T06:00:00Z|2026-11-02T06:30:00Z
            30 1 * * *|America/New_York|2026-11-01T06:30:00Z|2026-11-02T06:30:00Z
            0 * * * *|America/New_York|2026-11-01T03:30:00Z|2026-11-01T00:00:00-04:00 2026-11-01T01:00:00-04:00 2026-11-01T02:00:00-05:00 2026-11-01T03:00:00-05:00
            0 * * * *|America/New_York|2026-11-01T06:10:00Z|2026-11-01T07:00:00Z
            */30 * * * *|America/New_York|2026-11-01T05:00:00Z|2026-11-01T01:30:00-04:00 2026-11-01T02:00:00-05:00
            ",
        );
    }

    #[test]
    fn a_year_of_ticks_in_new_york_is_one_run_per_local_tick() {
        let new_york = zone("America/New_York");
        // From local midnight on 1 January 2026 to the next.
        let (start, end) = (ms("2026-01-01T05:00:00Z"), ms("2027-01-01T05:00:00Z"));
        for (pattern, runs) in [
            // 365 × 24 local hours, less the 02:00 that is one run with 03:00.
            ("0 * * * *", 365 * 24 - 1),
            ("30 1 * * *", 365),
            ("30 2 * * *", 365),
            // The skipped hour's 02:00 and 02:30 are one run with 03:00.
            ("*/30 * * * *", 365 * 48 - 2),
        ] {
            let cron = cron(pattern);
            let mut instants = vec![];
            let mut from = start;
            while let Some(tick) = next_tick(&cron, &new_york, from).filter(|&tick| tick <= end) {
                instants.push(tick);
                from = tick;
            }
            assert_eq!(instants.len(), runs, "{pattern}");
            let locals: Vec<_> = instants
                .iter()
                .map(|&tick| local_time(&new_york, tick).unwrap())
                .collect();
            assert!(
                locals.windows(2).all(|pair| pair[0] < pair[1]),
                "{pattern}: each local time once"
            );
            assert!(
                instants.iter().all(|tick| tick % 60_000 == 0),
                "{pattern}: whole minutes"
            );
            assert!(locals.iter().all(|local| local.second() == 0), "{pattern}");
        }
    }

    #[test]
    fn the_latest_tick_of_a_span_is_the_catch_up_run() {
        // Rows `pattern | zone | after | until | latest tick or -`: spans of
        // minutes and of years; in the repeated hour's second pass, the
        // last run was in the first.
        let table = "
            */15 * * * *|UTC|2026-01-01T10:00:00Z|2026-01-01T10:40:00Z|2026-01-01T10:30:00Z
            */15 * * * *|UTC|2026-01-01T10:00:00Z|2026-01-01T10:14:59.999Z|-
            */15 * * * *|UTC|2026-01-01T10:00:00Z|2026-01-01T10:15:00Z|2026-01-01T10:15:00Z
            */15 * * * *|UTC|2026-01-01T10:15:00Z|2026-01-01T10:29:00Z|-
            */15 * * * *|UTC|2026-01-01T10:15:00Z|2026-01-01T10:15:00Z|-
            */15 * * * *|UTC|2026-01-01T10:30:00Z|2026-01-01T10:00:00Z|-
            * * * * *|UTC|2020-01-01T00:00:00Z|2026-05-05T12:34:56.789Z|2026-05-05T12:34:00Z
            * * * * *|Asia/Kolkata|1990-01-01T00:00:00Z|2026-05-05T12:34:56Z|2026-05-05T12:34:00Z
            * * * * *|UTC|0001-06-01T00:00:00Z|4000-01-01T00:00:00Z|4000-01-01T00:00:00Z
            0 0 29 2 *|UTC|2021-01-01T00:00:00Z|2027-12-31T00:00:00Z|2024-02-29T00:00:00Z
            0 0 29 2 *|UTC|2024-02-29T00:00:00Z|2027-12-31T00:00:00Z|-
            0 9 * * 1-5|Europe/Berlin|2026-01-01T00:00:00Z|2026-03-29T12:00:00Z|2026-03-27T09:00:00+01:00
            */30 * * * *|America/New_York|2026-11-01T04:00:00Z|2026-11-01T06:10:00Z|2026-11-01T01:30:00-04:00
            */30 * * * *|America/New_York|2026-11-01T05:30:00Z|2026-11-01T06:59:00Z|-
            30 2 * * *|America/New_York|2026-03-07T12:00:00Z|2026-03-08T07:00:00Z|2026-03-08T03:00:00-04:00
            30 2 * * *|America/New_York|2026-03-07T12:00:00Z|2026-03-08T06:59:00Z|-
        ";
        for row in rows(table) {
            let [pattern, zone_name, after, until, expected] = row[..] else {
                panic!("bad row {row:?}");
            };
            let expected = Some(expected).filter(|&time| time != "-").map(ms);
            let found = latest_tick(&cron(pattern), &zone(zone_name), ms(after), ms(until));
            assert_eq!(found, expected, "{row:?}");
        }
    }

    #[test]
    fn the_latest_tick_is_the_last_of_the_ticks_stepped_through() {
        let new_york = zone("America/New_York");
        let patterns = [
            "*/30 * * * *",
            "0 * * * *",
            "30 1 * * *",
            "30 2 * * *",
            "*/7 1-3 * * *",
        ];
        for cron in patterns.map(cron) {
            for day_start in ["2026-03-08T04:00:00Z", "2026-11-01T03:00:00Z"] {
                // Six hours of spans across the change, starting off the minute.
                let mut after = ms(day_start) + 13_579;
                while after < ms(day_start) + 6 * 3_600_000 {
                    for span_minutes in [1, 17, 45, 120] {
                        let until = after + span_minutes * 60_000;
                        let mut stepped = None;
                        let mut from = after;
                        while let Some(tick) =
                            next_tick(&cron, &new_york, from).filter(|&tick| tick <= until)
                        {
                            stepped = Some(tick);
                            from = tick;
                        }
                        let latest = latest_tick(&cron, &new_york, after, until);
                        assert_eq!(latest, stepped, "{cron:?} ({after}, {until}]");
                    }
                    after += 7 * 60_000;
                }
            }
        }
    }

    #[test]
    fn there_is_no_tick_past_the_search_bound() {
        let utc = Zone::utc();
        // 4996 is the last leap year before the bound (5000 is not one).
        let after_last_leap_day = ms("4996-03-01T00:00:00Z");
        assert_eq!(
            next_tick(&cron("0 0 29 2 *"), &utc, after_last_leap_day),
            None
        );
        let (before_bound, past_bound) = (ms("4999-06-01T00:00:00Z"), ms("5000-06-01T00:00:00Z"));
        let next_hour = ms("4999-06-01T01:00:00Z");
        assert_eq!(
            next_tick(&cron("0 * * * *"), &utc, before_bound),
            Some(next_hour)
        );
        assert_eq!(next_tick(&cron("0 * * * *"), &utc, past_bound), None);
        assert_eq!(next_tick(&cron("* * * * *"), &utc, i64::MAX), None);
    }

    #[test]
    fn a_tick_names_one_task() {
        let schedule = Uuid::parse_str("0190f3a2-7b1c-7d4e-8a5b-3c2d1e0f9a8b").unwrap();
        let other_schedule = Uuid::parse_str("0190f3a2-7b1c-7d4e-8a5b-3c2d1e0f9a8c").unwrap();
        let tick = ms("2026-04-01T08:00:00Z");
        // SHA-1 of the namespace and the name, as RFC 9562 §5.5 builds it.
        let pinned = "fe69a098-cf9c-529e-a35f-7b3e999f67e4";
        assert_eq!(tick_task_id(schedule, tick).to_string(), pinned);
        let ids = [
            tick_task_id(schedule, tick),
            tick_task_id(schedule, tick + 60_000),
            tick_task_id(schedule, tick - 1),
            tick_task_id(other_schedule, tick),
        ];
        for (index, id) in ids.iter().enumerate() {
            assert!(ids[index + 1..].iter().all(|other| other != id), "{ids:?}");
        }
    }
}
