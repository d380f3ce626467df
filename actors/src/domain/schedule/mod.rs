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
//! There is one grammar, croner's: it parses the pattern, and these
//! restrictions are checked on what it read (the day fields' extensions,
//! which days exist). The text is checked only for what croner's reading
//! cannot show: names and `?`, which it rewrites before it parses, and an
//! empty list item, which it skips. Its refusals are given to the field
//! they are about, with croner's words.
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
use croner::errors::CronError;
use croner::parser::{CronParser, Seconds, Year};
use croner::{Cron, CronComponent, CronPattern};
use uuid::Uuid;

use super::{ScheduleId, TaskId};

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
    /// step `*/n` or `a-b/n`, or a comma-separated list of those, as croner
    /// reads them (minute 0-59, hour 0-23, day 1-31, month 1-12,
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
        for (field, written) in FIELDS.iter().zip(fields) {
            field.check_text(written)?;
        }
        let text = fields.join(" ");
        let cron = parser()
            .parse(&text)
            .map_err(|error| refusal(fields, &error))?;
        check_parsed(&cron.pattern, fields)?;
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

    /// The wall-clock time in the zone at `at_ms`, to the minute, with the
    /// zone's abbreviation for that instant (`2026-12-08 03:00 CET`): how
    /// the schedule's own people read its ticks.
    pub fn wall_clock(&self, at_ms: i64) -> Option<String> {
        let local = DateTime::from_timestamp_millis(at_ms)?.with_timezone(&self.0);
        Some(local.format("%Y-%m-%d %H:%M %Z").to_string())
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
pub fn tick_task_id(schedule_id: ScheduleId, tick_ms: i64) -> TaskId {
    let mut name = [0u8; 24];
    name[..16].copy_from_slice(schedule_id.0.as_bytes());
    name[16..].copy_from_slice(&tick_ms.to_be_bytes());
    TaskId(Uuid::new_v5(&TICK_NAMESPACE, &name))
}

/// The namespace of tick task ids: fixed forever, since changing it would
/// give a tick fired again after an upgrade a second task.
pub const TICK_NAMESPACE: Uuid = Uuid::from_u128(0x9546c207_2e8b_4b70_ad28_746a43faf5d9);

/// The longest run of local times that do not exist. The longest in the
/// IANA database is a whole day (Samoa skipped 30 December 2011).
const LONGEST_GAP_MINUTES: u32 = 48 * 60;

/// croner's parser for the five standard fields: no seconds and no year,
/// a day matching either restricted day field (POSIX), Sunday 0 and 7, and
/// no `5/15` shorthand for `5-59/15`.
fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .dom_and_dow(false)
        .alternative_weekdays(false)
        .build()
}

/// Why a name, `?`, `L`, `W`, `#` or `+` is refused wherever it appears.
const UNSUPPORTED: &str =
    "names, `?`, `L`, `W`, `#` and `+` are not supported: write numbers, `*`, ranges, steps and lists";

/// One of the five fields: its name in messages, its range, and where
/// croner's reading of it is.
struct Field {
    name: &'static str,
    min: u16,
    max: u16,
    parsed: fn(&CronPattern) -> &CronComponent,
}

const FIELDS: [Field; 5] = [
    Field::new("minute", 0, 59, |p| &p.minutes),
    Field::new("hour", 0, 23, |p| &p.hours),
    Field::new("day-of-month", 1, 31, |p| &p.days),
    Field::new("month", 1, 12, |p| &p.months),
    Field::new("day-of-week", 0, 7, |p| &p.days_of_week),
];

impl Field {
    const fn new(
        name: &'static str,
        min: u16,
        max: u16,
        parsed: fn(&CronPattern) -> &CronComponent,
    ) -> Self {
        Self {
            name,
            min,
            max,
            parsed,
        }
    }

    fn refuse(&self, written: &str, reason: impl std::fmt::Display) -> String {
        format!("{} field `{written}`: {reason}", self.name)
    }

    /// What croner's reading cannot show, so the text is checked: croner
    /// turns names (`MON`, `JAN`) into numbers and `?` into `*` before it
    /// parses, and skips an empty list item.
    fn check_text(&self, written: &str) -> Result<(), String> {
        if written.contains(|c: char| c.is_ascii_alphabetic() || c == '?') {
            return Err(self.refuse(written, UNSUPPORTED));
        }
        if written.split(',').any(str::is_empty) {
            return Err(self.refuse(written, "a list item is empty"));
        }
        Ok(())
    }
}

/// croner's refusal of a pattern, said of the field it is about: croner
/// does not name it, so each field is parsed alone, the others `*`.
fn refusal(fields: [&str; 5], error: &CronError) -> String {
    for (i, field) in FIELDS.iter().enumerate() {
        let mut alone = ["*"; 5];
        alone[i] = fields[i];
        if let Err(error) = parser().parse(&alone.join(" ")) {
            let reason = format!(
                "{} (the field takes {}-{})",
                croner_reason(&error),
                field.min,
                field.max
            );
            return field.refuse(fields[i], reason);
        }
    }
    format!("cannot be read: {}", croner_reason(error))
}

/// croner's own words for a refusal, without its category and full stop.
fn croner_reason(error: &CronError) -> String {
    let words = match error {
        CronError::ComponentError(words)
        | CronError::InvalidPattern(words)
        | CronError::IllegalCharacters(words) => words.clone(),
        other => other.to_string(),
    };
    words.trim_end_matches('.').to_owned()
}

/// The contract's restrictions, on croner's reading: none of croner's
/// extensions (`#` in the day-of-week, a `+` before it asking both day
/// fields to match), and a day that exists. A pattern whose days of the
/// month fall in none of its months (`31` in `2,4`) can never fire; only
/// a bare `*` day-of-week leaves the day-of-month alone to choose days,
/// since a restricted day-of-week matches some day of every month.
/// February counts its 29th, which leap years have.
fn check_parsed(pattern: &CronPattern, fields: [&str; 5]) -> Result<(), String> {
    const DAYS_IN_MONTH: [u16; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    for (field, written) in FIELDS.iter().zip(fields) {
        if (field.parsed)(pattern).has_modifiers() {
            return Err(field.refuse(written, UNSUPPORTED));
        }
    }
    let [.., day_of_month, month, day_of_week] = fields;
    if pattern.matches_dom_and_dow() {
        return Err(FIELDS[4].refuse(day_of_week, UNSUPPORTED));
    }
    if !pattern.is_dow_wildcard() {
        return Ok(());
    }
    let days = pattern.days.values();
    let some_day_exists = pattern.months.values().into_iter().any(|month| {
        days.iter()
            .any(|&day| day <= DAYS_IN_MONTH[usize::from(month) - 1])
    });
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
/// A schedule as its org's actor holds it: when it ticks, the sealed
/// template of the tasks it creates, and where it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleRecord {
    pub schedule_id: ScheduleId,
    pub name: String,
    pub cron: CronSpec,
    pub zone: Zone,
    /// The create item (JSON), sealed like task content, bound to the
    /// schedule.
    pub task: Vec<u8>,
    pub active: bool,
    /// The next tick while it is active: the timer's deadline.
    pub next_run_at: Option<i64>,
    /// The latest tick fired, committed with that tick's task.
    pub last_run_at: Option<i64>,
    pub last_error: Option<String>,
    /// The member whose rights its tasks are created with.
    pub created_by: String,
    /// The name of the key that created it, which its ticks' events name;
    /// `None` for a schedule made before it was kept (the email stands in).
    pub created_by_key: Option<String>,
    pub created_at: i64,
}

impl ScheduleRecord {
    /// The tick to fire at `now`, if one is due: the latest tick from the
    /// one `next_run_at` names up to `now`, so ticks missed while nobody
    /// served the org make one task, for the latest of them.
    pub fn due_tick(&self, now: i64) -> Option<i64> {
        let next = self.next_run_at.filter(|_| self.active)?;
        if next > now {
            return None;
        }
        latest_tick(&self.cron, &self.zone, next - 1, now)
    }

    /// Where it stands once the tick at `tick` is fired at `now`.
    pub fn fired(&mut self, tick: i64, now: i64, error: Option<String>) {
        self.last_run_at = Some(tick);
        self.last_error = error;
        self.next_run_at = next_tick(&self.cron, &self.zone, now.max(tick));
    }

    /// Its next tick counted from `now` (when created, resumed, or given a
    /// new pattern or zone); none while paused.
    pub fn rearm(&mut self, now: i64) {
        self.next_run_at = self
            .active
            .then(|| next_tick(&self.cron, &self.zone, now))
            .flatten();
    }
}

#[cfg(test)]
mod tests;
