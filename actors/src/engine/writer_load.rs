//! Whether the writers are busy with other work than a background
//! worker's own, and the one pacing of background work by it: how much
//! webhook deliveries, the retention sweep and an org's removal take per
//! step, and how long each waits before the next.
//!
//! Background work yields to claims beyond the CPU: what it writes on
//! SQLite goes through the writer, whose commits every claim waits for.
//! While the writers together spent more than [`BUSY_SHARE`] of the last
//! [`LOAD_WINDOW`] committing for everything else (their time, in
//! proportion to the batches that were not the worker's own; summed over
//! PostgreSQL's several writers), the worker trickles, and it catches up
//! at full speed once they are not. One rule for all, so that they yield
//! alike and a change of it reaches every one ([`Pacing::pace`]).

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

/// How a background worker goes: what a step takes and the pause after
/// it while the writers are free, and the same while they are busy (a
/// floor, so a server that stays busy still gets the work done).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pacing {
    pub step: usize,
    pub pause: Duration,
    pub busy_step: usize,
    pub busy_pause: Duration,
}

/// One step as paced: how much it may take, and the pause after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pace {
    pub limit: usize,
    pub pause: Duration,
}

impl Pacing {
    /// At full speed whatever the load (a test hook's awaited run).
    pub(crate) const fn unpaced(step: usize) -> Self {
        Pacing {
            step,
            pause: Duration::ZERO,
            busy_step: step,
            busy_pause: Duration::ZERO,
        }
    }

    /// The pace while the writers are `busy` with others' work, or not.
    pub(crate) fn pace(&self, busy: bool) -> Pace {
        if busy {
            Pace {
                limit: self.busy_step,
                pause: self.busy_pause,
            }
        } else {
            Pace {
                limit: self.step,
                pause: self.pause,
            }
        }
    }

    fn is_unpaced(&self) -> bool {
        self.pause.is_zero() && self.busy_pause.is_zero() && self.step == self.busy_step
    }
}

/// A worker's pacing as it goes: the writers' load it last saw.
pub(crate) struct Pacer {
    pacing: Pacing,
    load: WriterLoad,
}

impl Pacer {
    pub(crate) fn new(pacing: Pacing) -> Self {
        Pacer {
            pacing,
            load: WriterLoad::default(),
        }
    }

    /// The next step's pace, the worker having handed the writers `own`
    /// batches so far.
    pub(crate) fn pace(&mut self, engine: &Engine, own: u64) -> Pace {
        let busy = !self.pacing.is_unpaced() && self.load.busy_now(engine, own);
        self.pacing.pace(busy)
    }

    /// Waits out a step's pause; without one, lets others run first.
    pub(crate) async fn pause(pace: Pace) {
        if pace.pause.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(pace.pause).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_writer_slows_every_worker_to_its_floor() {
        let pacing = Pacing {
            step: 100,
            pause: Duration::from_millis(20),
            busy_step: 10,
            busy_pause: Duration::from_millis(100),
        };
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let committed = |micros, batches| Committed {
            micros,
            batches,
            own: 0,
        };
        let mut load = WriterLoad::default();
        let mut pace_at = |ms, totals| pacing.pace(load.busy(at(ms), totals));
        let free = Pace {
            limit: 100,
            pause: Duration::from_millis(20),
        };
        let busy = Pace {
            limit: 10,
            pause: Duration::from_millis(100),
        };
        assert_eq!(pace_at(0, committed(0, 0)), free);
        assert_eq!(pace_at(100, committed(80_000, 8)), busy);
        assert_eq!(pace_at(200, committed(81_000, 9)), free);
        let unpaced = Pacing::unpaced(7);
        assert!(unpaced.is_unpaced() && !pacing.is_unpaced());
        assert_eq!(unpaced.pace(true), unpaced.pace(false));
        assert_eq!(unpaced.pace(true).limit, 7);
    }

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
