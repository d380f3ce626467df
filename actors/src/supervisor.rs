//! The supervisor: spawns an org actor on the first request for its org,
//! retires it after it has been idle, and restarts it when it fails.
//!
//! It keeps its own routing table rather than ractor's process-global
//! registry, and it is the only writer of that table; the engine reads it
//! as the fast path and asks here (`Resolve`) when a route is missing or
//! stale. An idle actor is drained, not killed: messages already in its
//! mailbox are served, later sends are refused; requests for an org whose
//! actor is draining or dying wait here until it has stopped, so two actors
//! never own one org at the same time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};

use crate::domain::OrgId;
use crate::error::EngineError;
use crate::org::{OrgActor, OrgDeps, OrgEvent, OrgMsg};

/// The live actor of an org and the requests in flight to it.
#[derive(Clone)]
pub struct Route {
    pub actor: ActorRef<OrgMsg>,
    /// Requests sent to this actor and not yet answered and committed.
    pub in_flight: Arc<AtomicUsize>,
}

pub type Routes = Arc<DashMap<OrgId, Route>>;

pub enum SupervisorMsg {
    /// The org's live actor, spawning it if needed. `stale` names an actor
    /// that refused a message: it is stopping, and the answer must be its
    /// successor.
    Resolve {
        org: OrgId,
        stale: Option<ActorId>,
        reply: RpcReplyPort<Result<Route, EngineError>>,
    },
    /// What an org actor reports about itself.
    Org(OrgEvent),
    /// A commit of this org failed: its actor's memory is ahead of the store.
    WriteFailed(OrgId),
    /// Several nodes: the org should be another node's; its actor drains
    /// and the org is released. Requests that wait answer `OrgMoving`.
    HandOver(OrgId),
    /// Several nodes: this node no longer owns the org (its trust window
    /// shut); its actor stops at once, without a commit.
    Lost(OrgId),
    /// Drains every org actor (shutdown).
    StopAll(RpcReplyPort<()>),
    /// Test hook: crash the org's actor and answer once it has restarted.
    #[cfg(feature = "test-hooks")]
    Crash(OrgId, RpcReplyPort<()>),
}

/// Counters for `/metrics` and the operator's stats.
#[derive(Debug, Default)]
pub struct ActorStats {
    pub spawned: AtomicU64,
    pub restarts: AtomicU64,
    pub idle_stops: AtomicU64,
    /// Restarts per org with the last error; touched once per failure.
    failures: Mutex<HashMap<OrgId, Failures>>,
}

/// An org's actor failures since the server started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failures {
    pub count: u64,
    /// What the last failure said.
    pub last_error: String,
    /// When it happened (ms since the epoch, the engine's clock).
    pub last_at: i64,
}

/// The longest error text kept per org.
const MAX_ERROR_CHARS: usize = 500;

impl ActorStats {
    fn record_failure(&self, org: OrgId, error: &str, at: i64) {
        let last_error: String = error.chars().take(MAX_ERROR_CHARS).collect();
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let entry = failures.entry(org).or_insert(Failures {
            count: 0,
            last_error: String::new(),
            last_at: at,
        });
        entry.count += 1;
        entry.last_error = last_error;
        entry.last_at = at;
    }

    /// Each org whose actor failed, with its failures.
    pub fn failures(&self) -> Vec<(OrgId, Failures)> {
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.iter().map(|(o, f)| (*o, f.clone())).collect()
    }
}

pub struct Supervisor {
    pub deps: OrgDeps,
    pub routes: Routes,
    pub stats: Arc<ActorStats>,
}

type Waiter = RpcReplyPort<Result<Route, EngineError>>;

/// An org whose actor is stopping.
#[derive(Default)]
struct Retiring {
    /// Requests waiting for the successor.
    waiters: Vec<Waiter>,
    /// Start a successor even if nobody waits (the actor held leases).
    respawn: bool,
    /// The org goes to another node: no successor here.
    handed_over: bool,
}

pub struct SupervisorState {
    orgs_by_actor: HashMap<ActorId, OrgId>,
    retiring: HashMap<OrgId, Retiring>,
    recent_failures: RestartWindow,
    #[cfg(feature = "test-hooks")]
    crash_waiters: HashMap<OrgId, Vec<RpcReplyPort<()>>>,
    stopping: bool,
}

const RESTART_WINDOW: Duration = Duration::from_secs(10);
const MAX_EAGER_RESTARTS: u32 = 5;

/// Each org's recent failures. A failed actor is restarted at once up to
/// `MAX_EAGER_RESTARTS` times within `RESTART_WINDOW` of the first
/// failure; beyond that only when a request asks for it, so an org whose
/// actor keeps failing does not spin. A failure after the window starts
/// the count again.
#[derive(Default)]
struct RestartWindow(HashMap<OrgId, (Instant, u32)>);

impl RestartWindow {
    /// Counts a failure of `org` at `now`; answers whether to restart its
    /// actor at once.
    fn failed(&mut self, org: OrgId, now: Instant) -> bool {
        let entry = self.0.entry(org).or_insert((now, 0));
        if now.duration_since(entry.0) > RESTART_WINDOW {
            *entry = (now, 0);
        }
        entry.1 += 1;
        entry.1 <= MAX_EAGER_RESTARTS
    }
}

impl Supervisor {
    async fn spawn_org(
        &self,
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        org: OrgId,
    ) -> Result<Route, EngineError> {
        let supervisor = myself.clone();
        let actor = OrgActor {
            deps: self.deps.clone(),
            events: Arc::new(move |event| {
                let _ = supervisor.cast(SupervisorMsg::Org(event));
            }),
        };
        let fence = match &self.deps.cluster {
            None => None,
            Some(cluster) => match cluster.acquire(org).await {
                Ok(Some(fence)) => Some(fence),
                Ok(None) => return Err(cluster.refusal()),
                Err(e) => {
                    self.deps.health.observe(&e);
                    return Err(e.into());
                }
            },
        };
        let actor_ref = Actor::spawn_linked(None, actor, (org, fence), myself.get_cell())
            .await
            .map_err(|e| {
                tracing::warn!(org_id = %org, error = %e, "org actor failed to start");
                EngineError::ActorUnavailable
            });
        let actor_ref = match actor_ref {
            Ok((actor, _)) => actor,
            Err(e) => {
                self.release(org).await;
                return Err(e);
            }
        };
        self.stats.spawned.fetch_add(1, Ordering::Relaxed);
        tracing::info!(org_id = %org, "org actor spawned");
        state.orgs_by_actor.insert(actor_ref.get_id(), org);
        let route = Route {
            actor: actor_ref,
            in_flight: Arc::default(),
        };
        self.routes.insert(org, route.clone());
        Ok(route)
    }

    fn forget(&self, state: &mut SupervisorState, cell: &ActorCell) -> Option<OrgId> {
        let org = state.orgs_by_actor.remove(&cell.get_id())?;
        self.routes
            .remove_if(&org, |_, r| r.actor.get_id() == cell.get_id());
        Some(org)
    }

    /// Several nodes: gives up the org of an actor that stopped, marking it
    /// as needing an owner when something of it is due at a time (leases,
    /// waiting tasks, schedules). Nothing when this node no longer owns it.
    async fn release(&self, org: OrgId) {
        if let Some(cluster) = &self.deps.cluster {
            let needs_owner = self.deps.snapshots.needs_timer(org);
            cluster.release(org, needs_owner).await;
        }
    }

    /// Drains the org's actor, which asked to stop or whose org goes to
    /// another node; requests that arrive meanwhile wait for the outcome.
    fn retire(&self, state: &mut SupervisorState, org: OrgId, retiring: Retiring) -> bool {
        let Some(actor) = self.routes.get(&org).map(|r| r.actor.clone()) else {
            return false;
        };
        self.routes.remove(&org);
        state.retiring.insert(org, retiring);
        if actor.drain().is_err() {
            // Already gone; its termination event will follow.
            tracing::debug!(org_id = %org, "org actor already stopping");
        }
        true
    }

    /// Spawns a successor if anyone needs one and answers whoever waited.
    async fn succeed(
        &self,
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        org: OrgId,
        force: bool,
    ) {
        let retiring = state.retiring.remove(&org).unwrap_or_default();
        self.release(org).await;
        if retiring.handed_over {
            for w in retiring.waiters {
                let _ = w.send(Err(EngineError::OrgMoving));
            }
            return;
        }
        // While the store is down a successor could not load: it starts when
        // a request asks for it, or when the store returns (leases).
        let wanted = !retiring.waiters.is_empty()
            || ((force || retiring.respawn) && !self.deps.health.is_down());
        if state.stopping || !wanted {
            return;
        }
        let result = self.spawn_org(myself, state, org).await;
        for w in retiring.waiters {
            let _ = w.send(
                result
                    .as_ref()
                    .map(Clone::clone)
                    .map_err(|_| EngineError::ActorUnavailable),
            );
        }
    }

    async fn resolve(
        &self,
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        org: OrgId,
        stale: Option<ActorId>,
        reply: Waiter,
    ) {
        if state.stopping {
            let _ = reply.send(Err(EngineError::ActorUnavailable));
            return;
        }
        if let Some(retiring) = state.retiring.get_mut(&org) {
            retiring.waiters.push(reply);
            return;
        }
        match self.routes.get(&org).map(|r| r.clone()) {
            // The routed actor refused a message: it is stopping, and its
            // termination will start the successor this request waits for.
            Some(route) if stale == Some(route.actor.get_id()) => {
                state.retiring.entry(org).or_default().waiters.push(reply);
            }
            Some(route) => {
                let _ = reply.send(Ok(route));
            }
            None => {
                let _ = reply.send(self.spawn_org(myself, state, org).await);
            }
        }
    }
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<SupervisorMsg>,
        _: (),
    ) -> Result<SupervisorState, ActorProcessingErr> {
        Ok(SupervisorState {
            orgs_by_actor: HashMap::new(),
            retiring: HashMap::new(),
            recent_failures: RestartWindow::default(),
            #[cfg(feature = "test-hooks")]
            crash_waiters: HashMap::new(),
            stopping: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SupervisorMsg>,
        msg: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Resolve { org, stale, reply } => {
                self.resolve(&myself, state, org, stale, reply).await;
            }
            SupervisorMsg::Org(OrgEvent::Idle { org, actor }) => {
                if self
                    .routes
                    .get(&org)
                    .is_some_and(|r| r.actor.get_id() == actor)
                {
                    self.retire(state, org, Retiring::default());
                }
            }
            SupervisorMsg::HandOver(org) => {
                if !state.retiring.contains_key(&org) {
                    let handed_over = Retiring {
                        handed_over: true,
                        ..Retiring::default()
                    };
                    if self.retire(state, org, handed_over) {
                        tracing::info!(org_id = %org, "org handed over to its chosen node");
                    }
                }
            }
            SupervisorMsg::Lost(org) => {
                if let Some(route) = self.routes.get(&org).map(|r| r.clone()) {
                    tracing::warn!(org_id = %org, "org lost to another node; stopping its actor");
                    route.actor.kill();
                }
            }
            // Several nodes: the org was released as needing an owner, and
            // the node it should go to takes it (`adopt_orphans`).
            SupervisorMsg::Org(OrgEvent::StoppedNeedingTimer { .. })
                if self.deps.cluster.is_some() => {}
            SupervisorMsg::Org(OrgEvent::StoppedNeedingTimer { org }) => {
                if let Some(retiring) = state.retiring.get_mut(&org) {
                    retiring.respawn = true;
                } else if !self.routes.contains_key(&org)
                    && !state.stopping
                    && !self.deps.health.is_down()
                {
                    let _ = self.spawn_org(&myself, state, org).await;
                }
            }
            SupervisorMsg::WriteFailed(org) => {
                if let Some(route) = self.routes.get(&org).map(|r| r.clone()) {
                    tracing::warn!(org_id = %org, "killing org actor after a failed commit");
                    route.actor.kill();
                }
            }
            SupervisorMsg::StopAll(reply) => {
                state.stopping = true;
                let actors: Vec<ActorRef<OrgMsg>> =
                    self.routes.iter().map(|r| r.actor.clone()).collect();
                self.routes.clear();
                for a in &actors {
                    let _ = a.drain();
                }
                for a in &actors {
                    let _ = a.wait(Some(Duration::from_secs(10))).await;
                }
                // Each stopped actor's org is released now, so another node
                // serves it at once; their termination events may come
                // after the supervisor has stopped.
                let orgs: Vec<OrgId> = actors
                    .iter()
                    .filter_map(|a| state.orgs_by_actor.get(&a.get_id()).copied())
                    .collect();
                for org in orgs {
                    self.release(org).await;
                }
                let _ = reply.send(());
            }
            #[cfg(feature = "test-hooks")]
            SupervisorMsg::Crash(org, reply) => match self.routes.get(&org).map(|r| r.clone()) {
                Some(route) => {
                    state.crash_waiters.entry(org).or_default().push(reply);
                    let _ = route.actor.cast(OrgMsg::Crash);
                }
                None => {
                    let _ = reply.send(());
                }
            },
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                if let Some(org) = self.forget(state, &cell) {
                    self.stats.idle_stops.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(org_id = %org, reason = reason.as_deref().unwrap_or("drained"), "org actor stopped");
                    self.succeed(&myself, state, org, false).await;
                }
            }
            SupervisionEvent::ActorFailed(cell, error) => {
                let Some(org) = self.forget(state, &cell) else {
                    return Ok(());
                };
                self.stats.restarts.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .record_failure(org, &error.to_string(), self.deps.clock.now_ms());
                tracing::warn!(org_id = %org, error = %error, "org actor failed; restarting");
                let eager = state.recent_failures.failed(org, Instant::now());
                self.succeed(&myself, state, org, eager).await;
                if self.routes.contains_key(&org) {
                    tracing::info!(org_id = %org, "org actor restarted");
                }
                #[cfg(feature = "test-hooks")]
                for w in state.crash_waiters.remove(&org).unwrap_or_default() {
                    let _ = w.send(());
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_loop_stops_restarting_until_its_window_has_passed() {
        let mut window = RestartWindow::default();
        let (org, other) = (OrgId::new_v7(), OrgId::new_v7());
        let start = Instant::now();
        for i in 0..MAX_EAGER_RESTARTS {
            let at = start + Duration::from_secs(u64::from(i));
            assert!(window.failed(org, at), "failure {i} restarts at once");
        }
        let last = start + Duration::from_secs(9);
        assert!(!window.failed(org, last), "the sixth in the window waits");
        assert!(!window.failed(org, start + RESTART_WINDOW));
        // Another org's failures are its own.
        assert!(window.failed(other, last));
        // Past the window from the first failure, the count starts again.
        let later = start + RESTART_WINDOW + Duration::from_millis(1);
        for _ in 0..MAX_EAGER_RESTARTS {
            assert!(window.failed(org, later));
        }
        assert!(!window.failed(org, later));
    }
}
