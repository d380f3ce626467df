//! The reports actor: computes every org's reports on a schedule
//! (insights every 6 hours, standups daily, runbooks and failure clusters
//! weekly) and on the operator's demand, one org at a time.
//!
//! Each org's first run falls at an offset within the period taken from a
//! hash of its id, and each later one a period after the last, so 10,000
//! orgs do not all recompute in the same second. Scheduled work is paced:
//! after each job the actor rests three times as long as the job took, so
//! it takes at most a quarter of a core, and every computation (store
//! reads, decryption, figures, clustering) runs on the reports' own
//! low-priority thread. A `ReportsKeeper` supervises
//! it and starts a new one if it fails.

use std::collections::{BTreeSet, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};

use super::compute::Reporter;
use crate::api::ReportKind;
use crate::domain::OrgId;
use crate::error::EngineError;

const HOUR_MS: i64 = 60 * 60 * 1000;
/// How often the actor looks for due work when none is near.
const TICK: Duration = Duration::from_secs(5);
/// How often the list of orgs is read again (new orgs are also announced).
const REFRESH_ORGS: Duration = Duration::from_secs(300);
/// Rest after a scheduled job, as a multiple of its duration.
const REST_FACTOR: u32 = 3;
/// Rest after a recompute the operator asked for: the answer is not
/// delayed, the next recompute is.
const ASKED_REST_FACTOR: u32 = 1;

/// A scheduled job: which reports, how often.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Job {
    Insights,
    Standups,
    Weekly,
}

impl Job {
    const ALL: [Job; 3] = [Job::Insights, Job::Standups, Job::Weekly];

    fn every_ms(self) -> i64 {
        match self {
            Job::Insights => 6 * HOUR_MS,
            Job::Standups => 24 * HOUR_MS,
            Job::Weekly => 7 * 24 * HOUR_MS,
        }
    }

    fn reports(self) -> &'static [ReportKind] {
        match self {
            Job::Insights => &[ReportKind::Insights],
            Job::Standups => &[ReportKind::Standup],
            Job::Weekly => &[ReportKind::Runbooks, ReportKind::FailureClusters],
        }
    }

    /// The stored kind whose last computation dates the job.
    fn dated_by(self) -> ReportKind {
        self.reports()[0]
    }

    /// Where in its period an org's first run falls.
    fn offset_ms(self, org: OrgId) -> i64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (org, self).hash(&mut h);
        (h.finish() % self.every_ms() as u64) as i64
    }
}

pub enum ReportsMsg {
    /// Compute these reports of the org now.
    Recompute {
        org: OrgId,
        kinds: Vec<ReportKind>,
        reply: RpcReplyPort<Result<Vec<ReportKind>, EngineError>>,
    },
    /// A new org: schedule it.
    OrgAdded(OrgId),
    /// Run the next due job, if any.
    Tick,
}

pub struct ReportsActor {
    reporter: Arc<Reporter>,
    /// Whether scheduled runs happen (tests turn them off to control time).
    scheduled: bool,
}

pub struct ReportsState {
    /// `(due at, org, job)`, soonest first.
    due: BTreeSet<(i64, OrgId, Job)>,
    known: HashSet<OrgId>,
    orgs_read_at: Option<Instant>,
}

impl ReportsActor {
    fn now(&self) -> i64 {
        self.reporter.clock.now_ms()
    }

    async fn read_orgs(&self, state: &mut ReportsState) -> Result<(), EngineError> {
        let orgs = self.reporter.store.org_ids().await?;
        let last = self.reporter.store.reports_last_computed().await?;
        let now = self.now();
        for org in orgs {
            if !state.known.insert(org) {
                continue;
            }
            for job in Job::ALL {
                let due = match last.get(&(org, job.dated_by().as_str().to_owned())) {
                    Some(at) => at + job.every_ms(),
                    None => now + job.offset_ms(org),
                };
                state.due.insert((due, org, job));
            }
        }
        state.orgs_read_at = Some(Instant::now());
        Ok(())
    }

    fn add_org(&self, state: &mut ReportsState, org: OrgId) {
        if state.known.insert(org) {
            let now = self.now();
            for job in Job::ALL {
                state.due.insert((now + job.offset_ms(org), org, job));
            }
        }
    }

    /// Runs the soonest due job; answers how long to wait before the next
    /// tick.
    async fn run_due(&self, state: &mut ReportsState) -> Duration {
        if state
            .orgs_read_at
            .is_none_or(|at| at.elapsed() >= REFRESH_ORGS)
        {
            if let Err(e) = self.read_orgs(state).await {
                tracing::warn!(error = %e, "reading the orgs to report on");
                state.orgs_read_at = Some(Instant::now());
            }
        }
        let now = self.now();
        let Some(&(due, org, job)) = state.due.first() else {
            return TICK;
        };
        if due > now {
            return TICK.min(Duration::from_millis((due - now) as u64));
        }
        state.due.pop_first();
        let started = Instant::now();
        let reports = job.reports().to_vec();
        // Several nodes: each org's reports are computed by one of them.
        if self.reporter.schedules(org) {
            if let Err(e) = self
                .reporter
                .compute_in_background(org, reports, true)
                .await
            {
                tracing::warn!(%org, job = ?job, error = %e, "scheduled reports not computed");
            }
        }
        // The next run a period on, skipping periods missed while down.
        let mut next = due + job.every_ms();
        while next <= now {
            next += job.every_ms();
        }
        state.due.insert((next, org, job));
        let rest = started.elapsed() * REST_FACTOR;
        match state.due.first() {
            Some(&(d, _, _)) if d <= now => rest.max(Duration::from_millis(1)),
            _ => rest.max(TICK),
        }
    }
}

impl Actor for ReportsActor {
    type Msg = ReportsMsg;
    type State = ReportsState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<ReportsMsg>,
        _: (),
    ) -> Result<ReportsState, ActorProcessingErr> {
        if self.scheduled {
            let _ = myself.cast(ReportsMsg::Tick);
        }
        Ok(ReportsState {
            due: BTreeSet::new(),
            known: HashSet::new(),
            orgs_read_at: None,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<ReportsMsg>,
        msg: ReportsMsg,
        state: &mut ReportsState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ReportsMsg::Recompute { org, kinds, reply } => {
                let started = Instant::now();
                let result = self.reporter.compute_in_background(org, kinds, false).await;
                if let Ok(done) = &result {
                    // Computed now: the schedule starts again from here.
                    let now = self.now();
                    for job in Job::ALL {
                        if done.contains(&job.dated_by()) {
                            state.due.retain(|(_, o, j)| !(*o == org && *j == job));
                            state.due.insert((now + job.every_ms(), org, job));
                        }
                    }
                }
                let _ = reply.send(result);
                // Asked-for work rests too (as long as it ran), so a
                // recompute of every org leaves the claims their cores.
                tokio::time::sleep(started.elapsed() * ASKED_REST_FACTOR).await;
            }
            ReportsMsg::OrgAdded(org) => self.add_org(state, org),
            ReportsMsg::Tick => {
                let wait = self.run_due(state).await;
                myself.send_after(wait, || ReportsMsg::Tick);
            }
        }
        Ok(())
    }
}

/// The live reports actor, replaced by the keeper when it fails.
pub type ReportsRef = Arc<RwLock<Option<ActorRef<ReportsMsg>>>>;

/// Supervises the reports actor: starts it, and starts a new one when it
/// fails (a panic while computing), logging the failure.
pub struct ReportsKeeper {
    pub reporter: Arc<Reporter>,
    pub scheduled: bool,
    pub current: ReportsRef,
}

impl ReportsKeeper {
    async fn spawn_worker(&self, myself: &ActorRef<()>) -> Result<(), ActorProcessingErr> {
        let worker = ReportsActor {
            reporter: self.reporter.clone(),
            scheduled: self.scheduled,
        };
        let (actor, _) = Actor::spawn_linked(None, worker, (), myself.get_cell()).await?;
        *self.current.write().expect("not poisoned") = Some(actor);
        Ok(())
    }
}

impl Actor for ReportsKeeper {
    type Msg = ();
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, myself: ActorRef<()>, _: ()) -> Result<(), ActorProcessingErr> {
        self.spawn_worker(&myself).await
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<()>,
        event: SupervisionEvent,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(_, error) = event {
            tracing::warn!(error = %error, "reports actor failed; starting a new one");
            *self.current.write().expect("not poisoned") = None;
            self.spawn_worker(&myself).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_runs_spread_over_the_period() {
        // 10,000 orgs' first insights fall within six hours, about 28 a
        // minute; no minute holds more than twice that.
        let mut per_minute = vec![0u32; 6 * 60];
        for i in 0..10_000u128 {
            let org = OrgId(uuid::Uuid::from_u128(
                i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835),
            ));
            let offset = Job::Insights.offset_ms(org);
            assert!((0..Job::Insights.every_ms()).contains(&offset));
            per_minute[(offset / 60_000) as usize] += 1;
        }
        let busiest = per_minute.iter().max().copied().unwrap_or_default();
        assert!(busiest < 56, "{busiest} first runs in one minute");
        // Pinned values: `DefaultHasher::new()` has fixed keys, so every
        // process (a restart, another node) gives an org the same times.
        let org: OrgId = "01a220d0-501a-703e-a721-779f23eb694e".parse().unwrap();
        let offsets = Job::ALL.map(|job| job.offset_ms(org));
        assert_eq!(offsets, [10_415_863, 56_372_900, 58_050_813]);
    }
}
