//! Whether the writers are busy with other work than a background
//! worker's own: what decides how fast webhook deliveries and the
//! retention sweep go.
//!
//! Background work yields to claims beyond the CPU: what it writes on
//! SQLite goes through the writer, whose commits every claim waits for.
//! While the writers together spent more than [`BUSY_SHARE`] of the last
//! [`LOAD_WINDOW`] committing for everything else (their time, in
//! proportion to the batches that were not the worker's own; summed over
//! PostgreSQL's several writers), the worker trickles, and it catches up
//! at full speed once they are not.

use std::time::{Duration, Instant};

use super::Engine;

const BUSY_SHARE: f64 = 0.5;
const LOAD_WINDOW: Duration = Duration::from_millis(100);

/// The writers' running totals: time spent committing, batches
/// committed, and the batches the worker handed them.
#[derive(Clone, Copy, Default)]
pub(crate) struct Committed {
    pub micros: u64,
    pub batches: u64,
    pub own: u64,
}

/// The verdict of the last window, and the window's start and totals then.
#[derive(Default)]
pub(crate) struct WriterLoad {
    since: Option<(Instant, Committed)>,
    busy: bool,
}

impl WriterLoad {
    /// Whether the engine's writers are busy with others' work now, the
    /// worker having handed them `own` batches so far.
    pub(crate) fn busy_now(&mut self, engine: &Engine, own: u64) -> bool {
        let totals = engine.inner.writers.stats().totals();
        self.busy(
            Instant::now(),
            Committed {
                micros: totals.commit_micros,
                batches: totals.batches,
                own,
            },
        )
    }

    /// Updates the verdict once a window has passed; answers it.
    pub(crate) fn busy(&mut self, now: Instant, totals: Committed) -> bool {
        match self.since {
            Some((start, before)) => {
                let wall = now.duration_since(start);
                if wall >= LOAD_WINDOW {
                    let spent = totals.micros.saturating_sub(before.micros) as f64;
                    let batches = totals.batches.saturating_sub(before.batches);
                    let own = totals.own.saturating_sub(before.own).min(batches);
                    let others = if batches == 0 {
                        0.0
                    } else {
                        (batches - own) as f64 / batches as f64
                    };
                    let share = spent / wall.as_micros() as f64;
                    self.busy = share * others > BUSY_SHARE;
                    self.since = Some((now, totals));
                }
            }
            None => self.since = Some((now, totals)),
        }
        self.busy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers_are_busy_when_they_spent_over_half_of_a_window_on_others() {
        let committed = |micros, batches, own| Committed {
            micros,
            batches,
            own,
        };
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut load = WriterLoad::default();
        assert!(!load.busy(at(0), committed(0, 0, 0)));
        // Within the window nothing changes, whatever was spent.
        assert!(!load.busy(at(50), committed(90_000, 9, 0)));
        // 90 ms of commits in 100 ms, none of them the worker's.
        assert!(load.busy(at(100), committed(90_000, 10, 0)));
        // The next window, idle.
        assert!(!load.busy(at(200), committed(100_000, 10, 0)));
        // As busy, but half of the batches were the worker's own.
        assert!(!load.busy(at(300), committed(190_000, 20, 5)));
        // Several writers' time adds up: 4 × 30 ms in 100 ms.
        assert!(load.busy(at(400), committed(310_000, 30, 5)));
    }
}
