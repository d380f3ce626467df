//! Admission inside the org actor: the per-minute token buckets (governor's
//! GCRA) and the monthly allowances, all owned by the actor, so the request
//! path takes no global lock.
//!
//! governor keeps a bucket's whole state in one number, its theoretical
//! arrival time (TAT). `TatCell` holds it where we can read it, and
//! `EpochClock` makes it absolute (nanoseconds since the epoch), so it is
//! stored with the month's counters and restored after a restart: a restart
//! never hands out a fresh burst.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{NotKeyed, StateStore};
use governor::{Quota, RateLimiter};

use super::{OrgActor, OrgState};
use crate::clock::{format_ms, Clock};
use crate::domain::usage::{next_month_start, RequestKind, Usage};
use crate::error::EngineError;
use crate::store::{WriteBatch, WriteOp};

/// governor's clock, read from the engine's clock as time since the epoch.
#[derive(Clone)]
struct EpochClock {
    clock: Arc<dyn Clock>,
    origin_taken: Arc<AtomicBool>,
}

impl governor::clock::Clock for EpochClock {
    type Instant = Duration;

    fn now(&self) -> Duration {
        // `RateLimiter::new` reads the clock once to fix the origin its state
        // is relative to. Answering the epoch there makes that state absolute.
        if !self.origin_taken.swap(true, Ordering::Relaxed) {
            return Duration::ZERO;
        }
        Duration::from_millis(self.clock.now_ms().max(0) as u64)
    }
}

/// One bucket's TAT (0: never used, the bucket is full).
#[derive(Clone, Default)]
struct TatCell(Arc<AtomicU64>);

impl StateStore for TatCell {
    type Key = NotKeyed;

    fn measure_and_replace<T, F, E>(&self, _: &NotKeyed, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        // Only the owning actor touches the cell, so load-then-store is exact.
        let current = self.0.load(Ordering::Relaxed);
        let (outcome, next) = f((current != 0).then(|| Nanos::from(current)))?;
        self.0.store(next.as_u64(), Ordering::Relaxed);
        Ok(outcome)
    }
}

type Limiter = RateLimiter<NotKeyed, TatCell, EpochClock, NoOpMiddleware<Duration>>;

/// A per-minute limit: a full minute's burst, refilled at limit/60 per second.
pub(super) struct Bucket {
    limit: i64,
    tat: TatCell,
    /// `None` when the limit is 0: nothing passes.
    limiter: Option<Limiter>,
}

impl Bucket {
    fn new(limit: i64, tat: u64, clock: &Arc<dyn Clock>) -> Self {
        let cell = TatCell(Arc::new(AtomicU64::new(tat)));
        let per_minute = u32::try_from(limit).unwrap_or(u32::MAX);
        let limiter = std::num::NonZeroU32::new(per_minute).map(|n| {
            let clock = EpochClock {
                clock: clock.clone(),
                origin_taken: Arc::new(AtomicBool::new(false)),
            };
            RateLimiter::new(Quota::per_minute(n), cell.clone(), clock)
        });
        Self {
            limit,
            tat: cell,
            limiter,
        }
    }

    /// Takes a token, or says how many whole seconds until one is free.
    fn take(&self, now_ms: i64) -> Result<(), u64> {
        match &self.limiter {
            None => Err(60),
            Some(limiter) => limiter.check().map_err(|not_until| {
                let wait = not_until.wait_time_from(Duration::from_millis(now_ms.max(0) as u64));
                (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
            }),
        }
    }

    fn tat(&self) -> u64 {
        self.tat.0.load(Ordering::Relaxed)
    }
}

/// The org's read and write buckets; `None` where the limit is unlimited.
#[derive(Default)]
pub(super) struct Buckets {
    read: Option<Bucket>,
    write: Option<Bucket>,
}

impl Buckets {
    fn slot(&mut self, kind: RequestKind) -> &mut Option<Bucket> {
        match kind {
            RequestKind::Read => &mut self.read,
            RequestKind::Write => &mut self.write,
        }
    }

    fn tat(&self, kind: RequestKind, stored: u64) -> u64 {
        let bucket = match kind {
            RequestKind::Read => &self.read,
            RequestKind::Write => &self.write,
        };
        bucket.as_ref().map_or(stored, Bucket::tat)
    }
}

impl OrgState {
    /// Usage as it should be stored now, bucket state included.
    pub(super) fn usage_snapshot(&self) -> Usage {
        Usage {
            read_tat: self.buckets.tat(RequestKind::Read, self.usage.read_tat),
            write_tat: self.buckets.tat(RequestKind::Write, self.usage.write_tat),
            ..self.usage.clone()
        }
    }

    /// Admits one request that counts `requests` against the monthly
    /// allowance and will create `tasks` tasks, or refuses it with the 429
    /// that applies. A refused request counts nowhere.
    pub(super) fn admit(
        &mut self,
        kind: RequestKind,
        requests: i64,
        tasks: i64,
        now: i64,
        clock: &Arc<dyn Clock>,
    ) -> Result<(), EngineError> {
        self.usage.roll(now);
        let entry = self.entry.clone();
        let tier = entry.record.tier.as_str();
        let resets = || format_ms(next_month_start(now));
        if tasks > 0 {
            self.check_task_quota(tasks, now)?;
        }
        if let Some(limit) = entry.limit("requests_per_month") {
            if self.usage.requests + requests > limit {
                return Err(EngineError::MonthlyRequests {
                    limit,
                    tier,
                    resets: resets(),
                });
            }
        }
        let limit = entry.limit(kind.limit_key());
        let stored_tat = match kind {
            RequestKind::Read => self.usage.read_tat,
            RequestKind::Write => self.usage.write_tat,
        };
        let slot = self.buckets.slot(kind);
        match limit {
            None => *slot = None,
            Some(limit) => {
                if slot.as_ref().map(|b| b.limit) != Some(limit) {
                    let tat = slot.as_ref().map_or(stored_tat, Bucket::tat);
                    *slot = Some(Bucket::new(limit, tat, clock));
                }
                if let Some(bucket) = slot {
                    bucket
                        .take(now)
                        .map_err(|retry_after_secs| EngineError::RateLimited {
                            kind: kind.as_str(),
                            limit,
                            tier,
                            retry_after_secs,
                        })?;
                }
            }
        }
        self.usage.requests += requests;
        Ok(())
    }

    /// Refuses creating `tasks` more tasks this month beyond the quota.
    pub(super) fn check_task_quota(&mut self, tasks: i64, now: i64) -> Result<(), EngineError> {
        self.usage.roll(now);
        match self.entry.limit("tasks_per_month") {
            Some(limit) if self.usage.tasks + tasks > limit => Err(EngineError::MonthlyTasks {
                limit,
                tier: self.entry.record.tier.as_str(),
                resets: format_ms(next_month_start(now)),
            }),
            _ => Ok(()),
        }
    }
}

impl OrgState {
    /// Charges one planning call against the monthly plan allowance (it is
    /// charged before the model runs, so a failed plan still counts) and
    /// answers how many remain (`None`: unlimited).
    pub(super) fn charge_plan(&mut self, now: i64) -> Result<Option<i64>, EngineError> {
        self.usage.roll(now);
        let limit = self.entry.limit("plans_per_month");
        if let Some(limit) = limit {
            if self.usage.plans >= limit {
                return Err(EngineError::MonthlyPlans {
                    limit,
                    tier: self.entry.record.tier.as_str(),
                    resets: format_ms(next_month_start(now)),
                });
            }
        }
        self.usage.plans += 1;
        Ok(limit.map(|l| l - self.usage.plans))
    }
}

/// `GET /quota`: the monthly task quota.
#[derive(Debug, Clone, serde::Serialize)]
pub struct QuotaView {
    pub tier: &'static str,
    pub limit: Option<i64>,
    pub used: i64,
    pub remaining: Option<i64>,
    pub resets_at: String,
}

impl OrgActor {
    pub(super) fn quota(&self, state: &mut OrgState) -> QuotaView {
        let now = self.deps.clock.now_ms();
        state.usage.roll(now);
        let limit = state.entry.limit("tasks_per_month");
        QuotaView {
            tier: state.entry.record.tier.as_str(),
            limit,
            used: state.usage.tasks,
            remaining: limit.map(|l| (l - state.usage.tasks).max(0)),
            resets_at: format_ms(next_month_start(now)),
        }
    }

    /// Queues the usage counters and bucket state for commit.
    pub(super) fn save_usage(&self, state: &OrgState) -> crate::writer::Commit {
        self.deps.writers.submit(WriteBatch {
            org: state.org,
            ops: vec![WriteOp::SaveUsage(state.usage_snapshot())],
        })
    }
}
