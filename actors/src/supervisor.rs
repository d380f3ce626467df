//! The supervisor: spawns an org actor on the first request for its org,
//! retires it after it has been idle, and restarts it when it fails.
//!
//! It keeps its own routing table (shared read-only with the engine as the
//! fast path) rather than ractor's process-global registry. An idle actor is
//! drained, not killed: messages already in its mailbox are served, later
//! sends are refused and the engine asks here again; requests for an org
//! whose actor is draining wait until it has stopped, so two actors never
//! own one org at the same time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};

use crate::domain::OrgId;
use crate::error::EngineError;
use crate::org::{OrgActor, OrgDeps, OrgMsg};

pub type Routes = Arc<DashMap<OrgId, ActorRef<OrgMsg>>>;

#[derive(Debug)]
pub enum SupervisorMsg {
    /// The org's live actor, spawning it if needed.
    Resolve(OrgId, RpcReplyPort<Result<ActorRef<OrgMsg>, EngineError>>),
    /// An org actor reports it has been idle long enough to stop.
    Idle(OrgId, ActorId),
    /// An org actor stopped while holding leases: its org needs an actor so
    /// they expire on time.
    Wake(OrgId),
    /// A commit of this org failed: its actor's memory is ahead of the store.
    WriteFailed(OrgId),
    /// Drains every org actor (shutdown).
    StopAll(RpcReplyPort<()>),
    /// Test hook: crash the org's actor and answer once it has restarted.
    #[cfg(feature = "test-hooks")]
    Crash(OrgId, RpcReplyPort<()>),
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct ActorStats {
    pub spawned: AtomicU64,
    pub restarts: AtomicU64,
    pub idle_stops: AtomicU64,
}

pub struct Supervisor {
    pub deps: OrgDeps,
    pub routes: Routes,
    pub stats: Arc<ActorStats>,
}

type Waiter = RpcReplyPort<Result<ActorRef<OrgMsg>, EngineError>>;

/// An org whose actor is draining.
#[derive(Default)]
struct Retiring {
    /// Requests waiting for the successor.
    waiters: Vec<Waiter>,
    /// Start a successor even if nobody waits (the actor held leases).
    respawn: bool,
}

pub struct SupervisorState {
    orgs_by_actor: HashMap<ActorId, OrgId>,
    retiring: HashMap<OrgId, Retiring>,
    recent_failures: HashMap<OrgId, (Instant, u32)>,
    #[cfg(feature = "test-hooks")]
    crash_waiters: HashMap<OrgId, Vec<RpcReplyPort<()>>>,
    stopping: bool,
}

const RESTART_WINDOW: Duration = Duration::from_secs(10);
const MAX_EAGER_RESTARTS: u32 = 5;

impl Supervisor {
    async fn spawn_org(
        &self,
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        org: OrgId,
    ) -> Result<ActorRef<OrgMsg>, EngineError> {
        let actor = OrgActor {
            deps: self.deps.clone(),
            supervisor: myself.clone(),
        };
        let (actor_ref, _) = Actor::spawn_linked(None, actor, org, myself.get_cell())
            .await
            .map_err(|e| {
                tracing::warn!(org_id = %org, error = %e, "org actor failed to start");
                EngineError::ActorUnavailable
            })?;
        self.stats.spawned.fetch_add(1, Ordering::Relaxed);
        tracing::info!(org_id = %org, "org actor spawned");
        state.orgs_by_actor.insert(actor_ref.get_id(), org);
        self.routes.insert(org, actor_ref.clone());
        Ok(actor_ref)
    }

    fn forget(&self, state: &mut SupervisorState, cell: &ActorCell) -> Option<OrgId> {
        let org = state.orgs_by_actor.remove(&cell.get_id())?;
        self.routes
            .remove_if(&org, |_, r| r.get_id() == cell.get_id());
        Some(org)
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
        if state.stopping || !(force || retiring.respawn || !retiring.waiters.is_empty()) {
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
            recent_failures: HashMap::new(),
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
            SupervisorMsg::Resolve(org, reply) => {
                if state.stopping {
                    let _ = reply.send(Err(EngineError::ActorUnavailable));
                } else if let Some(retiring) = state.retiring.get_mut(&org) {
                    retiring.waiters.push(reply);
                } else {
                    let live = self.routes.get(&org).map(|r| r.clone()).filter(|r| {
                        matches!(
                            r.get_status(),
                            ractor::ActorStatus::Running | ractor::ActorStatus::Starting
                        )
                    });
                    let result = match live {
                        Some(r) => Ok(r),
                        None => self.spawn_org(&myself, state, org).await,
                    };
                    let _ = reply.send(result);
                }
            }
            SupervisorMsg::Idle(org, actor_id) => {
                let current = self.routes.get(&org).map(|r| r.clone());
                if let Some(actor) = current.filter(|r| r.get_id() == actor_id) {
                    self.routes.remove(&org);
                    state.retiring.insert(org, Retiring::default());
                    if actor.drain().is_err() {
                        // Already gone; its termination event will follow.
                        tracing::debug!(org_id = %org, "idle org actor already stopping");
                    }
                }
            }
            SupervisorMsg::Wake(org) => {
                if let Some(retiring) = state.retiring.get_mut(&org) {
                    retiring.respawn = true;
                } else if !self.routes.contains_key(&org) && !state.stopping {
                    let _ = self.spawn_org(&myself, state, org).await;
                }
            }
            SupervisorMsg::WriteFailed(org) => {
                if let Some(actor) = self.routes.get(&org).map(|r| r.clone()) {
                    tracing::warn!(org_id = %org, "killing org actor after a failed commit");
                    actor.kill();
                }
            }
            SupervisorMsg::StopAll(reply) => {
                state.stopping = true;
                let actors: Vec<ActorRef<OrgMsg>> = self.routes.iter().map(|r| r.clone()).collect();
                self.routes.clear();
                for a in &actors {
                    let _ = a.drain();
                }
                for a in &actors {
                    let _ = a.wait(Some(Duration::from_secs(10))).await;
                }
                let _ = reply.send(());
            }
            #[cfg(feature = "test-hooks")]
            SupervisorMsg::Crash(org, reply) => match self.routes.get(&org).map(|r| r.clone()) {
                Some(actor) => {
                    state.crash_waiters.entry(org).or_default().push(reply);
                    let _ = actor.cast(OrgMsg::Crash);
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
                tracing::warn!(org_id = %org, error = %error, "org actor failed; restarting");
                let now = Instant::now();
                let entry = state.recent_failures.entry(org).or_insert((now, 0));
                if now.duration_since(entry.0) > RESTART_WINDOW {
                    *entry = (now, 0);
                }
                entry.1 += 1;
                let eager = entry.1 <= MAX_EAGER_RESTARTS;
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
