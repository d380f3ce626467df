//! What the bench reads of an event stream: each event's id and the
//! `timestamp` of its data, through the reader the tests use too
//! (`taskq_process::sse`). The data's JSON is not parsed as a whole (a
//! stream's reader must keep up with every event of its org).

use taskq_process::sse::{Item, Parser};

/// One event of the stream, as far as the bench reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SseEvent {
    /// The last `id:` seen (the SSE last-event-id, kept across events).
    pub(super) id: Option<i64>,
    /// The data's `timestamp`, in milliseconds since the epoch.
    pub(super) timestamp_ms: Option<i64>,
}

#[derive(Default)]
pub(super) struct SseParser(Parser);

impl SseParser {
    /// Reads `chunk`, calling `on_event` for every event it completes.
    pub(super) fn feed(&mut self, chunk: &[u8], mut on_event: impl FnMut(SseEvent)) {
        self.0.feed(chunk, |item| {
            if let Item::Event(e) = item {
                on_event(SseEvent {
                    id: e.id.and_then(|id| id.parse().ok()),
                    timestamp_ms: timestamp_in(e.data.as_bytes()),
                });
            }
        });
    }
}

/// The `"timestamp":"…"` of an event's JSON data, as the server writes it.
fn timestamp_in(data: &[u8]) -> Option<i64> {
    const KEY: &[u8] = br#""timestamp":""#;
    let at = data.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    parse_timestamp_ms(data.get(at..at + 24)?)
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` (the server's one format) in milliseconds
/// since the epoch.
pub(super) fn parse_timestamp_ms(text: &[u8]) -> Option<i64> {
    if text.len() != 24 || text[23] != b'Z' {
        return None;
    }
    for (at, sep) in [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b':'),
        (16, b':'),
        (19, b'.'),
    ] {
        if text[at] != sep {
            return None;
        }
    }
    let number = |from: usize, to: usize| -> Option<i64> {
        text[from..to].iter().try_fold(0i64, |n, &b| {
            b.is_ascii_digit().then(|| n * 10 + i64::from(b - b'0'))
        })
    };
    let (year, month, day) = (number(0, 4)?, number(5, 7)?, number(8, 10)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let seconds = number(11, 13)? * 3600 + number(14, 16)? * 60 + number(17, 19)?;
    let days = days_from_civil(year, month, day);
    Some((days * 86_400 + seconds) * 1000 + number(20, 23)?)
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVENT: &str = "id: 41\nevent: task.claimed\ndata: {\"type\":\"task.claimed\",\
        \"timestamp\":\"2026-12-02T03:55:56.123Z\",\"data\":{\"org_id\":\"o\"}}\n\n";

    fn events(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        let mut seen = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, |e| seen.push(e));
        }
        seen
    }

    #[test]
    fn an_event_has_its_id_and_timestamp() {
        let seen = events(&[EVENT.as_bytes()]);
        assert_eq!(
            seen,
            [SseEvent {
                id: Some(41),
                timestamp_ms: Some(1_796_183_756_123)
            }]
        );
    }

    #[test]
    fn an_event_cut_anywhere_reads_the_same() {
        let whole = events(&[EVENT.as_bytes()]);
        for at in 1..EVENT.len() {
            let (a, b) = EVENT.as_bytes().split_at(at);
            assert_eq!(events(&[a, b]), whole, "cut at {at}");
        }
    }

    #[test]
    fn comments_and_lines_without_data_are_no_events() {
        let seen = events(&[b":keep-alive\n\nid: 3\n\n: x\r\n\r\n"]);
        assert!(seen.is_empty(), "{seen:?}");
        let after = events(&[b"id: 3\n\ndata: {}\r\n\r\n"]);
        assert_eq!(
            after,
            [SseEvent {
                id: Some(3),
                timestamp_ms: None
            }]
        );
    }

    #[test]
    fn timestamps_are_read_as_the_calendar_says() {
        let ms = |t: &str| parse_timestamp_ms(t.as_bytes());
        assert_eq!(ms("1970-01-01T00:00:00.000Z"), Some(0));
        assert_eq!(ms("2000-02-29T23:59:59.999Z"), Some(951_868_799_999));
        assert_eq!(ms("2100-03-01T00:00:00.000Z"), Some(4_107_542_400_000));
        assert_eq!(ms("2026-12-02T03:55:56.123+01"), None);
        assert_eq!(ms("2026-13-02T03:55:56.123Z"), None);
        assert_eq!(ms("2026-12-02 03:55:56.123Z"), None);
    }
}
