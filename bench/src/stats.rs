//! What the bench measures while a phase runs: the operations, their
//! latencies, errors and items per agent (merged when the phase ends), the
//! progress line printed every second, and the phase that ties them together.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use tokio::task::{JoinHandle, JoinSet};

/// Error bodies kept per operation.
const ERROR_SAMPLES: usize = 5;

/// A measured operation.
#[derive(Debug, Clone, Copy)]
pub(super) enum Op {
    OrgCreate,
    OrgLimits,
    Create,
    Claim,
    Complete,
    Cycle,
    Page,
    Search,
    Recompute,
}

impl Op {
    const COUNT: usize = 9;

    pub(super) fn name(self) -> &'static str {
        match self {
            Op::OrgCreate => "org_create",
            Op::OrgLimits => "org_limits",
            Op::Create => "create",
            Op::Claim => "claim",
            Op::Complete => "complete",
            Op::Cycle => "cycle",
            Op::Page => "page",
            Op::Search => "search",
            Op::Recompute => "recompute",
        }
    }
}

/// One operation's raw figures, recorded by one agent.
#[derive(Default, Clone)]
pub(super) struct OpStats {
    pub(super) latencies_us: Vec<u32>,
    pub(super) errors: u64,
    /// Tasks carried by the successful requests (created, claimed, completed).
    pub(super) items: u64,
    pub(super) samples: Vec<String>,
}

impl OpStats {
    pub(super) fn ok(&mut self, latency: Duration, items: u64) {
        self.latencies_us
            .push(u32::try_from(latency.as_micros()).unwrap_or(u32::MAX));
        self.items += items;
    }

    /// Counts a failure without keeping its text.
    pub(super) fn fail(&mut self) {
        self.errors += 1;
    }

    pub(super) fn err(&mut self, text: String) {
        self.fail();
        if self.samples.len() < ERROR_SAMPLES {
            self.samples.push(text);
        }
    }

    fn merge(&mut self, other: OpStats) {
        self.latencies_us.extend(other.latencies_us);
        self.errors += other.errors;
        self.items += other.items;
        let room = ERROR_SAMPLES.saturating_sub(self.samples.len());
        self.samples.extend(other.samples.into_iter().take(room));
    }
}

/// All operations' figures of one agent or one phase.
#[derive(Default)]
pub(super) struct Stats {
    pub(super) ops: [OpStats; Op::COUNT],
}

impl Stats {
    pub(super) fn op(&mut self, op: Op) -> &mut OpStats {
        &mut self.ops[op as usize]
    }

    fn merge(&mut self, other: Stats) {
        for (mine, theirs) in self.ops.iter_mut().zip(other.ops) {
            mine.merge(theirs);
        }
    }
}

/// What one agent task hands back.
#[derive(Default)]
pub(super) struct AgentOutcome {
    pub(super) stats: Stats,
    /// Time into the phase at which this agent found the queue empty.
    pub(super) drained_at: Option<Duration>,
}

/// How long an agent waits after a failed request, so a failing server is
/// not hammered.
pub(super) const ERROR_BACKOFF: Duration = Duration::from_millis(20);

impl AgentOutcome {
    /// Counts one request of `op` carrying `items`; after a failure the
    /// agent backs off a moment.
    pub(super) async fn record(
        &mut self,
        op: Op,
        progress: &Progress,
        result: Result<Duration, String>,
        items: u64,
    ) {
        match result {
            Ok(latency) => {
                self.stats.op(op).ok(latency, items);
                progress.add(items);
            }
            Err(e) => {
                self.stats.op(op).err(e);
                progress.error();
                tokio::time::sleep(ERROR_BACKOFF).await;
            }
        }
    }
}

/// Counters read by the progress line.
#[derive(Default)]
pub(super) struct Progress {
    done: AtomicU64,
    errors: AtomicU64,
}

impl Progress {
    pub(super) fn add(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    pub(super) fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// Prints a progress line to stderr every second until dropped.
struct Ticker(JoinHandle<()>);

impl Ticker {
    fn start(phase: &'static str, unit: &'static str, progress: Arc<Progress>) -> Self {
        Ticker(tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let period = Duration::from_secs(1);
            let mut interval = tokio::time::interval_at(started + period, period);
            let mut last = 0;
            loop {
                interval.tick().await;
                let done = progress.done.load(Ordering::Relaxed);
                let errors = progress.errors.load(Ordering::Relaxed);
                eprintln!(
                    "[{phase}] {:>6.1}s  {unit} {done:>9}  now {:>9}/s  errors {errors}",
                    started.elapsed().as_secs_f64(),
                    done - last,
                );
                last = done;
            }
        }))
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A running phase: agent tasks, shared progress counters, and the ticker.
pub(super) struct Phase {
    pub(super) name: &'static str,
    pub(super) started: Instant,
    pub(super) progress: Arc<Progress>,
    pub(super) tasks: JoinSet<AgentOutcome>,
    _ticker: Ticker,
}

/// A finished phase.
pub(super) struct PhaseResult {
    pub(super) name: &'static str,
    pub(super) wall: Duration,
    pub(super) stats: Stats,
    pub(super) drained: Vec<Duration>,
}

impl Phase {
    pub(super) fn start(name: &'static str, unit: &'static str) -> Self {
        let progress = Arc::new(Progress::default());
        Phase {
            name,
            started: Instant::now(),
            _ticker: Ticker::start(name, unit, progress.clone()),
            progress,
            tasks: JoinSet::new(),
        }
    }

    pub(super) async fn finish(mut self) -> anyhow::Result<PhaseResult> {
        let mut stats = Stats::default();
        let mut drained = Vec::new();
        while let Some(joined) = self.tasks.join_next().await {
            let outcome = joined.map_err(|e| anyhow!("{} agent task failed: {e}", self.name))?;
            stats.merge(outcome.stats);
            drained.extend(outcome.drained_at);
        }
        let wall = self.started.elapsed();
        let done = self.progress.done.load(Ordering::Relaxed);
        eprintln!(
            "[{}] finished in {:.2} s ({done} done)",
            self.name,
            wall.as_secs_f64()
        );
        Ok(PhaseResult {
            name: self.name,
            wall,
            stats,
            drained,
        })
    }
}

/// Sub-buckets per power of two above [`EXACT`]: a value is kept to
/// within 1/64 (1.6%).
const SUB_BUCKETS: u64 = 64;
/// Values below this are counted exactly.
const EXACT: u64 = 2 * SUB_BUCKETS;

/// Counts of microsecond values in buckets of bounded relative width, for
/// figures too many to keep one by one (every event at every stream). A
/// fixed size, whatever the count; merged like [`OpStats`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; Self::bucket(u64::from(u32::MAX)) + 1],
            total: 0,
            max: 0,
        }
    }
}

impl Histogram {
    /// The bucket of `us` (at most `u32::MAX`).
    fn bucket(us: u64) -> usize {
        if us < EXACT {
            return us as usize;
        }
        let top = u64::from(63 - us.leading_zeros());
        let shift = top - SUB_BUCKETS.trailing_zeros() as u64;
        (EXACT + (top - 7) * SUB_BUCKETS + ((us >> shift) - SUB_BUCKETS)) as usize
    }

    /// The middle of bucket `index`'s values.
    fn value(index: usize) -> u64 {
        let index = index as u64;
        if index < EXACT {
            return index;
        }
        let top = (index - EXACT) / SUB_BUCKETS + 7;
        let shift = top - SUB_BUCKETS.trailing_zeros() as u64;
        let low = (SUB_BUCKETS + (index - EXACT) % SUB_BUCKETS) << shift;
        low + (1 << shift) / 2
    }

    pub(super) fn record(&mut self, us: u64) {
        let us = us.min(u64::from(u32::MAX));
        self.counts[Self::bucket(us)] += 1;
        self.total += 1;
        self.max = self.max.max(us);
    }

    pub(super) fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    pub(super) fn count(&self) -> u64 {
        self.total
    }

    /// Nearest-rank percentile in milliseconds, to within a bucket.
    pub(super) fn percentile_ms(&self, p: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((p / 100.0 * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        let index = self.counts.iter().position(|&n| {
            seen += n;
            seen >= rank
        })?;
        Some(Self::value(index).min(self.max) as f64 / 1000.0)
    }

    pub(super) fn max_ms(&self) -> Option<f64> {
        (self.total > 0).then(|| self.max as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_counted_exactly() {
        let mut h = Histogram::default();
        for us in [5, 7, 100] {
            h.record(us);
        }
        assert_eq!(h.percentile_ms(50.0), Some(0.007));
        assert_eq!(h.percentile_ms(100.0), Some(0.1));
        assert_eq!(h.max_ms(), Some(0.1));
    }

    #[test]
    fn a_large_value_is_kept_to_within_two_percent() {
        for us in [128, 1_000, 12_345, 987_654, 40_000_000, u64::from(u32::MAX)] {
            let mut h = Histogram::default();
            h.record(us);
            h.record(1);
            let got = h.percentile_ms(99.0).unwrap() * 1000.0;
            assert!(
                (got - us as f64).abs() <= us as f64 / 64.0,
                "{us} us read as {got}"
            );
        }
    }

    #[test]
    fn buckets_rise_with_their_values() {
        let mut last = 0;
        for us in (0..2_000_000).step_by(97) {
            let bucket = Histogram::bucket(us);
            assert!(bucket >= last, "{us}");
            last = bucket;
        }
        assert_eq!(
            Histogram::bucket(u64::from(u32::MAX)),
            Histogram::default().counts.len() - 1
        );
    }

    #[test]
    fn merged_histograms_rank_over_both() {
        let (mut a, mut b) = (Histogram::default(), Histogram::default());
        (0..99).for_each(|_| a.record(10));
        b.record(50_000);
        a.merge(&b);
        assert_eq!(a.count(), 100);
        assert_eq!(a.percentile_ms(99.0), Some(0.01));
        assert!(a.percentile_ms(100.0).unwrap() > 49.0);
        assert_eq!(a.max_ms(), Some(50.0));
    }

    #[test]
    fn an_empty_histogram_has_no_figures() {
        let h = Histogram::default();
        assert_eq!((h.percentile_ms(50.0), h.max_ms()), (None, None));
    }
}
