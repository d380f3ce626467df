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

use super::work::Work;
use super::{Admission, OrgActor, OrgState};
use crate::api::{QuotaView, Timestamp};
use crate::clock::Clock;
use crate::domain::account::{LimitKey, Limits, Tier};
use crate::domain::usage::{next_month_start, RequestKind, Usage};
use crate::error::{EngineError, LimitExceeded, LimitKind};

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
    /// `usage` as it should be stored now, the buckets' state included.
    fn snapshot(&self, usage: &Usage) -> Usage {
        Usage {
            read_tat: self.tat(RequestKind::Read, usage.read_tat),
            write_tat: self.tat(RequestKind::Write, usage.write_tat),
            ..usage.clone()
        }
    }
}

/// What admission reads and changes of an org: its tier and effective
/// limits, this month's counters and the buckets. Apart from the rest of
/// the actor's state, so admission is tested alone.
pub(super) struct Allowance<'a> {
    pub tier: Tier,
    pub limits: &'a Limits,
    pub usage: &'a mut Usage,
    pub buckets: &'a mut Buckets,
}

/// A refusal by a limit of `kind`.
fn exceeded(tier: Tier, kind: LimitKind, limit: i64, now: i64) -> LimitExceeded {
    let monthly = matches!(
        kind,
        LimitKind::MonthlyRequests | LimitKind::MonthlyTasks | LimitKind::MonthlyPlans
    );
    LimitExceeded {
        kind,
        limit,
        tier,
        resets: monthly.then(|| Timestamp(next_month_start(now))),
        retry_after: None,
    }
}

impl Allowance<'_> {
    /// Admits one request, or refuses it with the limit that applies; a
    /// refused request counts nowhere. Answers whether the usage changed
    /// (an org none of whose limits apply counts nothing).
    pub(super) fn admit(
        &mut self,
        admission: Admission,
        now: i64,
        clock: &Arc<dyn Clock>,
    ) -> Result<bool, EngineError> {
        let Admission {
            kind,
            requests,
            tasks,
        } = admission;
        let per_minute = self.limits.get(kind.limit_key());
        let monthly = self.limits.get(LimitKey::RequestsPerMonth);
        let quota = self
            .limits
            .get(LimitKey::TasksPerMonth)
            .filter(|_| tasks > 0);
        if per_minute.is_none() && monthly.is_none() && quota.is_none() {
            return Ok(false);
        }
        self.usage.roll(now);
        if tasks > 0 {
            self.check_task_quota(tasks, now)?;
        }
        if let Some(limit) = monthly {
            if self.usage.requests + requests > limit {
                return Err(exceeded(self.tier, LimitKind::MonthlyRequests, limit, now).into());
            }
        }
        let stored_tat = match kind {
            RequestKind::Read => self.usage.read_tat,
            RequestKind::Write => self.usage.write_tat,
        };
        let refused = match kind {
            RequestKind::Read => LimitKind::Reads,
            RequestKind::Write => LimitKind::Writes,
        };
        let slot = self.buckets.slot(kind);
        match per_minute {
            None => *slot = None,
            Some(limit) => {
                if slot.as_ref().map(|b| b.limit) != Some(limit) {
                    let tat = slot.as_ref().map_or(stored_tat, Bucket::tat);
                    *slot = Some(Bucket::new(limit, tat, clock));
                }
                if let Some(Err(retry_after)) = slot.as_ref().map(|b| b.take(now)) {
                    return Err(LimitExceeded {
                        retry_after: Some(retry_after),
                        ..exceeded(self.tier, refused, limit, now)
                    }
                    .into());
                }
            }
        }
        self.usage.requests += requests;
        Ok(true)
    }

    /// Refuses creating `tasks` more tasks this month beyond the quota.
    pub(super) fn check_task_quota(&mut self, tasks: i64, now: i64) -> Result<(), EngineError> {
        self.usage.roll(now);
        match self.limits.get(LimitKey::TasksPerMonth) {
            Some(limit) if self.usage.tasks + tasks > limit => {
                Err(exceeded(self.tier, LimitKind::MonthlyTasks, limit, now).into())
            }
            _ => Ok(()),
        }
    }
}

impl OrgState {
    fn allowance(&mut self) -> Allowance<'_> {
        Allowance {
            tier: self.entry.record.tier,
            limits: self.entry.limits(),
            usage: &mut self.usage,
            buckets: &mut self.buckets,
        }
    }

    /// Usage as it should be stored now, bucket state included.
    pub(super) fn usage_snapshot(&self) -> Usage {
        self.buckets.snapshot(&self.usage)
    }

    /// A refusal by a limit of `kind`, with this org's numbers.
    fn exceeded(&self, kind: LimitKind, limit: i64, now: i64) -> LimitExceeded {
        exceeded(self.entry.record.tier, kind, limit, now)
    }

    /// See [`Allowance::admit`].
    pub(super) fn admit(
        &mut self,
        admission: Admission,
        now: i64,
        clock: &Arc<dyn Clock>,
    ) -> Result<bool, EngineError> {
        self.allowance().admit(admission, now, clock)
    }

    /// See [`Allowance::check_task_quota`].
    pub(super) fn check_task_quota(&mut self, tasks: i64, now: i64) -> Result<(), EngineError> {
        self.allowance().check_task_quota(tasks, now)
    }

    /// Refuses having `wanted` of a counted thing (tags, teams) beyond its limit.
    pub(super) fn check_count(
        &self,
        key: LimitKey,
        kind: LimitKind,
        wanted: usize,
    ) -> Result<(), EngineError> {
        match self.entry.limit(key) {
            Some(limit) if wanted as i64 > limit => Err(self.exceeded(kind, limit, 0).into()),
            _ => Ok(()),
        }
    }
}

impl OrgActor {
    /// `GET /quota`: the monthly task quota.
    pub(super) fn quota(&self, state: &mut OrgState) -> QuotaView {
        let now = self.now();
        state.usage.roll(now);
        let limit = state.entry.limit(LimitKey::TasksPerMonth);
        QuotaView {
            tier: state.entry.record.tier,
            limit,
            used: state.usage.tasks,
            remaining: limit.map(|l| (l - state.usage.tasks).max(0)),
            resets_at: Timestamp(next_month_start(now)),
        }
    }

    /// Charges one planning call against the monthly plan allowance (before
    /// the model runs, so a failed plan still counts); answers how many
    /// remain (`None`: unlimited).
    pub(super) fn charge_plan(
        &self,
        state: &mut OrgState,
        work: &mut Work,
    ) -> Result<Option<i64>, EngineError> {
        let now = self.now();
        state.usage.roll(now);
        let limit = state.entry.limit(LimitKey::PlansPerMonth);
        if let Some(limit) = limit {
            if state.usage.plans >= limit {
                return Err(state.exceeded(LimitKind::MonthlyPlans, limit, now).into());
            }
        }
        state.usage.plans += 1;
        work.save_usage = true;
        Ok(limit.map(|l| l - state.usage.plans))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicI64;

    use super::*;

    /// 2026-11-24T12:00:00Z, and the start of the month after it.
    const NOW: i64 = 1_795_521_600_000;
    const DECEMBER: i64 = 1_796_083_200_000;

    /// A clock the test moves by hand.
    struct Hand(AtomicI64);

    impl Clock for Hand {
        fn now_ms(&self) -> i64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// An org's allowance alone, with a clock of its own.
    struct Org {
        limits: Limits,
        usage: Usage,
        buckets: Buckets,
        hand: Arc<Hand>,
        clock: Arc<dyn Clock>,
    }

    impl Org {
        fn new(limits: Limits) -> Self {
            let hand = Arc::new(Hand(AtomicI64::new(NOW)));
            Org {
                limits,
                usage: Usage::default(),
                buckets: Buckets::default(),
                clock: hand.clone(),
                hand,
            }
        }

        /// The same org after a restart: the usage as stored, no buckets.
        fn restarted(&self) -> Self {
            Org {
                limits: self.limits,
                usage: self.buckets.snapshot(&self.usage),
                buckets: Buckets::default(),
                hand: self.hand.clone(),
                clock: self.clock.clone(),
            }
        }

        fn advance(&self, ms: i64) {
            self.hand.0.fetch_add(ms, Ordering::SeqCst);
        }

        fn admit(&mut self, admission: Admission) -> Result<bool, EngineError> {
            let now = self.clock.now_ms();
            Allowance {
                tier: Tier::Dev,
                limits: &self.limits,
                usage: &mut self.usage,
                buckets: &mut self.buckets,
            }
            .admit(admission, now, &self.clock)
        }
    }

    fn limits() -> Limits {
        Limits {
            writes_per_minute: None,
            reads_per_minute: None,
            requests_per_month: None,
            tasks_per_month: None,
            tags: None,
            teams: None,
            plans_per_month: None,
            webhooks: None,
            schedules: None,
        }
    }

    fn refusal(result: Result<bool, EngineError>) -> LimitExceeded {
        match result {
            Err(EngineError::Limit(e)) => e,
            other => panic!("expected a limit refusal, got {other:?}"),
        }
    }

    #[test]
    fn writes_over_the_minute_limit_wait_for_a_token_and_reads_go_on() {
        let mut org = Org::new(Limits {
            writes_per_minute: Some(3),
            reads_per_minute: Some(3),
            ..limits()
        });
        for _ in 0..3 {
            assert!(org.admit(Admission::write()).unwrap());
        }
        let refused = refusal(org.admit(Admission::write()));
        assert_eq!((refused.kind, refused.limit), (LimitKind::Writes, 3));
        // Three a minute: a token every twenty seconds.
        assert_eq!(refused.retry_after, Some(20));
        assert_eq!(refused.resets, None);
        // A refused request counts nowhere; reads have a bucket of their own.
        assert_eq!(org.usage.requests, 3);
        assert!(org.admit(Admission::read()).is_ok());

        org.advance(19_000);
        assert_eq!(refusal(org.admit(Admission::write())).retry_after, Some(1));
        org.advance(1_000);
        assert!(org.admit(Admission::write()).is_ok());
        assert!(org.admit(Admission::write()).is_err());
    }

    #[test]
    fn a_restart_hands_out_no_fresh_burst() {
        let mut org = Org::new(Limits {
            writes_per_minute: Some(2),
            ..limits()
        });
        assert!(org.admit(Admission::write()).is_ok());
        assert!(org.admit(Admission::write()).is_ok());
        let mut again = org.restarted();
        assert_eq!(
            refusal(again.admit(Admission::write())).kind,
            LimitKind::Writes
        );
        again.advance(30_000);
        assert!(again.admit(Admission::write()).is_ok());
    }

    #[test]
    fn a_zero_limit_refuses_everything() {
        let mut org = Org::new(Limits {
            reads_per_minute: Some(0),
            ..limits()
        });
        let refused = refusal(org.admit(Admission::read()));
        assert_eq!(
            (refused.kind, refused.retry_after),
            (LimitKind::Reads, Some(60))
        );
        assert!(org.admit(Admission::write()).is_ok());
    }

    #[test]
    fn the_monthly_allowance_refuses_until_the_next_month() {
        let mut org = Org::new(Limits {
            requests_per_month: Some(2),
            ..limits()
        });
        assert!(org.admit(Admission::write()).is_ok());
        assert!(org.admit(Admission::read()).is_ok());
        let refused = refusal(org.admit(Admission::read()));
        assert_eq!(refused.kind, LimitKind::MonthlyRequests);
        assert_eq!(refused.resets, Some(Timestamp(DECEMBER)));
        assert_eq!(refused.retry_after, None);

        org.advance(DECEMBER - NOW);
        assert!(org.admit(Admission::read()).is_ok());
        assert_eq!(org.usage.requests, 1);
    }

    #[test]
    fn a_create_over_the_task_quota_is_refused_whole() {
        let mut org = Org::new(Limits {
            tasks_per_month: Some(5),
            ..limits()
        });
        org.usage.roll(NOW);
        org.usage.tasks = 3;
        let create = |tasks| Admission {
            kind: RequestKind::Write,
            requests: 1,
            tasks,
        };
        let refused = refusal(org.admit(create(3)));
        assert_eq!((refused.kind, refused.limit), (LimitKind::MonthlyTasks, 5));
        assert_eq!(org.usage.requests, 0);
        assert!(org.admit(create(2)).is_ok());
        // Reads are not held to the task quota.
        assert!(!org.admit(Admission::read()).unwrap());
    }

    #[test]
    fn an_org_without_limits_counts_nothing() {
        let mut org = Org::new(limits());
        for _ in 0..1_000 {
            assert!(!org.admit(Admission::write()).unwrap());
        }
        assert_eq!(org.usage, Usage::default());
    }
}
