//! `--streams N` and `--slow-streams K`: what subscribers to the orgs'
//! event streams (`GET /events`, CONTRACT §10) cost the claim path, and
//! how soon a commit reaches them.
//!
//! Stream `i` follows org `i % orgs`, as agents are spread, and the slow
//! streams likewise. A key holds at most ten streams, so each org's owner
//! issues keys for its streams (`POST /keys`), ten streams a key. All are
//! opened after the create phase, so they see only the cycles' events.
//!
//! - A stream reads every event while the cycles run and counts it; for
//!   each, the wall clock when its chunk arrived minus the event's
//!   `timestamp` (taken just before the commit, on the same machine) is the
//!   time from commit to subscriber. Timestamps have millisecond
//!   resolution, so each figure may be up to 1 ms over. A stream that ends
//!   or fails is a disconnect; it opens again with `Last-Event-ID`, as a
//!   client does, and the events replayed count like the others.
//! - A slow stream opens with a small receive buffer and reads nothing
//!   until the cycles end. The server notices that a stream has fallen more
//!   than 10,000 events behind only when it gets to send again, so the
//!   slow stream then reads what the buffers held: a stream that ends was
//!   cut off, one that goes quiet for [`QUIET`] was not (it was never that
//!   far behind). The events it missed are those of the org's read stream
//!   that read the most (all open before the cycles), less those it read.
//!
//! For `http://` every stream has a connection of its own made with
//! hyper's connection API (the small receive buffer is set on it); for
//! `https://` streams go through reqwest with the system's buffers.

mod open;
mod sse;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Context as _};
use hyper::header::HeaderValue;
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use super::api::{endpoint, exchange, http_client};
use super::stats::Histogram;
use open::{Body, Opener};
use sse::SseParser;

/// Streams one key may hold open (CONTRACT §10).
const STREAMS_PER_KEY: usize = 10;
/// Keys issued, and streams opened, at a time.
const IN_FLIGHT: usize = 32;
/// A slow stream's receive buffer (the kernel doubles it).
const SLOW_RECEIVE_BUFFER: u32 = 4096;
/// How long a slow stream must stay silent, once read, to count as open.
const QUIET: Duration = Duration::from_secs(3);
/// The longest a slow stream is read after the cycles.
const DRAIN: Duration = Duration::from_secs(60);
/// The pause before a stream that could not open tries again.
const RETRY: Duration = Duration::from_millis(100);
/// Error texts kept.
const ERROR_SAMPLES: usize = 5;

/// The streams, open and read until closed.
pub(super) struct Streams {
    fast: JoinSet<Followed>,
    slow: Vec<(usize, Body)>,
    keys: usize,
    orgs: usize,
    opened: Instant,
    stop: watch::Sender<bool>,
}

#[derive(Debug, Serialize)]
pub(super) struct StreamsSummary {
    /// Streams read while the cycles ran.
    streams: usize,
    /// Keys issued for the streams, fast and slow.
    keys: usize,
    /// Stream `i` follows org `i % orgs`.
    orgs: usize,
    read_secs: f64,
    /// Streams connected when the reading stopped.
    open_at_end: usize,
    events: u64,
    events_per_sec: f64,
    events_per_stream_min: Option<u64>,
    events_per_stream_max: Option<u64>,
    /// Openings that failed (after a disconnect) and reads that failed.
    errors: u64,
    /// Streams that ended or failed while read, each then opened again.
    disconnects: u64,
    error_samples: Vec<String>,
    /// Commit (the event's `timestamp`) to the event's arrival.
    latency_events: u64,
    latency_p50_ms: Option<f64>,
    latency_p99_ms: Option<f64>,
    latency_max_ms: Option<f64>,
    slow: Option<SlowSummary>,
}

#[derive(Debug, Default, Serialize)]
pub(super) struct SlowSummary {
    streams: usize,
    /// Ended by the server when read at last.
    cut_off: u64,
    /// Of those, ended with a transport error rather than the body's end.
    cut_off_with_error: u64,
    /// Quiet for a while with nothing more to read: never too far behind.
    still_open: u64,
    /// Still sending when the reading gave up.
    unfinished: u64,
    /// Events each read at the end (what the buffers held), least and most.
    events_read_min: Option<u64>,
    events_read_max: Option<u64>,
    /// Events of its org a cut-off stream never got, most of them (known
    /// when a stream of the same org was read).
    missed_max: Option<u64>,
}

/// What one read stream did.
#[derive(Default)]
struct Followed {
    org: usize,
    events: u64,
    errors: u64,
    disconnects: u64,
    connected: bool,
    /// For opening again with `Last-Event-ID`.
    last_id: Option<i64>,
    latency: Histogram,
    samples: Vec<String>,
}

impl Followed {
    fn err(&mut self, text: String) {
        self.errors += 1;
        if self.samples.len() < ERROR_SAMPLES {
            self.samples.push(text);
        }
    }
}

#[derive(Deserialize)]
struct KeyCreated {
    api_key: String,
}

impl Streams {
    /// Issues the keys, opens `fast` streams that are read from now on and
    /// `slow` ones that are not.
    pub(super) async fn open(
        base: &str,
        owner_keys: &[String],
        fast: usize,
        slow: usize,
    ) -> anyhow::Result<Self> {
        let orgs = owner_keys.len();
        let opener = Arc::new(Opener::new(base)?);
        let placed = placements(fast, slow, orgs);
        let mut keys = Vec::with_capacity(orgs);
        for (org, owner) in owner_keys.iter().enumerate() {
            keys.push(issue_keys(base, owner, org, keys_wanted(&placed, org)).await?);
        }
        let issued = keys.iter().map(Vec::len).sum();
        eprintln!("[streams] {issued} keys issued; opening {fast} streams and {slow} slow streams");
        let mut bodies = JoinSet::new();
        let permits = Arc::new(Semaphore::new(IN_FLIGHT));
        for (i, place) in placed.into_iter().enumerate() {
            let Placement {
                org,
                key,
                slow: is_slow,
            } = place;
            let key = keys[org][key].clone();
            let (opener, permits) = (opener.clone(), permits.clone());
            bodies.spawn(async move {
                let _permit = permits.acquire().await?;
                let buffer = is_slow.then_some(SLOW_RECEIVE_BUFFER);
                let body = opener.open(&key, None, buffer).await.map_err(|e| {
                    anyhow!("opening an event stream of org {org} (slow: {is_slow}): {e}")
                })?;
                anyhow::Ok((i, org, key, body))
            });
        }
        let (stop, stopped) = watch::channel(false);
        let mut fast_tasks = JoinSet::new();
        let mut slow_bodies = Vec::with_capacity(slow);
        while let Some(joined) = bodies.join_next().await {
            let (i, org, key, body) = joined.context("opening a stream")??;
            if i < fast {
                let (opener, stopped) = (opener.clone(), stopped.clone());
                fast_tasks.spawn(follow(opener, key, org, body, stopped));
            } else {
                slow_bodies.push((org, body));
            }
        }
        eprintln!("[streams] {} streams open", fast + slow);
        Ok(Streams {
            fast: fast_tasks,
            slow: slow_bodies,
            keys: issued,
            orgs,
            opened: Instant::now(),
            stop,
        })
    }

    /// Stops reading the streams, then reads the slow ones; what they did.
    pub(super) async fn close(mut self) -> StreamsSummary {
        let _ = self.stop.send(true);
        let read = self.opened.elapsed();
        let mut followed = Vec::new();
        while let Some(joined) = self.fast.join_next().await {
            match joined {
                Ok(f) => followed.push(f),
                Err(e) => followed.push(Followed {
                    samples: vec![format!("stream task failed: {e}")],
                    errors: 1,
                    ..Followed::default()
                }),
            }
        }
        let mut org_events: BTreeMap<usize, u64> = BTreeMap::new();
        for f in &followed {
            let most = org_events.entry(f.org).or_default();
            *most = (*most).max(f.events);
        }
        let slow = if self.slow.is_empty() {
            None
        } else {
            Some(drain_slow(std::mem::take(&mut self.slow), &org_events).await)
        };
        let mut latency = Histogram::default();
        let mut samples = Vec::new();
        for f in &followed {
            latency.merge(&f.latency);
            let room = ERROR_SAMPLES.saturating_sub(samples.len());
            samples.extend(f.samples.iter().take(room).cloned());
        }
        let events = followed.iter().map(|f| f.events).sum();
        let secs = read.as_secs_f64();
        StreamsSummary {
            streams: followed.len(),
            keys: self.keys,
            orgs: self.orgs,
            read_secs: secs,
            open_at_end: followed.iter().filter(|f| f.connected).count(),
            events,
            events_per_sec: if secs > 0.0 {
                events as f64 / secs
            } else {
                0.0
            },
            events_per_stream_min: followed.iter().map(|f| f.events).min(),
            events_per_stream_max: followed.iter().map(|f| f.events).max(),
            errors: followed.iter().map(|f| f.errors).sum(),
            disconnects: followed.iter().map(|f| f.disconnects).sum(),
            error_samples: samples,
            latency_events: latency.count(),
            latency_p50_ms: latency.percentile_ms(50.0),
            latency_p99_ms: latency.percentile_ms(99.0),
            latency_max_ms: latency.max_ms(),
            slow,
        }
    }
}

/// Where a stream goes: its org, and which of the org's stream keys it
/// opens with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Placement {
    org: usize,
    key: usize,
    slow: bool,
}

/// The fast streams, then the slow ones, each spread over the orgs in
/// turn; an org's streams fill its keys ten at a time.
fn placements(fast: usize, slow: usize, orgs: usize) -> Vec<Placement> {
    let mut opened = vec![0; orgs];
    (0..fast + slow)
        .map(|i| {
            let (org, slow) = if i < fast {
                (i % orgs, false)
            } else {
                ((i - fast) % orgs, true)
            };
            let key = opened[org] / STREAMS_PER_KEY;
            opened[org] += 1;
            Placement { org, key, slow }
        })
        .collect()
}

/// The keys org `org`'s streams need.
fn keys_wanted(placed: &[Placement], org: usize) -> usize {
    placed
        .iter()
        .filter(|p| p.org == org)
        .map(|p| p.key + 1)
        .max()
        .unwrap_or(0)
}

/// `wanted` new keys of org `org`'s owner.
async fn issue_keys(
    base: &str,
    owner: &str,
    org: usize,
    wanted: usize,
) -> anyhow::Result<Vec<HeaderValue>> {
    let client = http_client(IN_FLIGHT)?;
    let url = endpoint(base, "/keys")?;
    let permits = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut issued = JoinSet::new();
    for n in 0..wanted {
        let request = client
            .post(url.clone())
            .header("x-api-key", owner)
            .json(&json!({ "name": format!("stream-{org}-{n}") }));
        let permits = permits.clone();
        issued.spawn(async move {
            let _permit = permits.acquire().await?;
            let (body, _) = exchange(request, StatusCode::CREATED)
                .await
                .map_err(|e| anyhow!("POST /keys: {e}"))?;
            let key: KeyCreated = serde_json::from_slice(&body).context("POST /keys answer")?;
            HeaderValue::from_str(&key.api_key).context("an issued key")
        });
    }
    let mut keys = Vec::with_capacity(wanted);
    while let Some(joined) = issued.join_next().await {
        keys.push(joined??);
    }
    Ok(keys)
}

/// Reads one stream until told to stop, opening it again after each end.
async fn follow(
    opener: Arc<Opener>,
    key: HeaderValue,
    org: usize,
    mut body: Body,
    mut stopped: watch::Receiver<bool>,
) -> Followed {
    let mut f = Followed {
        org,
        connected: true,
        ..Followed::default()
    };
    let mut parser = SseParser::default();
    loop {
        let chunk = tokio::select! {
            chunk = body.chunk() => chunk,
            _ = stopped.changed() => return f,
        };
        match chunk {
            Ok(Some(bytes)) => {
                let now_us = wall_clock_us();
                parser.feed(&bytes, |event| {
                    f.events += 1;
                    f.last_id = event.id.or(f.last_id);
                    if let Some(at) = event.timestamp_ms {
                        let us = now_us.saturating_sub(at.saturating_mul(1000)).max(0);
                        f.latency.record(us as u64);
                    }
                });
                continue;
            }
            Ok(None) => {}
            Err(e) => f.err(format!("reading: {e}")),
        }
        f.disconnects += 1;
        f.connected = false;
        parser = SseParser::default();
        loop {
            match opener.open(&key, f.last_id, None).await {
                Ok(again) => {
                    body = again;
                    f.connected = true;
                    break;
                }
                Err(e) => f.err(format!("opening again: {e}")),
            }
            tokio::select! {
                () = tokio::time::sleep(RETRY) => {}
                _ = stopped.changed() => return f,
            }
        }
    }
}

/// How a slow stream's reading at the end went.
enum SlowEnd {
    CutOff { with_error: bool },
    StillOpen,
    Unfinished,
}

/// Reads each slow stream at last, all at once.
async fn drain_slow(slow: Vec<(usize, Body)>, org_events: &BTreeMap<usize, u64>) -> SlowSummary {
    let n = slow.len();
    eprintln!("[streams] reading the {n} slow streams");
    let mut reads = JoinSet::new();
    for (org, mut body) in slow {
        reads.spawn(async move {
            let mut parser = SseParser::default();
            let mut events = 0u64;
            let started = Instant::now();
            let end = loop {
                if started.elapsed() >= DRAIN {
                    break SlowEnd::Unfinished;
                }
                match tokio::time::timeout(QUIET, body.chunk()).await {
                    Err(_) => break SlowEnd::StillOpen,
                    Ok(Ok(Some(bytes))) => parser.feed(&bytes, |_| events += 1),
                    Ok(Ok(None)) => break SlowEnd::CutOff { with_error: false },
                    Ok(Err(_)) => break SlowEnd::CutOff { with_error: true },
                }
            };
            (org, end, events)
        });
    }
    let mut summary = SlowSummary {
        streams: n,
        ..SlowSummary::default()
    };
    while let Some(joined) = reads.join_next().await {
        let Ok((org, end, events)) = joined else {
            summary.unfinished += 1;
            continue;
        };
        summary.events_read_min = Some(summary.events_read_min.map_or(events, |m| m.min(events)));
        summary.events_read_max = Some(summary.events_read_max.map_or(events, |m| m.max(events)));
        match end {
            SlowEnd::CutOff { with_error } => {
                summary.cut_off += 1;
                summary.cut_off_with_error += u64::from(with_error);
                if let Some(&org_events) = org_events.get(&org) {
                    let missed = org_events.saturating_sub(events);
                    summary.missed_max = Some(summary.missed_max.map_or(missed, |m| m.max(missed)));
                }
            }
            SlowEnd::StillOpen => summary.still_open += 1,
            SlowEnd::Unfinished => summary.unfinished += 1,
        }
    }
    summary
}

/// Microseconds since the epoch, by the wall clock the server's
/// timestamps also read.
fn wall_clock_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

impl StreamsSummary {
    pub(super) fn render(&self) -> String {
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
        let n = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
        let mut out = format!(
            "streams: {} open over {} org(s) on {} keys, read {:.1} s ({} connected at the end): \
             {} events ({:.0}/s; {} to {} a stream), {} disconnects, {} errors\n  \
             commit -> subscriber over {} events: p50 {} ms, p99 {} ms, max {} ms\n",
            self.streams,
            self.orgs,
            self.keys,
            self.read_secs,
            self.open_at_end,
            self.events,
            self.events_per_sec,
            n(self.events_per_stream_min),
            n(self.events_per_stream_max),
            self.disconnects,
            self.errors,
            self.latency_events,
            ms(self.latency_p50_ms),
            ms(self.latency_p99_ms),
            ms(self.latency_max_ms),
        );
        for sample in &self.error_samples {
            out.push_str(&format!("  error: {sample}\n"));
        }
        if let Some(slow) = &self.slow {
            out.push_str(&format!(
                "slow streams: {}, read only after the cycles: {} cut off ({} with an error; \
                 {} events of their org missed at most), {} still open, {} still sending; \
                 {} to {} events read from the buffers\n",
                slow.streams,
                slow.cut_off,
                slow.cut_off_with_error,
                slow.missed_max
                    .map_or_else(|| "?".to_owned(), |m| m.to_string()),
                slow.still_open,
                slow.unfinished,
                n(slow.events_read_min),
                n(slow.events_read_max),
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thousand_streams_of_one_org_take_a_hundred_keys_and_one() {
        let placed = placements(1_000, 2, 1);
        assert_eq!(keys_wanted(&placed, 0), 101);
        let mut per_key = BTreeMap::new();
        for p in &placed {
            *per_key.entry(p.key).or_insert(0) += 1;
        }
        assert!(
            per_key.values().all(|&n| n <= STREAMS_PER_KEY),
            "{per_key:?}"
        );
        assert_eq!(placed.iter().filter(|p| p.slow).count(), 2);
    }

    #[test]
    fn streams_are_spread_over_the_orgs_in_turn() {
        let placed = placements(25, 4, 3);
        let of = |org: usize, slow: bool| {
            placed
                .iter()
                .filter(|p| p.org == org && p.slow == slow)
                .count()
        };
        assert_eq!([of(0, false), of(1, false), of(2, false)], [9, 8, 8]);
        assert_eq!([of(0, true), of(1, true), of(2, true)], [2, 1, 1]);
        // Org 0 holds 11 streams: two keys; the others 9 each: one.
        let wanted: Vec<usize> = (0..3).map(|org| keys_wanted(&placed, org)).collect();
        assert_eq!(wanted, [2, 1, 1]);
        assert_eq!(keys_wanted(&placements(0, 0, 2), 1), 0);
    }
}
