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
mod cluster;
mod feedback;
mod keys;
mod meaning;
mod org_admin;
mod peers;
mod reports;
mod stats;
mod tasks;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dashmap::DashMap;
use ractor::rpc::CallResult;
use ractor::{Actor, ActorId, ActorRef};

pub use admin::{parse_org_id, OPERATOR_SESSION};
pub use feedback::{FEEDBACK_ORG_NAME, MEMBER_STRIKE_LIMIT, ORG_STRIKE_LIMIT};
pub use peers::{PeerAnswer, PeerCall, PeerOp, Peers};

use crate::api::ValidationError;
use crate::clock::{Clock, SystemClock};
use crate::crypto::{CursorSigner, Keyring, MasterKey};
use crate::directory::OrgDirectory;
use crate::domain::account::{Caller, LimitKey};
use crate::domain::usage::RequestKind;
use crate::domain::OrgId;
use crate::embed::Embedder;
use crate::error::EngineError;
use crate::filter::{ContentFilter, TermFilter};
use crate::health::StoreHealth;
use crate::llm::ChatModel;
use crate::meaning::Meaning;
use crate::org::{ContentBudget, OrgDeps, OrgMsg, Outcome, Reply};
use crate::reader::TaskReader;
use crate::reports::actor::{ReportsKeeper, ReportsRef};
use crate::reports::compute::Reporter;
use crate::stats::{OrgSnapshots, Refusals};
use crate::store::{Store, StoreError};
use crate::supervisor::{ActorStats, Route, Routes, Supervisor, SupervisorMsg};
use crate::writer::{Commit, Writers};
use auth::AuthCache;

pub use crate::store::StoreOptions;

pub struct EngineConfig {
    pub database_url: String,
    /// The master keys: the current one makes every new data-key wrap, the
    /// previous ones still open wraps made before a rotation finished.
    pub keyring: Keyring,
    /// An org actor idle this long is stopped.
    pub idle_after: Duration,
    pub store: StoreOptions,
    pub clock: Arc<dyn Clock>,
    /// How long a request waits for its org actor.
    pub call_timeout: Duration,
    /// Judges feedback messages.
    pub feedback_filter: Arc<dyn ContentFilter>,
    /// Turns task text into vectors for search, near-duplicates and prior
    /// art; `None`: managed orgs read as not configured.
    pub embedder: Option<Arc<dyn Embedder>>,
    /// The longest a create waits for its tasks' vectors, to answer with
    /// near-duplicates and suggested tags.
    pub create_budget: Duration,
    /// The language model of the planner and the report writers; `None`:
    /// the planner answers `not_enabled`, reports use their templates.
    pub chat: Option<Arc<dyn ChatModel>>,
    /// Whether reports are computed on their schedule (besides the
    /// operator's recompute).
    pub report_schedule: bool,
    /// The org receiving feedback; `None`: the `taskq-feedback` org.
    pub feedback_org: Option<OrgId>,
    /// Requests one org may have in flight; more are refused as overloaded.
    pub org_in_flight: usize,
    /// Batches a writer lane queues before refusing more.
    pub writer_queue: usize,
    /// Reads the grouped reader queues before senders wait.
    pub reader_queue: usize,
    /// Bytes of task content the org actors keep, all orgs together, so
    /// that claims answer without a store read.
    pub claim_cache_bytes: usize,
    /// Several nodes on one PostgreSQL: this node's advertise URL and
    /// lease timing. `None`: a node alone (SQLite always is).
    pub cluster: Option<crate::cluster::ClusterConfig>,
    /// Test hook: a master-key rotation stops for good after moving this
    /// many wraps, so a test can kill the process in the middle.
    #[cfg(feature = "test-hooks")]
    pub rewrap_pause_after: Option<u64>,
}

impl EngineConfig {
    /// A configuration with one master key.
    pub fn new(database_url: impl Into<String>, master_key: MasterKey) -> Self {
        Self::with_keyring(database_url, Keyring::new(master_key, Vec::new()))
    }

    pub fn with_keyring(database_url: impl Into<String>, keyring: Keyring) -> Self {
        Self {
            database_url: database_url.into(),
            keyring,
            idle_after: Duration::from_secs(60),
            store: StoreOptions::default(),
            clock: Arc::new(SystemClock),
            call_timeout: Duration::from_secs(30),
            feedback_filter: Arc::new(TermFilter::builtin([])),
            embedder: None,
            create_budget: Duration::from_millis(250),
            chat: None,
            report_schedule: true,
            feedback_org: None,
            org_in_flight: 1024,
            writer_queue: 4096,
            reader_queue: 4096,
            claim_cache_bytes: 64 << 20,
            cluster: None,
            #[cfg(feature = "test-hooks")]
            rewrap_pause_after: None,
        }
    }
}

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
    /// The embedding worker and the store watcher, aborted at shutdown.
    background_tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
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
    /// Held shared while an org's data key is wrapped and stored, and
    /// exclusively while the keyring changes.
    wrap_gate: tokio::sync::RwLock<()>,
    /// This node's place among several on one PostgreSQL.
    cluster: Option<Arc<crate::cluster::Cluster>>,
    /// The heartbeat's thread and what acts on it (several nodes).
    placement: std::sync::Mutex<Option<cluster::Placement>>,
    /// How this node reaches the others (several nodes).
    peers: OnceLock<Arc<dyn peers::Peers>>,
    /// Each key's org, for routing a request to the org's node (a key
    /// never changes org).
    key_orgs: DashMap<crate::domain::KeyId, OrgId>,
    /// The SQLite file this server holds, so that no second server opens
    /// it (`None` on PostgreSQL).
    db_file: std::sync::Mutex<Option<std::fs::File>>,
    /// This node's id, URL and start, for `GET /admin/cluster` on a node
    /// alone.
    local_node: Arc<(String, String, i64)>,
    #[cfg(feature = "test-hooks")]
    rewrap_pause_after: Option<u64>,
}

/// One request counted against its org's bound until it is dropped.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Refuses to start on a database none of whose managed orgs' data keys
/// this server can open: a wrong `TASKQ_MASTER_KEY` or data directory,
/// which would otherwise surface as one org's failure to load. When only
/// some wraps name a key it lacks (a previous key dropped too early), it
/// starts, says so, and those orgs answer 500 until the key is supplied.
async fn check_master_keys(store: &Store, keyring: &Keyring) -> Result<(), EngineError> {
    let wraps = store.wrapping_master_keys().await?;
    let missing: Vec<&(String, i64)> = wraps.iter().filter(|(id, _)| !keyring.holds(id)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    if missing.len() == wraps.len() {
        let ids: Vec<&str> = missing.iter().map(|(id, _)| id.as_str()).collect();
        return Err(EngineError::Internal(format!(
            "the database's data keys are wrapped by master key {}, which this server does \
             not hold: start it with the master key the database was written with",
            ids.join(", ")
        )));
    }
    for (id, orgs) in missing {
        tracing::warn!(
            master_key_id = %id,
            orgs,
            "data keys are wrapped by a master key this server does not hold: those orgs \
             answer 500 until it is supplied (TASKQ_MASTER_KEY_PREVIOUS)"
        );
    }
    Ok(())
}

impl Engine {
    /// Connects the store (running migrations), starts the writers and the
    /// supervisor, and wakes the actors of orgs holding leases so those
    /// expire on time.
    pub async fn start(config: EngineConfig) -> Result<Self, EngineError> {
        let db_file = crate::store::hold_sqlite_file(&config.database_url)?;
        let store = Store::connect(&config.database_url, &config.store).await?;
        check_master_keys(&store, &config.keyring).await?;
        let started_at = config.clock.now_ms();
        let mut keyring = config.keyring;
        let cluster = match (&config.cluster, store.backend()) {
            (Some(c), "postgres") => {
                let cluster =
                    crate::cluster::Cluster::join(store.clone(), c.clone(), started_at, &keyring)
                        .await?;
                // Every node wraps with the cluster's key (the first node's,
                // then each rotation's), whichever of its keys is current:
                // a node restarted with the next key wraps with the old one
                // until a rotation moves them all.
                let key = store
                    .adopt_cluster_master_key(keyring.current().id())
                    .await?;
                if let Some(ring) = keyring.with_current(&key) {
                    keyring = ring;
                    cluster.hold_keys(&keyring);
                } else if !keyring.holds(&key) {
                    return Err(EngineError::Internal(format!(
                        "the cluster wraps data keys with master key {key}, which this node \
                         does not hold: start it with that key"
                    )));
                }
                Some(Arc::new(cluster))
            }
            _ => None,
        };
        // A failed commit asks the supervisor to restart the org's actor;
        // the writers start first, so the hook finds the supervisor here.
        let supervisor_cell: Arc<OnceLock<ActorRef<SupervisorMsg>>> = Arc::default();
        let on_failure = {
            let cell = supervisor_cell.clone();
            Arc::new(move |org| {
                if let Some(supervisor) = cell.get() {
                    let _ = supervisor.cast(SupervisorMsg::WriteFailed(org));
                }
            })
        };
        let health = Arc::new(StoreHealth::default());
        let mut background_tasks = Vec::new();
        let writers = Writers::start(
            store.clone(),
            config.store.sqlite_writer_nice,
            store.writer_count(config.store.pg_writers),
            health.clone(),
            config.writer_queue,
            on_failure,
        );
        let directory = Arc::new(OrgDirectory::new(store.clone(), keyring));
        let routes: Routes = Arc::new(DashMap::new());
        let stats = Arc::new(ActorStats::default());
        let snapshots = Arc::new(OrgSnapshots::default());
        let draining = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let content_budget = ContentBudget::new(config.claim_cache_bytes);
        let deps = OrgDeps {
            snapshots: snapshots.clone(),
            draining: draining.clone(),
            store: store.clone(),
            health: health.clone(),
            writers: writers.clone(),
            directory: directory.clone(),
            clock: config.clock.clone(),
            idle_after: config.idle_after,
            content_budget: content_budget.clone(),
            cluster: cluster.clone(),
        };
        let meaning = config
            .embedder
            .map(|e| Arc::new(Meaning::new(e, store.clone(), directory.clone())));
        if let Some(m) = &meaning {
            background_tasks.push(m.start());
        }
        let (supervisor, _) = Actor::spawn(
            None,
            Supervisor {
                deps,
                routes: routes.clone(),
                stats: stats.clone(),
            },
            (),
        )
        .await
        .map_err(|e| EngineError::Internal(format!("supervisor failed to start: {e}")))?;
        let _ = supervisor_cell.set(supervisor.clone());
        let reporter = Arc::new(
            Reporter::start(
                store.clone(),
                &config.database_url,
                &config.store,
                directory.clone(),
                meaning.clone(),
                config.chat,
                config.clock.clone(),
            )
            .await?,
        );
        let reports: ReportsRef = Arc::default();
        let (reports_keeper, _) = Actor::spawn(
            None,
            ReportsKeeper {
                reporter: reporter.clone(),
                scheduled: config.report_schedule,
                current: reports.clone(),
            },
            (),
        )
        .await
        .map_err(|e| EngineError::Internal(format!("the reports actor failed to start: {e}")))?;
        let cursors = CursorSigner::derived(&directory.keyring(), store.schema_version());
        let engine = Engine {
            inner: Arc::new(Inner {
                content_budget,
                health,
                reader: TaskReader::start(store.clone(), config.reader_queue),
                meaning: meaning.clone(),
                create_budget: config.create_budget,
                reporter,
                reports,
                reports_keeper,
                store,
                writers,
                background_tasks: std::sync::Mutex::new(Vec::new()),
                directory,
                supervisor,
                routes,
                stats,
                snapshots,
                refusals: Refusals::default(),
                draining,
                clock: config.clock,
                cursors,
                keys: AuthCache::default(),
                call_timeout: config.call_timeout,
                org_in_flight: config.org_in_flight.max(1),
                feedback_filter: config.feedback_filter,
                feedback: OnceLock::new(),
                wrap_gate: tokio::sync::RwLock::new(()),
                local_node: Arc::new((
                    cluster.as_ref().map_or_else(
                        || uuid::Uuid::now_v7().to_string(),
                        |c| c.node_id().to_owned(),
                    ),
                    config
                        .cluster
                        .as_ref()
                        .map(|c| c.advertise_url.clone())
                        .unwrap_or_default(),
                    started_at,
                )),
                cluster,
                db_file: std::sync::Mutex::new(db_file),
                key_orgs: DashMap::new(),
                peers: OnceLock::new(),
                placement: std::sync::Mutex::new(None),
                #[cfg(feature = "test-hooks")]
                rewrap_pause_after: config.rewrap_pause_after,
            }),
        };
        if let Some(cluster) = &engine.inner.cluster {
            let _ = engine.inner.reporter.cluster.set(cluster.clone());
            // A weak handle: the cluster lives inside the engine.
            let weak = Arc::downgrade(&engine.inner);
            cluster.on_forget(move |org| {
                if let Some(inner) = weak.upgrade() {
                    Engine { inner }.forget_org(org);
                }
            });
        }
        let feedback = engine.prepare_feedback_org(config.feedback_org).await?;
        let _ = engine.inner.feedback.set(feedback);
        engine.wake_orgs_with_leases().await?;
        background_tasks.push(tokio::spawn(engine.clone().watch_store()));
        *engine.inner.placement.lock().expect("not poisoned") = engine.start_placement();
        *engine.inner.background_tasks.lock().expect("not poisoned") = background_tasks;
        Ok(engine)
    }

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

    /// Whether the store is marked unavailable.
    pub fn store_down(&self) -> bool {
        self.inner.health.is_down()
    }

    /// Starts an actor for every org holding a lease, so its leases expire on
    /// time (at start, and when the store returns after an outage); with
    /// several nodes, for those no live node owns. An org
    /// whose actor cannot start (its data key does not open) is logged and
    /// passed over: it must not keep the other orgs' leases from expiring,
    /// nor the server from starting. Its own requests answer the error.
    async fn wake_orgs_with_leases(&self) -> Result<(), EngineError> {
        for org in self.inner.store.orgs_with_leases().await? {
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
            if let Err(e) = self.wake_orgs_with_leases().await {
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

    /// Drains every org actor, lets the writers commit what is queued, and
    /// closes the store. Call after the front ends stopped taking requests.
    /// The server is about to stop: claims stop waiting, and those waiting
    /// answer `null` now, so a long poll does not hold up the shutdown.
    pub fn stop_waiting(&self) {
        self.inner.draining.store(true, Ordering::Relaxed);
        for route in self.inner.routes.iter() {
            let _ = route.actor.cast(OrgMsg::ReleaseWaiters);
        }
    }

    pub async fn shutdown(&self) {
        let _ = self
            .inner
            .supervisor
            .call(SupervisorMsg::StopAll, Some(Duration::from_secs(30)))
            .await;
        if let Err(e) = self.inner.writers.flush_all().await {
            tracing::warn!(error = %e, "writes still queued at shutdown could not be flushed");
        }
        self.inner.supervisor.stop(None);
        self.inner.reports_keeper.stop(None);
        self.inner.reporter.close().await;
        let placement = self.inner.placement.lock().expect("not poisoned").take();
        if let Some(placement) = placement {
            // The thread ends within a heartbeat; nothing here waits on it
            // while holding the runtime.
            let _ = tokio::task::spawn_blocking(move || placement.stop()).await;
        }
        for t in std::mem::take(&mut *self.inner.background_tasks.lock().expect("not poisoned")) {
            t.abort();
        }
        self.inner.writers.close().await;
        self.inner.store.close().await;
        // The file is whole: another server may open it now.
        drop(self.inner.db_file.lock().expect("not poisoned").take());
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
