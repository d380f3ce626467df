//! The engine's life: its configuration, its start (store, writers,
//! supervisor, reports, the meaning worker, several nodes' placement) and
//! its shutdown.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dashmap::DashMap;
use ractor::{Actor, ActorRef};

use super::auth::AuthCache;
use super::{Engine, Inner, StoreOptions};
use crate::clock::{Clock, SystemClock};
use crate::crypto::{CursorSigner, Keyring, MasterKey};
use crate::directory::OrgDirectory;
use crate::domain::OrgId;
use crate::embed::Embedder;
use crate::error::EngineError;
use crate::filter::{ContentFilter, TermFilter};
use crate::health::StoreHealth;
use crate::llm::ChatModel;
use crate::meaning::Meaning;
use crate::org::{ContentBudget, OrgDeps, OrgMsg};
use crate::reader::TaskReader;
use crate::reports::actor::{ReportsKeeper, ReportsRef};
use crate::reports::compute::Reporter;
use crate::stats::{OrgSnapshots, Refusals};
use crate::store::Store;
use crate::supervisor::{ActorStats, Routes, Supervisor, SupervisorMsg};
use crate::watch::EventHub;
use crate::webhook_sender::WebhookSender;
use crate::writer::Writers;

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
    /// Sends webhook deliveries; `None`: events wait in the outbox.
    pub webhook_sender: Option<Arc<dyn WebhookSender>>,
    /// Webhook URLs may lead to loopback, private, link-local or
    /// unspecified addresses (`TASKQ_WEBHOOKS_ALLOW_PRIVATE`).
    pub webhooks_allow_private: bool,
    /// What a new org's limits start as (`TASKQ_NEW_ORG_LIMITS`).
    pub new_org_limits: crate::domain::usage::NewOrgLimits,
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
            webhook_sender: None,
            webhooks_allow_private: false,
            new_org_limits: Default::default(),
            #[cfg(feature = "test-hooks")]
            rewrap_pause_after: None,
        }
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
    for (id, sealed) in missing {
        tracing::warn!(
            master_key_id = %id,
            sealed,
            "data keys or webhook secrets are sealed by a master key this server does not \
             hold: those orgs answer 500, and those webhooks are not sent, until it is \
             supplied (TASKQ_MASTER_KEY_PREVIOUS)"
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
        let hub = Arc::new(EventHub::default());
        let writers = Writers::start(
            store.clone(),
            config.store.sqlite_writer_nice,
            store.writer_count(config.store.pg_writers),
            health.clone(),
            config.writer_queue,
            on_failure,
            hub.clone(),
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
                hub,
                board_feeds: Arc::default(),
                board_state: super::board::org_state(&routes, &snapshots),
                background_tasks: std::sync::Mutex::new(Vec::new()),
                deliveries: OnceLock::new(),
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
                wraps: Default::default(),
                webhooks_allow_private: config.webhooks_allow_private,
                new_org_limits: config.new_org_limits,
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
                sizes: Default::default(),
                peers: OnceLock::new(),
                heartbeat: std::sync::Mutex::new(None),
                #[cfg(feature = "test-hooks")]
                rewrap_pause_after: config.rewrap_pause_after,
                #[cfg(feature = "test-hooks")]
                removal_hold: Default::default(),
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
        engine.wake_orgs_needing_timers().await?;
        background_tasks.push(tokio::spawn(engine.clone().watch_store()));
        background_tasks.push(tokio::spawn(engine.clone().sweep_periodically()));
        background_tasks.push(tokio::spawn(engine.clone().purge_periodically()));
        if let Some(sender) = config.webhook_sender {
            background_tasks.push(engine.start_deliveries(
                sender,
                &config.database_url,
                &config.store,
            )?);
        }
        *engine.inner.heartbeat.lock().expect("not poisoned") = engine.start_heartbeat();
        *engine.inner.background_tasks.lock().expect("not poisoned") = background_tasks;
        Ok(engine)
    }

    /// Drains every org actor, lets the writers commit what is queued, and
    /// closes the store. Call after the front ends stopped taking requests.
    /// The server is about to stop: claims stop waiting, and those waiting
    /// answer `null` now, and event streams end, so that neither a long
    /// poll nor a stream holds up the shutdown.
    pub fn stop_waiting(&self) {
        self.inner.draining.store(true, Ordering::Relaxed);
        self.inner.hub.close();
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
        let heartbeat = self.inner.heartbeat.lock().expect("not poisoned").take();
        if let Some(heartbeat) = heartbeat {
            // The thread ends within a heartbeat; nothing here waits on it
            // while holding the runtime.
            let _ = tokio::task::spawn_blocking(move || heartbeat.stop()).await;
        }
        for t in std::mem::take(&mut *self.inner.background_tasks.lock().expect("not poisoned")) {
            t.abort();
        }
        if let Some(deliveries) = self.inner.deliveries.get() {
            // Before the store's own: SQLite removes its WAL file when the
            // last connection to the database closes.
            deliveries.close().await;
        }
        self.inner.writers.close().await;
        self.inner.store.close().await;
        // The file is whole: another server may open it now.
        drop(self.inner.db_file.lock().expect("not poisoned").take());
    }
}
