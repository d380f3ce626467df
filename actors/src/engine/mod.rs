//! `Engine`: the handle the HTTP and MCP front ends call.
//!
//! A cheap `Clone`. Each method authenticates nothing and trusts its
//! `Caller` (the front end got it from `authenticate`), validates the
//! request, sends one message to the org's actor, waits for the actor's
//! answer and then for the commit, and shapes the reply. Reads that need
//! content go straight to the store: an acknowledged write is committed, so
//! a later read sees it, and the actors' mailboxes stay free for writes.

mod admin;
mod feedback;
mod org_admin;
mod tasks;

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use ractor::rpc::CallResult;
use ractor::{Actor, ActorRef};

pub use admin::*;
pub use feedback::{FEEDBACK_ORG_NAME, MEMBER_STRIKE_LIMIT, ORG_STRIKE_LIMIT};
pub use tasks::*;

use crate::clock::{Clock, SystemClock};
use crate::crypto::{CursorSigner, MasterKey};
use crate::directory::OrgDirectory;
use crate::domain::account::{Caller, KeyRecord, Role};
use crate::domain::usage::RequestKind;
use crate::domain::{KeyId, OrgId};
use crate::error::EngineError;
use crate::filter::{ContentFilter, TermFilter};
use crate::org::{parse_api_key, OrgDeps, OrgMsg, QuotaView, Reply};
use crate::reader::TaskReader;
use crate::store::{Store, StoreError, StoreOptions};
use crate::supervisor::{ActorStats, Routes, Supervisor, SupervisorMsg};
use crate::writer::{Commit, Writers};

pub struct EngineConfig {
    pub database_url: String,
    pub master_key: MasterKey,
    /// An org actor idle this long is stopped.
    pub idle_after: Duration,
    pub store: StoreOptions,
    pub clock: Arc<dyn Clock>,
    /// How long a request waits for its org actor.
    pub call_timeout: Duration,
    /// Judges feedback messages.
    pub feedback_filter: Arc<dyn ContentFilter>,
    /// The org receiving feedback; `None`: the `taskq-feedback` org.
    pub feedback_org: Option<OrgId>,
}

impl EngineConfig {
    pub fn new(database_url: impl Into<String>, master_key: MasterKey) -> Self {
        Self {
            database_url: database_url.into(),
            master_key,
            idle_after: Duration::from_secs(60),
            store: StoreOptions::default(),
            clock: Arc::new(SystemClock),
            call_timeout: Duration::from_secs(30),
            feedback_filter: Arc::new(TermFilter::builtin([])),
            feedback_org: None,
        }
    }
}

#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    writers: Writers,
    writer_tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    directory: Arc<OrgDirectory>,
    supervisor: ActorRef<SupervisorMsg>,
    routes: Routes,
    stats: Arc<ActorStats>,
    queue_depths: Arc<DashMap<OrgId, usize>>,
    clock: Arc<dyn Clock>,
    cursors: CursorSigner,
    /// Authenticated keys, so a request costs no store read.
    keys: DashMap<KeyId, Arc<AuthEntry>>,
    call_timeout: Duration,
    feedback_filter: Arc<dyn ContentFilter>,
    /// Grouped reads of claimed tasks.
    reader: TaskReader,
    /// The feedback org and the system caller that files feedback there,
    /// settled once at start.
    feedback: std::sync::OnceLock<(OrgId, Caller)>,
}

struct AuthEntry {
    key: KeyRecord,
    role: Role,
    seated: bool,
}

impl Engine {
    /// Connects the store (running migrations), starts the writers and the
    /// supervisor, and wakes the actors of orgs holding leases so those
    /// expire on time.
    pub async fn start(config: EngineConfig) -> Result<Self, EngineError> {
        let store = Store::connect(&config.database_url, &config.store).await?;
        let store_for_reader = store.clone();
        let (supervisor_tx, mut supervisor_rx) = tokio::sync::mpsc::unbounded_channel::<OrgId>();
        let (writers, writer_tasks) = Writers::start(
            store.clone(),
            Arc::new(move |org| {
                let _ = supervisor_tx.send(org);
            }),
        );
        let directory = Arc::new(OrgDirectory::new(store.clone(), config.master_key));
        let routes: Routes = Arc::new(DashMap::new());
        let stats = Arc::new(ActorStats::default());
        let queue_depths = Arc::new(DashMap::new());
        let deps = OrgDeps {
            queue_depths: queue_depths.clone(),
            store: store.clone(),
            writers: writers.clone(),
            directory: directory.clone(),
            clock: config.clock.clone(),
            idle_after: config.idle_after,
        };
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
        {
            let supervisor = supervisor.clone();
            tokio::spawn(async move {
                while let Some(org) = supervisor_rx.recv().await {
                    let _ = supervisor.cast(SupervisorMsg::WriteFailed(org));
                }
            });
        }
        let engine = Engine {
            inner: Arc::new(Inner {
                store,
                writers,
                writer_tasks: std::sync::Mutex::new(writer_tasks),
                directory,
                supervisor,
                routes,
                stats,
                queue_depths,
                clock: config.clock,
                cursors: CursorSigner::default(),
                keys: DashMap::new(),
                call_timeout: config.call_timeout,
                feedback_filter: config.feedback_filter,
                reader: TaskReader::start(store_for_reader),
                feedback: std::sync::OnceLock::new(),
            }),
        };
        let feedback = engine.prepare_feedback_org(config.feedback_org).await?;
        let _ = engine.inner.feedback.set(feedback);
        for org in engine.inner.store.orgs_with_leases().await? {
            engine.org_actor(org).await?;
        }
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
        self.inner
            .queue_depths
            .iter()
            .map(|e| (*e.key(), *e.value()))
            .collect()
    }

    /// Drains every org actor, lets the writers commit what is queued, and
    /// closes the store. Call after the front ends stopped taking requests.
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
        for t in std::mem::take(&mut *self.inner.writer_tasks.lock().expect("not poisoned")) {
            t.abort();
        }
        self.inner.store.close().await;
    }

    /// Resolves an `X-Api-Key` value to its caller.
    pub async fn authenticate(&self, api_key: Option<&str>) -> Result<Caller, EngineError> {
        let (key_id, secret) = api_key
            .and_then(parse_api_key)
            .ok_or(EngineError::InvalidApiKey)?;
        let entry = match self.inner.keys.get(&key_id).map(|e| e.clone()) {
            Some(e) => e,
            None => {
                let key = self
                    .inner
                    .store
                    .get_key(key_id)
                    .await?
                    .ok_or(EngineError::InvalidApiKey)?;
                let member = self
                    .inner
                    .store
                    .org_members(key.org_id)
                    .await?
                    .into_iter()
                    .find(|m| m.email == key.email)
                    .ok_or(EngineError::InvalidApiKey)?;
                let entry = Arc::new(AuthEntry {
                    key,
                    role: member.role,
                    seated: member.seated,
                });
                self.inner.keys.insert(key_id, entry.clone());
                entry
            }
        };
        if !entry.key.active || !crate::crypto::secret_matches(secret, &entry.key.secret_hash) {
            return Err(EngineError::InvalidApiKey);
        }
        let org = self.inner.directory.get(entry.key.org_id).await?;
        // On a plan billed per seat, an unseated member's keys are inactive.
        if org.record.tier.is_seat_billed() && !entry.seated {
            return Err(EngineError::InvalidApiKey);
        }
        if org.record.suspended {
            return Err(EngineError::OrgSuspended);
        }
        Ok(Caller {
            org_id: entry.key.org_id,
            key_id,
            key_name: entry.key.name.clone(),
            email: entry.key.email.clone(),
            role: entry.role,
        })
    }

    fn forget_key(&self, key_id: KeyId) {
        self.inner.keys.remove(&key_id);
    }

    /// Drops the cached authentication of every key of one member.
    fn forget_member_keys(&self, org: OrgId, email: &str) {
        self.inner
            .keys
            .retain(|_, e| !(e.key.org_id == org && e.key.email == email));
    }

    async fn org_actor(&self, org: OrgId) -> Result<ActorRef<OrgMsg>, EngineError> {
        if let Some(actor) = self.inner.routes.get(&org) {
            return Ok(actor.clone());
        }
        match self
            .inner
            .supervisor
            .call(
                |reply| SupervisorMsg::Resolve(org, reply),
                Some(self.inner.call_timeout),
            )
            .await
        {
            Ok(CallResult::Success(result)) => result,
            Ok(CallResult::Timeout) => Err(EngineError::Timeout),
            _ => Err(EngineError::ActorUnavailable),
        }
    }

    /// Sends one message to the org's actor and returns its answer. A send
    /// refused because the actor is stopping is retried on its successor;
    /// the message was never taken, so the retry cannot apply it twice.
    async fn ask<T: Send + 'static>(
        &self,
        org: OrgId,
        message: impl Fn(Reply<T>) -> OrgMsg,
    ) -> Result<T, EngineError> {
        for _ in 0..5 {
            let actor = self.org_actor(org).await?;
            match actor.call(&message, Some(self.inner.call_timeout)).await {
                Ok(CallResult::Success(result)) => return result,
                Ok(CallResult::Timeout) => return Err(EngineError::Timeout),
                Ok(CallResult::SenderError) => return Err(EngineError::ActorUnavailable),
                Err(_) => {
                    self.inner
                        .routes
                        .remove_if(&org, |_, r| r.get_id() == actor.get_id());
                    tokio::task::yield_now().await;
                }
            }
        }
        Err(EngineError::ActorUnavailable)
    }

    fn now(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// Counts one request against the org's per-minute bucket of its kind
    /// and the monthly allowance (`requests` of it; a batch create counts
    /// its items), refusing it with the 429 that applies. `tasks` is how
    /// many tasks it will create, checked against the monthly task quota.
    /// An org without any of these limits skips the round trip.
    async fn admit(
        &self,
        caller: &Caller,
        kind: RequestKind,
        requests: i64,
        tasks: i64,
    ) -> Result<(), EngineError> {
        let entry = self.inner.directory.get(caller.org_id).await?;
        let limited = |key| entry.limit(key).is_some();
        if !(limited(kind.limit_key())
            || limited("requests_per_month")
            || (tasks > 0 && limited("tasks_per_month")))
        {
            return Ok(());
        }
        let commit = self
            .ask(caller.org_id, |r| OrgMsg::Admit(kind, requests, tasks, r))
            .await?;
        // Stored before the request proceeds, so a crash right after the
        // answer cannot hand the usage back.
        committed(commit).await
    }

    /// Charges one call against the org's monthly plan allowance, for the
    /// planner; answers the plans left this month (`None`: unlimited).
    pub async fn charge_plan_allowance(&self, caller: &Caller) -> Result<Option<i64>, EngineError> {
        self.ask(caller.org_id, OrgMsg::ChargePlan).await
    }

    /// `GET /quota`: the monthly task quota.
    pub async fn quota(&self, caller: &Caller) -> Result<QuotaView, EngineError> {
        self.admit(caller, RequestKind::Read, 1, 0).await?;
        self.ask(caller.org_id, OrgMsg::GetQuota).await
    }
}

/// Waits until a batch the actor submitted is durable.
async fn committed(commit: Commit) -> Result<(), EngineError> {
    match commit.await {
        Ok(result) => result.map_err(EngineError::from),
        Err(_) => Err(EngineError::Store(StoreError::WriterGone)),
    }
}
