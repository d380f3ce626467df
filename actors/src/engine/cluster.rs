//! Several nodes on one PostgreSQL, from the engine's side: where a
//! request is served, the heartbeat that keeps this node's orgs, taking
//! orgs whose node died, handing orgs to the node that should own them,
//! and handing every org over at a graceful stop. The rules are in
//! `crate::cluster`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Engine;
use crate::api::{ClusterNode, ClusterView, NodeForwarding, Timestamp};
use crate::cluster::{Cluster, Placement, TrafficCounts};
use crate::domain::{KeyId, OrgId};
use crate::error::EngineError;
use crate::supervisor::SupervisorMsg;

/// Heartbeats in a row a node must have been seen live before orgs move
/// to it, so a node that flaps does not pull orgs back and forth.
const SETTLED_BEATS: u32 = 3;
/// Orgs handed to other nodes per heartbeat, so a node that joins takes
/// its share over a few seconds rather than all at once.
const MOVES_PER_BEAT: usize = 64;

impl Engine {
    /// Whether this node is one of several on one PostgreSQL.
    pub fn is_clustered(&self) -> bool {
        self.inner.cluster.is_some()
    }

    /// The org an `X-Api-Key` value belongs to, to route its request;
    /// `None` for a key that does not exist (the request is answered here,
    /// with a 401). A key that names its org is routed there unread; the
    /// org's node checks the secret, and that the org is the key's.
    pub async fn org_of_api_key(&self, api_key: &str) -> Result<Option<OrgId>, EngineError> {
        match crate::org::parse_api_key(api_key) {
            None => Ok(None),
            Some(key) => match key.org {
                Some(org) => Ok(Some(org)),
                None => self.org_of_key(key.key_id).await,
            },
        }
    }

    async fn org_of_key(&self, key_id: KeyId) -> Result<Option<OrgId>, EngineError> {
        if let Some(org) = self.inner.key_orgs.get(&key_id) {
            return Ok(Some(*org));
        }
        let org = self
            .stored(self.inner.store.get_key(key_id).await)?
            .map(|k| k.org_id);
        if let Some(org) = org {
            self.inner.key_orgs.insert(key_id, org);
        }
        Ok(org)
    }

    /// Drops what this node knows of an org it no longer owns (or just
    /// took): its keys' authentications, its meaning index and its cached
    /// runbooks; its event streams end (their clients reconnect to its
    /// owner).
    pub(super) fn forget_org(&self, org: OrgId) {
        self.forget_org_keys(org);
        self.inner.hub.cut_off(org);
        if let Some(meaning) = &self.inner.meaning {
            meaning.unload(org);
        }
        self.inner.reporter.forget(org);
    }

    /// Where a request for `org` is served: here, at another node, or
    /// nowhere for a moment. `forwarded`: another node sent it here.
    /// `fresh`: the owner last named did not answer as one; ask the
    /// directory rather than the recent answer.
    pub async fn place(
        &self,
        org: OrgId,
        forwarded: bool,
        fresh: bool,
    ) -> Result<Placement, EngineError> {
        match &self.inner.cluster {
            None => Ok(Placement::Here),
            Some(cluster) => self.stored(cluster.place(org, forwarded, fresh).await),
        }
    }

    /// A request for an org reached this node; `forwarded`: another node
    /// sent it.
    pub fn count_request(&self, forwarded: bool) {
        if let Some(cluster) = &self.inner.cluster {
            cluster.traffic().arrived(forwarded);
        }
    }

    /// This node sent a request on to its org's owner.
    pub fn count_forward(&self) {
        if let Some(cluster) = &self.inner.cluster {
            cluster.traffic().forwarded();
        }
    }

    /// Where clients may reach the node at `url` directly, if its operator
    /// named a public URL: the hint an answer forwarded from it carries.
    pub fn public_url_of(&self, url: &str) -> Option<String> {
        self.inner.cluster.as_ref()?.public_url_of(url)
    }

    /// This node's requests for an org so far; `None` on a node alone.
    pub fn traffic(&self) -> Option<TrafficCounts> {
        self.inner.cluster.as_ref().map(|c| c.traffic().counts())
    }

    /// Waits until the node at `url` is no longer live (it died, froze or
    /// was cut off), checking at each heartbeat; never, on a node alone.
    pub async fn until_gone(&self, url: &str) {
        let Some(cluster) = &self.inner.cluster else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep(cluster.config().heartbeat).await;
            if !cluster.is_live(url) {
                return;
            }
        }
    }

    /// `GET /admin/cluster`.
    pub async fn cluster_view(&self) -> Result<ClusterView, EngineError> {
        let Some(cluster) = &self.inner.cluster else {
            let (node_id, advertise_url, started_at) = &*self.inner.local_node;
            let orgs = self.actors_alive() as i64;
            return Ok(ClusterView {
                nodes: vec![ClusterNode {
                    node_id: node_id.clone(),
                    advertise_url: advertise_url.clone(),
                    public_url: None,
                    started_at: Timestamp(*started_at),
                    last_seen: Timestamp(self.now()),
                    orgs,
                    forwarding: None,
                }],
                orgs_placed: orgs,
            });
        };
        let nodes = self.stored(cluster.nodes().await)?;
        let orgs_placed = nodes.iter().filter(|n| n.live).map(|n| n.orgs).sum();
        Ok(ClusterView {
            nodes: nodes
                .into_iter()
                .map(|n| ClusterNode {
                    node_id: n.node_id,
                    advertise_url: n.advertise_url,
                    public_url: n.public_url,
                    started_at: Timestamp(n.started_at),
                    last_seen: Timestamp(n.last_seen),
                    orgs: n.orgs,
                    forwarding: Some(forwarding(
                        n.requests,
                        n.requests_forwarded,
                        n.requests_received,
                    )),
                })
                .collect(),
            orgs_placed,
        })
    }

    /// The first step of a graceful stop with several nodes: this node
    /// takes no org and is no one's choice, and every org it owns is
    /// drained and released, so other nodes serve them at once. Requests
    /// that reach it meanwhile are forwarded. Waits at most `within`.
    pub async fn hand_over_all(&self, within: Duration) {
        let Some(cluster) = &self.inner.cluster else {
            return;
        };
        if let Err(e) = cluster.begin_leaving().await {
            tracing::warn!(error = %e, "telling the cluster this node leaves failed");
        }
        let owned = cluster.owned();
        tracing::info!(
            orgs = owned.len(),
            "handing every org over to the other nodes"
        );
        for org in owned {
            let _ = self.inner.supervisor.cast(SupervisorMsg::HandOver(org));
        }
        let deadline = Instant::now() + within;
        while !cluster.owned().is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts the heartbeat on a thread and runtime of its own: a node so
    /// busy that its request threads hold both cores must not look dead to
    /// the others and drop its orgs for it. After each heartbeat the
    /// engine's own task adopts orphaned orgs and rebalances.
    pub(super) fn start_heartbeat(&self) -> Option<Heartbeat> {
        let cluster = self.inner.cluster.clone()?;
        let stop = Arc::new(AtomicBool::new(false));
        let beaten = Arc::new(tokio::sync::Notify::new());
        let heart = {
            let (cluster, stop, beaten) = (cluster.clone(), stop.clone(), beaten.clone());
            let engine = self.clone();
            std::thread::Builder::new()
                .name("taskq-heartbeat".into())
                .spawn(move || {
                    let runtime = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(runtime) => runtime,
                        Err(e) => {
                            tracing::error!(error = %e, "the heartbeat's runtime did not start");
                            return;
                        }
                    };
                    runtime.block_on(engine.beat_forever(&cluster, &stop, &beaten));
                })
                .ok()?
        };
        let engine = self.clone();
        let task = tokio::spawn(async move {
            loop {
                beaten.notified().await;
                if cluster.trusted() && !cluster.is_leaving() {
                    engine.adopt_orphans().await;
                    engine.rebalance();
                }
            }
        });
        Some(Heartbeat { stop, heart, task })
    }

    async fn beat_forever(
        &self,
        cluster: &Cluster,
        stop: &AtomicBool,
        beaten: &tokio::sync::Notify,
    ) {
        let period = cluster.config().heartbeat;
        while !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(period).await;
            let lapsed = match cluster.beat().await {
                Ok(beat) => {
                    self.inner.writers.share_among(beat.members);
                    if let Some(id) = &beat.master_key {
                        self.follow_master_key(id);
                    }
                    beat.lapsed
                }
                Err(e) => {
                    self.inner.health.observe(&e);
                    tracing::warn!(error = %e, "cluster heartbeat failed");
                    false
                }
            };
            if lapsed || !cluster.trusted() {
                let lost = cluster.lose_all();
                if !lost.is_empty() {
                    tracing::warn!(
                        orgs = lost.len(),
                        "this node's trust window shut (paused or cut off from the database): \
                         every org it owned is dropped"
                    );
                }
                for org in lost {
                    let _ = self.inner.supervisor.cast(SupervisorMsg::Lost(org));
                }
                continue;
            }
            beaten.notify_one();
        }
    }

    /// A rotation through another node made the key `id` current: this
    /// node makes new wraps with it too, and once no wrap of its own made
    /// with the old one is still to be stored, a heartbeat tells the
    /// rotating node.
    fn follow_master_key(&self, id: &str) {
        if self.keyring().current().id() == id {
            return;
        }
        let ring = self.keyring();
        match ring.with_current(id) {
            Some(next) => {
                self.inner.directory.set_keyring(next.clone());
                tracing::info!(master_key_id = %id, "the cluster's master key changed: new wraps use it");
                // The heartbeat says so once no wrap that may have read the
                // old key is still to be stored; it does not wait for them.
                let (engine, cluster) = (self.clone(), self.inner.cluster.clone());
                tokio::spawn(async move {
                    engine.inner.wraps.settled().await;
                    if let Some(cluster) = cluster {
                        cluster.hold_keys(&next);
                    }
                });
            }
            None if !ring.holds(id) => tracing::error!(
                master_key_id = %id,
                "the cluster's current master key is one this node does not hold: \
                 start it with that key in TASKQ_MASTER_KEY"
            ),
            None => {}
        }
    }

    /// Takes the orgs this node should own that a dead node held or a
    /// stopped one released with leases, so their leases expire on time.
    async fn adopt_orphans(&self) {
        let Some(cluster) = &self.inner.cluster else {
            return;
        };
        let orphans = match cluster.orphans().await {
            Ok(orgs) => orgs,
            Err(e) => {
                tracing::warn!(error = %e, "reading the orgs that need an owner failed");
                return;
            }
        };
        for org in orphans {
            let mine = cluster
                .desired(org)
                .is_none_or(|d| d.node_id == cluster.node_id());
            if mine && !self.inner.routes.contains_key(&org) {
                match self.resolve(org, None).await {
                    Ok(_) => tracing::info!(org_id = %org, "took over an org whose node is gone"),
                    Err(EngineError::OrgMoving) => {}
                    Err(e) => {
                        tracing::warn!(org_id = %org, error = %e, "taking over an org failed")
                    }
                }
            }
        }
    }

    /// Hands orgs whose chosen node is another, settled one to it.
    fn rebalance(&self) {
        let Some(cluster) = &self.inner.cluster else {
            return;
        };
        let moving = cluster
            .owned()
            .into_iter()
            .filter(|org| {
                cluster
                    .desired(*org)
                    .is_some_and(|d| d.node_id != cluster.node_id() && d.beats >= SETTLED_BEATS)
            })
            .take(MOVES_PER_BEAT);
        for org in moving {
            let _ = self.inner.supervisor.cast(SupervisorMsg::HandOver(org));
        }
    }
}

/// A node's row's counts, with the shares of all it answered.
fn forwarding(requests: i64, forwarded: i64, received: i64) -> NodeForwarding {
    let share = |part: i64| {
        if requests > 0 {
            part as f64 / requests as f64
        } else {
            0.0
        }
    };
    NodeForwarding {
        requests,
        forwarded,
        received,
        forwarded_share: share(forwarded),
        received_share: share(received),
    }
}

/// The running heartbeat: its thread, and the task that acts on what it
/// saw (adopting orphaned orgs, handing orgs to the nodes that should own
/// them).
pub(super) struct Heartbeat {
    stop: Arc<AtomicBool>,
    heart: std::thread::JoinHandle<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Heartbeat {
    /// Stops both; the thread ends within a heartbeat.
    pub(super) fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.abort();
        let _ = self.heart.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_of_all_requests_answered() {
        let f = forwarding(8, 2, 1);
        assert_eq!(
            (
                f.requests,
                f.forwarded,
                f.received,
                f.forwarded_share,
                f.received_share
            ),
            (8, 2, 1, 0.25, 0.125)
        );
        let none = forwarding(0, 0, 0);
        assert_eq!((none.forwarded_share, none.received_share), (0.0, 0.0));
    }
}
