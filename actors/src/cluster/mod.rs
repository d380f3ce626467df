//! Several nodes on one PostgreSQL: which node's actor owns each org.
//!
//! PostgreSQL is the only shared component and the directory (migration
//! `0017_cluster`): nodes heartbeat there every second, and each org's row
//! names its owner and an epoch every takeover raises. An org's lease is
//! its owner's liveness: a node is live while its last heartbeat is younger
//! than the TTL on the database's clock, so one statement a second renews
//! every org a node owns. Who *should* own an org is decided by the
//! consistent-hash ring nginx builds (`placement`), over the live nodes
//! that are not leaving: orgs spread out, only those of a node that joins
//! or leaves move, and a balancer that hashes the org in the API key the
//! same way sends each request to its org's owner.
//!
//! Safety does not rest on the hashing. A node acts for an org only while
//! it owns the org's row and its trust window is open: the start of its
//! last successful heartbeat plus the TTL less a margin, on its own
//! monotonic clock, which closes before any other node can see it dead. A
//! node that was paused past it finds the window shut when it runs again,
//! and drops every org before it answers anything. And every commit checks
//! the org's row for this node and epoch in the same statement
//! (`store::commit`'s fence), so the late write of a deposed node fails
//! instead of landing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use dashmap::DashMap;

mod placement;

pub use crate::store::TrafficCounts;
pub use placement::{placement, LiveNode, Placement, Ring};

use crate::domain::OrgId;
use crate::store::{
    nodes_seen, EventLinks, Fence, NodeAddress, NodeRow, OwnerRow, Store, StoreError,
};

/// How long a node's heartbeat keeps its orgs: TTL and its renewal period.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The URL other nodes reach this one at.
    pub advertise_url: String,
    /// The URL clients may reach this one at directly, named in the
    /// answers other nodes forward for it; `None`: clients are not told.
    pub public_url: Option<String>,
    /// This node's id: kept across restarts in its data directory, so a
    /// node that restarts takes its orgs back at once rather than after
    /// its former self's heartbeat has lapsed. `None`: a new id.
    pub node_id: Option<String>,
    pub ttl: Duration,
    pub heartbeat: Duration,
    /// Taken off the TTL for the trust window, for the time a heartbeat's
    /// answer takes to arrive and clocks that run a little apart.
    pub margin: Duration,
}

impl ClusterConfig {
    pub fn new(advertise_url: impl Into<String>) -> Self {
        ClusterConfig {
            advertise_url: advertise_url.into(),
            public_url: None,
            node_id: None,
            ttl: Duration::from_secs(3),
            heartbeat: Duration::from_secs(1),
            margin: Duration::from_millis(500),
        }
    }
}

/// How long another node's ownership of an org is taken on trust before
/// the directory is read again. A stale answer costs one forward that the
/// other node refuses (`org moving`), then a fresh look-up.
const OWNER_FOR: Duration = Duration::from_secs(1);

/// Requests for an org this node answered since it started, the ones it
/// forwarded to their org's owner and the ones another node forwarded to
/// it: with a balancer that hashes orgs as the ring does, the last two
/// stay still.
#[derive(Default)]
pub struct Traffic {
    requests: AtomicU64,
    forwarded: AtomicU64,
    received: AtomicU64,
}

impl Traffic {
    /// A request for an org reached this node; `forwarded`: from another.
    pub fn arrived(&self, forwarded: bool) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if forwarded {
            self.received.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// This node sent a request on to the org's owner.
    pub fn forwarded(&self) {
        self.forwarded.fetch_add(1, Ordering::Relaxed);
    }

    pub fn counts(&self) -> TrafficCounts {
        TrafficCounts {
            requests: self.requests.load(Ordering::Relaxed),
            forwarded: self.forwarded.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
        }
    }
}

fn address<'a>(node: &'a str, config: &'a ClusterConfig) -> NodeAddress<'a> {
    NodeAddress {
        node_id: node,
        advertise_url: &config.advertise_url,
        public_url: config.public_url.as_deref(),
    }
}

/// What one heartbeat saw.
#[derive(Debug, Clone)]
pub struct Beat {
    /// The trust window had shut before it: every org owned is lost.
    pub lapsed: bool,
    /// The master key new wraps are made with, once a rotation began.
    pub master_key: Option<String>,
    /// Live nodes that are not leaving, this one included.
    pub members: usize,
}

/// A node's place in the cluster: its identity, the orgs it owns and its
/// trust window.
pub struct Cluster {
    store: Store,
    config: ClusterConfig,
    node: Arc<str>,
    started_at: i64,
    /// The zero of `trusted_until_ms`.
    base: Instant,
    /// Ms after `base` until which this node may act for the orgs it owns.
    trusted_until_ms: AtomicU64,
    /// Owned orgs and their epochs.
    owned: DashMap<OrgId, i64>,
    /// The live nodes, leaving ones included, as of the last heartbeat.
    live: RwLock<Arc<Vec<LiveNode>>>,
    /// The ring over those that are not leaving.
    ring: RwLock<Arc<Ring>>,
    /// Other nodes' addresses for orgs they own, as last looked up.
    owners: DashMap<OrgId, (String, Instant)>,
    /// Set when this node begins to stop: it takes no org any more.
    leaving: std::sync::atomic::AtomicBool,
    links: Option<Arc<EventLinks>>,
    /// The heartbeat's own connection, made on the heartbeat's thread.
    conn: tokio::sync::Mutex<Option<sqlx::PgConnection>>,
    /// What the heartbeats say of the master keys held.
    master_keys: std::sync::Mutex<String>,
    /// Its requests, which its heartbeats tell the others.
    traffic: Traffic,
    /// The last heartbeat failed: the store is out of reach.
    beat_failed: std::sync::atomic::AtomicBool,
    /// What else this node drops of an org it no longer owns (its index,
    /// its cached authentications and runbooks), set by the engine.
    on_forget: std::sync::OnceLock<Box<dyn Fn(OrgId) + Send + Sync>>,
}

impl Cluster {
    /// Registers this node in the directory, holding `keyring`'s keys; it
    /// trusts itself after its first heartbeat, made here.
    pub async fn join(
        store: Store,
        config: ClusterConfig,
        started_at: i64,
        keyring: &crate::crypto::Keyring,
    ) -> Result<Self, StoreError> {
        let node: Arc<str> = config
            .node_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string())
            .into();
        let base = Instant::now();
        store
            .register_node(&address(&node, &config), started_at)
            .await?;
        let links = store.event_links();
        let cluster = Cluster {
            store,
            config,
            node,
            started_at,
            base,
            trusted_until_ms: AtomicU64::new(0),
            owned: DashMap::new(),
            live: RwLock::new(Arc::new(Vec::new())),
            ring: RwLock::new(Arc::new(Ring::default())),
            owners: DashMap::new(),
            leaving: std::sync::atomic::AtomicBool::new(false),
            links,
            conn: tokio::sync::Mutex::new(None),
            beat_failed: std::sync::atomic::AtomicBool::new(false),
            traffic: Traffic::default(),
            master_keys: std::sync::Mutex::new(String::new()),
            on_forget: std::sync::OnceLock::new(),
        };
        cluster.hold_keys(keyring);
        let mut first = cluster.store.heartbeat_conn().await?;
        cluster.beat_on(&mut first).await?;
        let _ = sqlx::Connection::close(first).await;
        Ok(cluster)
    }

    pub fn node_id(&self) -> &str {
        &self.node
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// This node's requests for an org, counted as they arrive.
    pub fn traffic(&self) -> &Traffic {
        &self.traffic
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether this node's trust window is open.
    pub fn trusted(&self) -> bool {
        self.now_ms() < self.trusted_until_ms.load(Ordering::Acquire)
    }

    /// Whether this node owns the org and may act for it now.
    pub fn serves(&self, org: OrgId) -> bool {
        self.trusted() && self.owned.contains_key(&org)
    }

    /// One heartbeat: renews every org this node owns and reads the live
    /// nodes. On success the trust window runs from the heartbeat's start.
    /// Answers whether the window had shut before it (the node was cut off
    /// or paused): then every org it owned is lost, and the caller stops
    /// their actors.
    pub async fn beat(&self) -> Result<Beat, StoreError> {
        let mut conn = self.conn.lock().await;
        if conn.is_none() {
            *conn = Some(
                self.store
                    .heartbeat_conn()
                    .await
                    .inspect_err(|_| self.failed())?,
            );
        }
        let beat = self.beat_on(conn.as_mut().expect("connected above")).await;
        if beat.is_err() {
            // A broken connection is made again at the next heartbeat.
            *conn = None;
        }
        beat
    }

    fn failed(&self) {
        self.beat_failed.store(true, Ordering::Release);
    }

    /// Why this node does not act for an org it does not serve: its store
    /// has not answered its heartbeats in time (its trust window shut), or
    /// the org is another node's or between nodes.
    pub fn refusal(&self) -> crate::error::EngineError {
        if !self.trusted() {
            crate::error::EngineError::StoreUnavailable
        } else {
            crate::error::EngineError::OrgMoving
        }
    }

    async fn beat_on(&self, conn: &mut sqlx::PgConnection) -> Result<Beat, StoreError> {
        let started = self.now_ms();
        let leaving = self.leaving.load(Ordering::Relaxed);
        let keys = self
            .master_keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let beat = async {
            let traffic = self.traffic.counts();
            let renewed = Store::heartbeat(&mut *conn, &self.node, leaving, &keys, traffic).await?;
            if !renewed {
                // A row removed after a very long pause: register again.
                Store::register_node_on(
                    &mut *conn,
                    &address(&self.node, &self.config),
                    self.started_at,
                )
                .await?;
            }
            let nodes = nodes_seen(&mut *conn, self.config.ttl, self.config.ttl).await?;
            let master_key = Store::cluster_master_key(&mut *conn).await?;
            Ok::<_, StoreError>((nodes, master_key))
        };
        let (nodes, master_key) = beat.await.inspect_err(|_| self.failed())?;
        self.beat_failed.store(false, Ordering::Release);
        let lapsed = started >= self.trusted_until_ms.load(Ordering::Acquire);
        let window =
            u64::try_from((self.config.ttl - self.config.margin).as_millis()).unwrap_or(u64::MAX);
        let before = self.live_nodes();
        let live: Vec<LiveNode> = nodes
            .into_iter()
            .filter(|n| n.live)
            .map(|n| LiveNode {
                beats: before
                    .iter()
                    .find(|b| b.node_id == n.node_id)
                    .map_or(1, |b| b.beats.saturating_add(1)),
                node_id: n.node_id,
                url: n.advertise_url,
                public_url: n.public_url,
                leaving: n.leaving,
            })
            .collect();
        let members: Vec<LiveNode> = live.iter().filter(|n| !n.leaving).cloned().collect();
        *self.live.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(live);
        self.trusted_until_ms
            .store(started.saturating_add(window), Ordering::Release);
        let member_count = members.len();
        if !self.ring().is_over(&members) {
            *self.ring.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(Ring::new(members));
        }
        Ok(Beat {
            lapsed,
            master_key,
            members: member_count,
        })
    }

    /// The master keys this node holds, its current one first, as its
    /// heartbeats tell the others.
    pub fn hold_keys(&self, keyring: &crate::crypto::Keyring) {
        let ids: Vec<&str> = std::iter::once(keyring.current())
            .chain(keyring.previous())
            .map(|k| k.id())
            .collect();
        *self.master_keys.lock().unwrap_or_else(|e| e.into_inner()) = ids.join(",");
    }

    /// Whether the node at `url` was live at the last heartbeat, leaving
    /// or not: a request forwarded to it is given up once it is not (it
    /// died or froze), and the org's next owner is looked for.
    pub fn is_live(&self, url: &str) -> bool {
        self.live_nodes().iter().any(|n| n.url == url)
    }

    /// Where clients may reach the live node at `url` directly, if its
    /// operator named a public URL.
    pub fn public_url_of(&self, url: &str) -> Option<String> {
        self.live_nodes()
            .iter()
            .find(|n| n.url == url)
            .and_then(|n| n.public_url.clone())
    }

    /// The live nodes, leaving ones included.
    fn live_nodes(&self) -> Arc<Vec<LiveNode>> {
        self.live.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn ring(&self) -> Arc<Ring> {
        self.ring.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The node that should own the org, among the live ones not leaving,
    /// as of the last heartbeat.
    pub fn desired(&self, org: OrgId) -> Option<LiveNode> {
        let ring = self.ring();
        let chosen = ring.owner(org)?;
        self.live_nodes()
            .iter()
            .find(|n| n.node_id == chosen.node_id)
            .cloned()
    }

    /// Takes the org's row for this node; its actor may start. `None`: a
    /// live node owns it, or this node cannot take orgs now.
    pub async fn acquire(&self, org: OrgId) -> Result<Option<Fence>, StoreError> {
        if !self.trusted() || self.leaving.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let Some(epoch) = self
            .store
            .acquire_org(org, &self.node, self.config.ttl)
            .await?
        else {
            return Ok(None);
        };
        // Events written for it from now on come from a block taken after
        // its last owner stopped writing.
        if let Some(links) = &self.links {
            links.renew();
        }
        // Whatever this node knew of the org may predate another node's
        // changes.
        self.forget(org);
        self.owned.insert(org, epoch);
        Ok(Some(Fence {
            node: self.node.clone(),
            epoch,
        }))
    }

    /// Gives an org up after its actor stopped: `needs_owner` when its
    /// tasks still hold leases.
    pub async fn release(&self, org: OrgId, needs_owner: bool) {
        let Some((_, epoch)) = self.owned.remove(&org) else {
            return;
        };
        self.forget(org);
        if let Err(e) = self
            .store
            .release_org(org, &self.node, epoch, needs_owner)
            .await
        {
            // The row stays this node's until its heartbeat lapses: another
            // node takes it then.
            tracing::warn!(org_id = %org, error = %e, "releasing an org failed");
        }
    }

    /// The org is another node's now (its fence failed, or the trust
    /// window shut): this node forgets it without touching its row.
    pub fn lose(&self, org: OrgId) {
        if self.owned.remove(&org).is_some() {
            self.forget(org);
        }
    }

    fn forget(&self, org: OrgId) {
        if let Some(links) = &self.links {
            links.forget_org(org);
        }
        if let Some(hook) = self.on_forget.get() {
            hook(org);
        }
    }

    /// Sets what else is dropped of an org this node no longer owns.
    pub fn on_forget(&self, hook: impl Fn(OrgId) + Send + Sync + 'static) {
        let _ = self.on_forget.set(Box::new(hook));
    }

    /// Every org this node owns.
    pub fn owned(&self) -> Vec<OrgId> {
        self.owned.iter().map(|e| *e.key()).collect()
    }

    /// Every org owned, forgotten at once: the trust window shut.
    pub fn lose_all(&self) -> Vec<OrgId> {
        let orgs = self.owned();
        for org in &orgs {
            self.lose(*org);
        }
        orgs
    }

    /// Where a request for the org goes. `forwarded`: another node sent it
    /// here, so it is not sent on again. Another node's address is kept
    /// for a moment (`OWNER_FOR`), so a stream of requests for one org does
    /// not read the directory each time; `fresh` reads it anyway.
    pub async fn place(
        &self,
        org: OrgId,
        forwarded: bool,
        fresh: bool,
    ) -> Result<Placement, StoreError> {
        if self.serves(org) {
            return Ok(Placement::Here);
        }
        if fresh {
            self.owners.remove(&org);
        } else if !forwarded {
            if let Some(url) = self
                .owners
                .get(&org)
                .filter(|e| e.1.elapsed() < OWNER_FOR)
                .map(|e| e.0.clone())
            {
                return Ok(Placement::At(url));
            }
        }
        let placement = self.look_up(org, forwarded).await?;
        if let Placement::At(url) = &placement {
            self.owners.insert(org, (url.clone(), Instant::now()));
        }
        Ok(placement)
    }

    async fn look_up(&self, org: OrgId, forwarded: bool) -> Result<Placement, StoreError> {
        if !self.trusted() && self.beat_failed.load(Ordering::Acquire) {
            return Err(StoreError::Unavailable(
                "the cluster's heartbeat fails".into(),
            ));
        }
        let owner = match self.store.org_owner(org, self.config.ttl).await? {
            OwnerRow::Live { node_id, url } => Some(LiveNode {
                node_id,
                url,
                public_url: None,
                leaving: false,
                beats: 0,
            }),
            OwnerRow::Free => None,
        };
        let can_take = self.trusted() && !self.leaving.load(Ordering::Relaxed);
        Ok(placement(
            &self.node,
            owner.as_ref(),
            self.desired(org).as_ref(),
            can_take,
            forwarded,
        ))
    }

    /// From now on this node takes no org and is no one's choice; the
    /// directory says so at once.
    pub async fn begin_leaving(&self) -> Result<(), StoreError> {
        self.leaving.store(true, Ordering::Relaxed);
        self.store.mark_leaving(&self.node).await
    }

    pub fn is_leaving(&self) -> bool {
        self.leaving.load(Ordering::Relaxed)
    }

    /// Orgs that need an owner and have none.
    pub async fn orphans(&self) -> Result<Vec<OrgId>, StoreError> {
        self.store.orphaned_orgs(self.config.ttl).await
    }

    /// The directory's nodes seen in the last minute, for the operator.
    pub async fn nodes(&self) -> Result<Vec<NodeRow>, StoreError> {
        self.store
            .cluster_nodes(self.config.ttl, Duration::from_secs(60))
            .await
    }
}
