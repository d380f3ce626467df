//! `Engine`: the handle the HTTP and MCP front ends (and the planner) call.
//!
//! A cheap `Clone`. Each method takes typed requests from `crate::api` and
//! answers typed values. It authenticates nothing and trusts its `Caller`
//! (the front end got it from `authenticate`); it sends one message to the
//! org's actor, which admits, checks and applies the request in one turn,
//! then waits for what the actor wrote to commit before it answers. Reads
//! that need content go straight to the store: an acknowledged write is
//! committed, so a later read sees it, and the actors' mailboxes stay free
//! for writes.
//!
//! Nothing queues without bound: each org accepts a fixed number of
//! requests in flight, and the writers and the reader have bounded queues;
//! beyond that a request is refused as `Overloaded` with nothing applied.

mod admin;
mod auth;
mod board;
mod cluster;
mod deletion;
mod deliveries;
mod export;
mod feedback;
mod keys;
mod lifecycle;
mod meaning;
mod org_admin;
mod peers;
mod reports;
mod retention;
mod schedules;
mod sizes;
mod stats;
mod tasks;
mod watch;
mod webhooks;
mod wraps;
mod writer_load;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dashmap::DashMap;
use ractor::rpc::CallResult;
use ractor::{ActorId, ActorRef};

pub use admin::{parse_org_id, OPERATOR_SESSION};
pub use board::BOARD_SESSION;
pub use feedback::{FEEDBACK_ORG_NAME, MEMBER_STRIKE_LIMIT, ORG_STRIKE_LIMIT};
pub use lifecycle::EngineConfig;
pub use peers::{Peer, PeerAnswer, PeerCall, PeerOp, Peers};

use crate::api::ValidationError;
use crate::clock::Clock;
use crate::crypto::CursorSigner;
use crate::directory::OrgDirectory;
use crate::domain::account::{Caller, LimitKey};
use crate::domain::usage::RequestKind;
use crate::domain::OrgId;
use crate::error::EngineError;
use crate::filter::ContentFilter;
use crate::health::StoreHealth;
use crate::meaning::Meaning;
use crate::org::{ContentBudget, OrgMsg, Outcome, Reply};
use crate::reader::TaskReader;
use crate::reports::actor::ReportsRef;
use crate::reports::compute::Reporter;
use crate::stats::{OrgSnapshots, Refusals};
use crate::store::{Store, StoreError};
use crate::supervisor::{ActorStats, Route, Routes, SupervisorMsg};
use crate::writer::{Commit, Writers};
use auth::AuthCache;

pub use crate::store::StoreOptions;

#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    /// The org actors' shared budget for claimed tasks' content.
    content_budget: Arc<ContentBudget>,
    /// Whether the store answers; requests are refused while it does not.
    health: Arc<StoreHealth>,
    writers: Writers,
    /// The orgs' live event streams, which the writers feed.
    hub: Arc<crate::watch::EventHub>,
    /// The boards' coalesced notices, one feed per org with a board open.
    board_feeds: Arc<crate::watch::BoardFeeds>,
    /// What a board notice reads of its org (the change mark, the counts).
    board_state: crate::watch::OrgState,
    /// The embedding worker and the store watcher, aborted at shutdown.
    background_tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The webhook delivery worker's pool, once it runs.
    deliveries: OnceLock<Arc<deliveries::DeliveryPool>>,
    directory: Arc<OrgDirectory>,
    supervisor: ActorRef<SupervisorMsg>,
    /// Read-only here: only the supervisor writes it.
    routes: Routes,
    stats: Arc<ActorStats>,
    /// Each org's open tasks and leases, published by its actor.
    snapshots: Arc<OrgSnapshots>,
    refusals: Refusals,
    /// Set when the server begins to stop: claims no longer wait.
    draining: Arc<std::sync::atomic::AtomicBool>,
    clock: Arc<dyn Clock>,
    cursors: CursorSigner,
    /// Authenticated keys, so a request costs no store read.
    keys: AuthCache,
    call_timeout: Duration,
    org_in_flight: usize,
    feedback_filter: Arc<dyn ContentFilter>,
    /// Grouped reads of claimed tasks.
    reader: TaskReader,
    /// Task vectors; `None` without an embedder.
    meaning: Option<Arc<Meaning>>,
    create_budget: Duration,
    /// Computes and reads reports; the reports actor calls it on schedule.
    reporter: Arc<Reporter>,
    /// The live reports actor (its keeper replaces it if it fails).
    reports: ReportsRef,
    reports_keeper: ActorRef<()>,
    /// The feedback org and the system caller that files feedback there,
    /// settled once at start.
    feedback: OnceLock<(OrgId, Caller)>,
    /// Wraps by the master key in flight, which a rotation waits for.
    wraps: wraps::Wraps,
    /// Webhook URLs may lead to any address (tests, private networks).
    webhooks_allow_private: bool,
    new_org_limits: crate::domain::usage::NewOrgLimits,
    /// This node's place among several on one PostgreSQL.
    cluster: Option<Arc<crate::cluster::Cluster>>,
    /// The heartbeat's thread and what acts on it (several nodes).
    heartbeat: std::sync::Mutex<Option<cluster::Heartbeat>>,
    /// How this node reaches the others (several nodes).
    peers: OnceLock<Arc<dyn peers::Peers>>,
    /// Each key's org, for routing a request to the org's node (a key
    /// never changes org).
    key_orgs: DashMap<crate::domain::KeyId, OrgId>,
    /// What the store holds of each org, as last counted.
    sizes: sizes::StoredSizes,
    /// The SQLite file this server holds, so that no second server opens
    /// it (`None` on PostgreSQL).
    db_file: std::sync::Mutex<Option<std::fs::File>>,
    /// This node's id, URL and start, for `GET /admin/cluster` on a node
    /// alone.
    local_node: Arc<(String, String, i64)>,
    #[cfg(feature = "test-hooks")]
    rewrap_pause_after: Option<u64>,
    #[cfg(feature = "test-hooks")]
    removal_hold: deletion::RemovalHold,
}

/// One request counted against its org's bound until it is dropped.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Engine {
    pub fn backend(&self) -> &'static str {
        self.inner.store.backend()
    }

    pub fn actors_alive(&self) -> usize {
        self.inner.routes.len()
    }

    pub fn actor_stats(&self) -> &ActorStats {
        &self.inner.stats
    }

    /// Pending tasks per org, as last published by each org's actor.
    pub fn queue_depths(&self) -> Vec<(OrgId, usize)> {
        self.inner.snapshots.queue_depths()
    }

    /// What the writers committed since the server started.
    pub fn writer_totals(&self) -> crate::stats::WriterTotals {
        self.inner.writers.stats().totals()
    }

    /// The created tasks' content kept for first claims, and how claims
    /// were answered.
    pub fn claim_cache(&self) -> crate::api::ClaimCacheFigures {
        self.inner.content_budget.figures()
    }

    /// Claims waiting for a task (long polls), over all orgs.
    pub fn claim_waiters(&self) -> usize {
        self.inner.snapshots.waiting_claims()
    }

    /// Waits for tasks to finish (`POST /tasks/wait`), over all orgs.
    pub fn task_waits(&self) -> usize {
        self.inner.snapshots.task_waits()
    }

    /// Whether the store is marked unavailable.
    pub fn store_down(&self) -> bool {
        self.inner.health.is_down()
    }

    /// Starts an actor for every org with something due at a time (a lease,
    /// a waiting task, a schedule), so it happens on time (at start, and
    /// when the store returns after an outage); with
    /// several nodes, for those no live node owns. An org
    /// whose actor cannot start (its data key does not open) is logged and
    /// passed over: it must not keep the other orgs' leases from expiring,
    /// nor the server from starting. Its own requests answer the error.
    async fn wake_orgs_needing_timers(&self) -> Result<(), EngineError> {
        for org in self.inner.store.orgs_needing_timers().await? {
            match self.resolve(org, None).await {
                // Several nodes: a live node owns it, and expires them.
                Ok(_) | Err(EngineError::OrgMoving) => {}
                Err(e @ (EngineError::ActorUnavailable | EngineError::Timeout)) => {
                    // The actor's failure to load is only logged where it
                    // happens; an org that does not open says why here too.
                    let cause = match self.inner.directory.get(org).await {
                        Err(why) => why.to_string(),
                        Ok(_) => e.to_string(),
                    };
                    tracing::error!(
                        org_id = %org,
                        error = %cause,
                        "an org holding leases did not start; its leases expire once it loads"
                    );
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// While the store is marked down, probes it until it answers, then
    /// marks it up and wakes the orgs holding leases. Runs for the engine's
    /// life.
    async fn watch_store(self) {
        const PROBE_EVERY: Duration = Duration::from_millis(250);
        loop {
            self.inner.health.wait_down().await;
            loop {
                tokio::time::sleep(PROBE_EVERY).await;
                if self.inner.health.outage_simulated() {
                    continue;
                }
                if self.inner.store.ping().await.is_ok() {
                    break;
                }
            }
            self.inner.health.mark_up();
            if let Err(e) = self.wake_orgs_needing_timers().await {
                tracing::warn!(error = %e, "waking the orgs with leases after the outage");
            }
        }
    }

    /// Refuses a request at once while the store is down.
    fn check_store(&self) -> Result<(), EngineError> {
        if self.inner.health.is_down() {
            return Err(EngineError::StoreUnavailable);
        }
        Ok(())
    }

    /// A store result as the engine's; an unavailable store is marked down.
    /// A write refused because its org is reloading says why when the
    /// reload is the store's outage.
    fn stored<T>(&self, result: Result<T, StoreError>) -> Result<T, EngineError> {
        result.map_err(|e| {
            self.inner.health.observe(&e);
            match EngineError::from(e) {
                EngineError::ActorUnavailable if self.inner.health.is_down() => {
                    EngineError::StoreUnavailable
                }
                other => other,
            }
        })
    }

    /// Batches waiting for a writer.
    pub fn writes_queued(&self) -> usize {
        self.inner.writers.queued()
    }

    /// The org's live actor, from the supervisor. `stale` names an actor
    /// that refused a message.
    async fn resolve(&self, org: OrgId, stale: Option<ActorId>) -> Result<Route, EngineError> {
        match self
            .inner
            .supervisor
            .call(
                |reply| SupervisorMsg::Resolve { org, stale, reply },
                Some(self.inner.call_timeout),
            )
            .await
        {
            Ok(CallResult::Success(result)) => result,
            Ok(CallResult::Timeout) => Err(EngineError::Timeout),
            _ => Err(EngineError::ActorUnavailable),
        }
    }

    /// Sends one message to the org's actor and returns its outcome, with
    /// the request counted in flight until the guard drops. A send refused
    /// because the actor is stopping is retried on its successor; the
    /// message was never taken, so the retry cannot apply it twice.
    async fn ask<T: Send + 'static>(
        &self,
        org: OrgId,
        message: impl Fn(Reply<T>) -> OrgMsg,
    ) -> Result<(Outcome<T>, InFlight), EngineError> {
        self.ask_within(org, Duration::ZERO, message).await
    }

    /// `ask`, for a message the actor may hold up to `wait` on purpose (a
    /// long-poll claim) before it answers.
    async fn ask_within<T: Send + 'static>(
        &self,
        org: OrgId,
        wait: Duration,
        message: impl Fn(Reply<T>) -> OrgMsg,
    ) -> Result<(Outcome<T>, InFlight), EngineError> {
        let mut stale = None;
        for _ in 0..5 {
            self.check_store()?;
            let route = match (stale, self.inner.routes.get(&org).map(|r| r.clone())) {
                (None, Some(route)) => route,
                _ => self.resolve(org, stale).await?,
            };
            // Several nodes: an actor acts only while its node owns the org
            // and trusts its own heartbeat.
            if let Some(cluster) = &self.inner.cluster {
                if !cluster.serves(org) {
                    return Err(cluster.refusal());
                }
            }
            if route.in_flight.fetch_add(1, Ordering::Relaxed) >= self.inner.org_in_flight {
                route.in_flight.fetch_sub(1, Ordering::Relaxed);
                return Err(EngineError::Overloaded);
            }
            let guard = InFlight(route.in_flight.clone());
            match route
                .actor
                .call(&message, Some(self.inner.call_timeout + wait))
                .await
            {
                Ok(CallResult::Success(outcome)) => {
                    if let Err(EngineError::Limit(_)) = &outcome.result {
                        self.inner.refusals.count(org);
                    }
                    return Ok((outcome, guard));
                }
                Ok(CallResult::Timeout) => return Err(EngineError::Timeout),
                Ok(CallResult::SenderError) => {
                    // The actor stopped before it answered: in an outage,
                    // because it could not load.
                    self.check_store()?;
                    return Err(EngineError::ActorUnavailable);
                }
                Err(_) => {
                    stale = Some(route.actor.get_id());
                    tokio::task::yield_now().await;
                }
            }
        }
        self.check_store()?;
        Err(EngineError::ActorUnavailable)
    }

    /// Sends one request to the org's actor, waits for what it wrote to
    /// commit, and answers its result: the path of every write.
    async fn request<T: Send + 'static>(
        &self,
        org: OrgId,
        message: impl Fn(Reply<T>) -> OrgMsg,
    ) -> Result<T, EngineError> {
        let (outcome, _in_flight) = self.ask(org, message).await?;
        self.committed(outcome.commit).await?;
        outcome.result
    }

    fn now(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// Admits a read answered without asking the org's actor (a board page
    /// shared with another board of the org): counted as the read it
    /// stands for.
    pub async fn admit_read(&self, caller: &Caller) -> Result<(), EngineError> {
        self.admit(caller, RequestKind::Read).await
    }

    /// Admits a request the store serves (get, keys): counts it
    /// against the org's limits, or refuses it. An org whose limits do not
    /// apply skips the round trip.
    async fn admit(&self, caller: &Caller, kind: RequestKind) -> Result<(), EngineError> {
        let entry = self.inner.directory.get(caller.org_id).await?;
        if entry.limit(kind.limit_key()).is_none()
            && entry.limit(LimitKey::RequestsPerMonth).is_none()
        {
            return Ok(());
        }
        self.request(caller.org_id, |reply| OrgMsg::Admit { kind, reply })
            .await
    }

    /// The answer to a request of type `R` that did not decode. The plan
    /// gate of its route answers first; then it counts against the org's
    /// limits like any other request, so a flood of bad requests is limited
    /// too, and a spent limit answers before the validation error.
    /// Like [`Engine::reject`], for an operation that counts as `kind` and
    /// belongs to the paid feature `paid_feature`, if any.
    pub async fn reject_as(
        &self,
        caller: &Caller,
        kind: RequestKind,
        paid_feature: Option<&str>,
        error: ValidationError,
    ) -> EngineError {
        if let Some(feature) = paid_feature {
            if let Err(e) = self.require_paid_plan(caller, feature).await {
                return e;
            }
        }
        match self.admit(caller, kind).await {
            Ok(()) => EngineError::Invalid(error),
            Err(refused) => refused,
        }
    }

    /// Refuses a feature of the paid plans to a free org.
    async fn require_paid_plan(&self, caller: &Caller, feature: &str) -> Result<(), EngineError> {
        let entry = self.inner.directory.get(caller.org_id).await?;
        Ok(entry.record.require_paid_plan(feature)?)
    }

    /// Charges one call against the org's monthly plan allowance, for the
    /// planner; answers the plans left this month (`None`: unlimited).
    pub async fn charge_plan_allowance(&self, caller: &Caller) -> Result<Option<i64>, EngineError> {
        self.request(caller.org_id, |reply| OrgMsg::ChargePlan { reply })
            .await
    }
}

impl Engine {
    /// Waits until what an actor submitted is durable.
    async fn committed(&self, commit: Option<Commit>) -> Result<(), EngineError> {
        match commit {
            None => Ok(()),
            Some(commit) => match commit.await {
                Ok(result) => self.stored(result),
                Err(_) => Err(EngineError::Store(StoreError::WriterGone)),
            },
        }
    }
}
