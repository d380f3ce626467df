//! The schedules' time rules, by table: the grammar, ticks across month,
//! year and DST changes, catch-up, and tick ids.

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
        // A step past the range's end keeps only its start, as croner and
        // POSIX crons read it.
        ("*/60 * * * *", "*/60 * * * *"),
        ("0-30/100 * * * *", "0-30/100 * * * *"),
        ("  0\t9  * * 1-5 ", "0 9 * * 1-5"),
    ] {
        let parsed = CronSpec::parse(written).map(|spec| spec.text().to_owned());
        assert_eq!(parsed, Ok(text.to_owned()), "{written:?}");
    }
}

#[test]
fn anything_else_is_refused_saying_what_is_wrong() {
    // Field counts, nicknames, names, `?`, `L`, `W` and empty list items
    // are seen in the text; `#` and `+` in croner's reading; the rest are
    // croner's refusals, in its words, given to their field.
    let table = "
        |expected five fields (minute hour day-of-month month day-of-week), found 0
        * * * *|expected five fields (minute hour day-of-month month day-of-week), found 4
        0 * * * * *|expected five fields (minute hour day-of-month month day-of-week), found 6
        0 0 1 1 * 2030|expected five fields (minute hour day-of-month month day-of-week), found 6
        @daily|nicknames such as `@daily` are not supported: write the five fields (minute hour day-of-month month day-of-week), e.g. `0 0 * * *` for daily
        60 * * * *|minute field `60`: Number out of bounds (the field takes 0-59)
        99999999999 * * * *|minute field `99999999999`: Invalid number (the field takes 0-59)
        * 24 * * *|hour field `24`: Number out of bounds (the field takes 0-23)
        * * 0 * *|day-of-month field `0`: Number out of bounds (the field takes 1-31)
        * * 32 * *|day-of-month field `32`: Number out of bounds (the field takes 1-31)
        * * * 13 *|month field `13`: Number out of bounds (the field takes 1-12)
        * * * * 8|day-of-week field `8`: Number out of bounds (the field takes 0-7)
        * * * JAN *|month field `JAN`: names, `?`, `L`, `W`, `#` and `+` are not supported: write numbers, `*`, ranges, steps and lists
        * * * * MON|day-of-week field `MON`: names, `?`, `L`, `W`, `#` and `+` are not supported: write numbers, `*`, ranges, steps and lists
        * * * * JUL|day-of-week field `JUL`: names, `?`, `L`, `W`, `#` and `+` are not supported: write numbers, `*`, ranges, steps and lists
        * * ? * *|day-of-month field `?`: names, `?`, `L`, `W`, `#` and `+` are not supported: write numbers, `*`, ranges, steps and lists
        * * L * *|day-of-month field `L`: names, `?`, `L`, `W`, `#` and `+` are not supported: write numbers, `*`, ranges, steps and lists
        * * LW * *|day-of-month field `LW`: names, `?`, `L`, `W`, `#` and `+` are not supported: write numbers, `*`, ranges, steps and lists
        * * 15W * *|day-of-month field `15W`: names, `?`, `L`, `W`, `#` and `+` are not supported: write numbers, `*`, ranges, steps and lists
        * * * * 5#3|day-of-week field `5#3`: names, `?`, `L`, `W`, `#` and `+` are not supported: write numbers, `*`, ranges, steps and lists
        * * * * 1-5#2|day-of-week field `1-5#2`: names, `?`, `L`, `W`, `#` and `+` are not supported: write numbers, `*`, ranges, steps and lists
        * * * * 5L|day-of-week field `5L`: names, `?`, `L`, `W`, `#` and `+` are not supported: write numbers, `*`, ranges, steps and lists
        0 0 1 * +1|day-of-week field `+1`: names, `?`, `L`, `W`, `#` and `+` are not supported: write numbers, `*`, ranges, steps and lists
        * * * * 1#6|day-of-week field `1#6`: Nth specifier out of bounds (the field takes 0-7)
        5#3 * * * *|minute field `5#3`: CronPattern contains illegal character '#' in part '5#3' (the field takes 0-59)
        1.5 * * * *|minute field `1.5`: CronPattern contains illegal character '.' in part '1.5' (the field takes 0-59)
        */+5 * * * *|minute field `*/+5`: CronPattern contains illegal character '+' in part '*/+5' (the field takes 0-59)
        -5 * * * *|minute field `-5`: Invalid start of range (the field takes 0-59)
        1- * * * *|minute field `1-`: Invalid end of range (the field takes 0-59)
        1-2-3 * * * *|minute field `1-2-3`: Invalid range syntax (the field takes 0-59)
        5-1 * * * *|minute field `5-1`: Range out of bounds (the field takes 0-59)
        * * * * 7-0|day-of-week field `7-0`: Range out of bounds (the field takes 0-7)
        */0 * * * *|minute field `*/0`: Step cannot be zero (the field takes 0-59)
        */2/3 * * * *|minute field `*/2/3`: Invalid stepped range syntax (the field takes 0-59)
        * */ * * *|hour field `*/`: Invalid step (the field takes 0-23)
        5/15 * * * *|minute field `5/15`: Invalid step syntax: single number steps like \"5/15\" are not allowed. Use \"*/15\" for wildcard steps or \"X-Y/15\" for range steps (the field takes 0-59)
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
fn a_tick_reads_on_its_zones_wall_clock_winter_and_summer() {
    let berlin = zone("Europe/Berlin");
    let winter = ms("2026-12-08T02:00:00Z");
    assert_eq!(
        berlin.wall_clock(winter).as_deref(),
        Some("2026-12-08 03:00 CET")
    );
    let summer = ms("2026-07-08T02:00:00Z");
    assert_eq!(
        berlin.wall_clock(summer).as_deref(),
        Some("2026-07-08 04:00 CEST")
    );
    assert_eq!(
        Zone::utc().wall_clock(winter).as_deref(),
        Some("2026-12-08 02:00 UTC")
    );
    let new_york = zone("America/New_York");
    assert_eq!(
        new_york.wall_clock(winter).as_deref(),
        Some("2026-12-07 21:00 EST")
    );
}

#[test]
fn steps_lists_and_ranges_pick_their_minutes() {
    assert_ticks(
        "
        */15 * * * *|UTC|2026-01-01T00:07:30.250Z|2026-01-01T00:15:00Z 2026-01-01T00:30:00Z 2026-01-01T00:45:00Z 2026-01-01T01:00:00Z
        0,30 9,17 * * *|UTC|2026-01-01T09:00:00Z|2026-01-01T09:30:00Z 2026-01-01T17:00:00Z 2026-01-01T17:30:00Z 2026-01-02T09:00:00Z
        10-40/15 * * * *|UTC|2026-01-01T00:00:00Z|2026-01-01T00:10:00Z 2026-01-01T00:25:00Z 2026-01-01T00:40:00Z 2026-01-01T01:10:00Z
        */60 * * * *|UTC|2026-01-01T00:07:00Z|2026-01-01T01:00:00Z 2026-01-01T02:00:00Z
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
    let schedule: ScheduleId = "0190f3a2-7b1c-7d4e-8a5b-3c2d1e0f9a8b".parse().unwrap();
    let other_schedule: ScheduleId = "0190f3a2-7b1c-7d4e-8a5b-3c2d1e0f9a8c".parse().unwrap();
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

#[test]
fn a_record_fires_its_latest_due_tick_once_and_rearms() {
    let minute = 60_000;
    let mut s = ScheduleRecord {
        schedule_id: ScheduleId(Uuid::nil()),
        name: "n".into(),
        cron: cron("* * * * *"),
        zone: Zone::utc(),
        task: Vec::new(),
        active: true,
        next_run_at: None,
        last_run_at: None,
        last_error: None,
        created_by: "a@b.c".into(),
        created_by_key: Some("owner".into()),
        created_at: 0,
    };
    s.rearm(30_000);
    assert_eq!(s.next_run_at, Some(minute));
    assert_eq!(s.due_tick(minute - 1), None);
    assert_eq!(s.due_tick(minute), Some(minute));
    // Down for five ticks: one task, for the latest.
    assert_eq!(s.due_tick(5 * minute + 10), Some(5 * minute));
    s.fired(5 * minute, 5 * minute + 10, None);
    assert_eq!(
        (s.last_run_at, s.next_run_at),
        (Some(5 * minute), Some(6 * minute))
    );
    assert_eq!(s.due_tick(5 * minute + 20), None, "a tick fires once");
    s.active = false;
    assert_eq!(s.due_tick(10 * minute), None);
    s.rearm(10 * minute);
    assert_eq!(s.next_run_at, None, "a paused schedule has no next tick");
}
