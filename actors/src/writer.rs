//! Group commit: the only path by which org actors write.
//!
//! An org actor applies a change in memory, then hands the rows to a writer
//! and moves on; the caller waits for the commit, not the actor. A writer
//! takes everything queued, commits it in one transaction and only then
//! answers every caller, so under load one fsync covers many requests and at
//! one request nothing waits for company.
//!
//! Each org is pinned to one lane, so its batches commit in the order its
//! actor produced them. A lane's queue is bounded: an actor takes a
//! [`WriteSlot`] before it changes its memory, and when the queue is full a
//! request is refused as overloaded with nothing applied, instead of the
//! queue growing without limit. Barriers count batches rather than queue a
//! marker, so waiting for one's own writes never needs a slot.
//!
//! When a commit fails the writer retries each batch on its own; an org
//! whose batch still fails is marked as reloading: its later batches are
//! refused (they were built on memory that is now ahead of the store) until
//! its restarted actor reopens it, and `on_failure` asks for that restart.
//! When the store itself is unavailable, retrying batch by batch is no use:
//! every org of the commit is marked at once and the store marked down.
//!
//! After a commit, and before its callers are answered, its events go to
//! the org's live event streams (`EventHub`) with the ids the commit gave
//! them, in commit order; an org whose commit failed has its streams cut
//! off, since the commit may have landed all the same.
//!
//! Each transaction is recorded once in the lanes' shared `WriterStats`
//! (batches, rows, time), for the operator.
//!
//! With several nodes on one PostgreSQL, each node's lanes commit a share
//! of the orgs, so a node's commits are that much smaller and the same
//! work takes more of them, each costing the database about as much as a
//! large one. The lanes of a node therefore commit through a gate
//! ([`CommitGate`]) that lets lanes ÷ live nodes of them commit at once:
//! a lane that waits at it gathers what arrives meanwhile, and the cluster
//! makes about the commits one node would.
//!
//! At shutdown, after everything queued is committed, `close` stops the
//! lanes and closes their connections (SQLite's is the writer's own, outside
//! the pool), so that the database file is whole once the server is down.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{mpsc, oneshot, watch, Semaphore, SemaphorePermit};

use crate::domain::OrgId;
use crate::error::EngineError;
use crate::health::StoreHealth;
use crate::stats::WriterStats;
use crate::store::{Store, StoreError, WriteBatch, WriterConn};
use crate::watch::EventHub;

/// Resolves once the batch is durable (or failed).
pub type Commit = oneshot::Receiver<Result<(), StoreError>>;

/// How many batches one transaction may carry.
const MAX_BATCHES_PER_COMMIT: usize = 512;

type Job = (WriteBatch, oneshot::Sender<Result<(), StoreError>>);

/// Called with an org whose commit failed: its actor must reload.
pub type FailureHook = Arc<dyn Fn(OrgId) + Send + Sync>;

struct Lane {
    tx: mpsc::Sender<Job>,
    /// Batches handed to this lane so far; counted before they are queued.
    submitted: AtomicU64,
    /// Batches the writer has finished with (committed or refused).
    finished: watch::Receiver<u64>,
    /// Orgs whose batches are refused until their actor reopens them.
    reloading: Arc<Mutex<HashSet<OrgId>>>,
}

/// How many of a node's lanes may commit at once: all of them on a node
/// alone, their share when several nodes commit to one database. Turns
/// are given in the order lanes ask for them (the semaphore is fair): a
/// lane that wakes first must not take turn after turn while another
/// lane's callers wait.
struct CommitGate {
    permits: Semaphore,
    lanes: usize,
    /// The share last set: `lanes` at first.
    open: Mutex<usize>,
    /// Permits to retire as their turns end, after the gate narrowed while
    /// lanes held them.
    retiring: AtomicUsize,
}

/// A lane's turn to commit, given back (or retired) when dropped.
struct Turn<'a> {
    gate: &'a CommitGate,
    permit: Option<SemaphorePermit<'a>>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let retire = self
            .gate
            .retiring
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        if let (true, Some(permit)) = (retire, self.permit.take()) {
            permit.forget();
        }
    }
}

impl CommitGate {
    fn new(lanes: usize) -> Self {
        let lanes = lanes.max(1);
        CommitGate {
            permits: Semaphore::new(lanes),
            lanes,
            open: Mutex::new(lanes),
            retiring: AtomicUsize::new(0),
        }
    }

    /// Lanes that may commit at once when `nodes` live nodes share the
    /// database: `lanes / nodes`, at least one.
    fn share(lanes: usize, nodes: usize) -> usize {
        (lanes / nodes.max(1)).max(1)
    }

    /// Lets the share of `nodes` live nodes commit at once; turns already
    /// taken run to their end.
    fn share_among(&self, nodes: usize) {
        let wanted = Self::share(self.lanes, nodes);
        let mut open = self.open.lock().expect("not poisoned");
        if wanted < *open {
            let fewer = *open - wanted;
            let now = self.permits.forget_permits(fewer);
            self.retiring.fetch_add(fewer - now, Ordering::AcqRel);
        } else if wanted > *open {
            let more = wanted - *open;
            // Permits still to retire are kept instead of added.
            let kept = self
                .retiring
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    Some(n.saturating_sub(more))
                })
                .map_or(0, |before| before.min(more));
            self.permits.add_permits(more - kept);
        }
        *open = wanted;
    }

    async fn enter(&self) -> Turn<'_> {
        let permit = self.permits.acquire().await.ok();
        Turn { gate: self, permit }
    }

    /// Lanes that could take a turn now.
    #[cfg(test)]
    fn free(&self) -> usize {
        self.permits.available_permits()
    }
}

#[derive(Clone)]
pub struct Writers {
    lanes: Arc<Vec<Lane>>,
    gate: Arc<CommitGate>,
    stats: Arc<WriterStats>,
    /// Set once, by `close`: the lanes stop and close their connections.
    stop: Arc<watch::Sender<bool>>,
    tasks: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

/// A place in a lane's queue, taken before an actor changes its memory.
pub struct WriteSlot<'a> {
    lane: &'a Lane,
    permit: mpsc::Permit<'a, Job>,
}

impl WriteSlot<'_> {
    /// Queues a batch; the returned `Commit` resolves when it is durable.
    pub fn submit(self, batch: WriteBatch) -> Commit {
        let (tx, rx) = oneshot::channel();
        self.lane.submitted.fetch_add(1, Ordering::SeqCst);
        self.permit.send((batch, tx));
        rx
    }
}

impl Writers {
    /// Starts `lane_count` writer tasks, each with a queue of `queue_bound`
    /// batches; a SQLite writer's thread gets the nice value `sqlite_nice`.
    pub fn start(
        store: Store,
        sqlite_nice: i32,
        lane_count: usize,
        health: Arc<StoreHealth>,
        queue_bound: usize,
        on_failure: FailureHook,
        hub: Arc<EventHub>,
    ) -> Self {
        let mut lanes = Vec::new();
        let mut handles = Vec::new();
        let stats = Arc::new(WriterStats::default());
        let gate = Arc::new(CommitGate::new(lane_count));
        let (stop, stopped) = watch::channel(false);
        for _ in 0..lane_count.max(1) {
            let (tx, rx) = mpsc::channel(queue_bound.max(1));
            let (finished_tx, finished) = watch::channel(0);
            let reloading = Arc::new(Mutex::new(HashSet::new()));
            lanes.push(Lane {
                tx,
                submitted: AtomicU64::new(0),
                finished,
                reloading: reloading.clone(),
            });
            handles.push(tokio::spawn(run(
                ConnSource {
                    store: store.clone(),
                    sqlite_nice,
                },
                health.clone(),
                Queue {
                    rx,
                    finished: finished_tx,
                    stop: stopped.clone(),
                    gate: gate.clone(),
                },
                reloading,
                on_failure.clone(),
                stats.clone(),
                hub.clone(),
            )));
        }
        Self {
            lanes: Arc::new(lanes),
            gate,
            stats,
            stop: Arc::new(stop),
            tasks: Arc::new(Mutex::new(handles)),
        }
    }

    /// Stops every lane once it has nothing queued and closes its
    /// connection; returns when all are closed. A SQLite writer's
    /// connection is its own, outside the pool, and the last connection
    /// to close checkpoints the log away: closed here, before the pool,
    /// the database file is whole when the server has stopped.
    pub async fn close(&self) {
        self.stop.send_replace(true);
        let tasks = std::mem::take(&mut *self.tasks.lock().expect("not poisoned"));
        for task in tasks {
            let _ = task.await;
        }
    }

    /// `nodes` live nodes commit to this database: this node's lanes
    /// commit that share at once.
    pub fn share_among(&self, nodes: usize) {
        self.gate.share_among(nodes);
    }

    /// The commits of every lane so far.
    pub fn stats(&self) -> &WriterStats {
        &self.stats
    }

    fn lane(&self, org: OrgId) -> &Lane {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        org.hash(&mut h);
        &self.lanes[(h.finish() as usize) % self.lanes.len()]
    }

    /// A slot in the org's lane, or `Overloaded` when the queue is full.
    pub fn reserve(&self, org: OrgId) -> Result<WriteSlot<'_>, EngineError> {
        let lane = self.lane(org);
        match lane.tx.try_reserve() {
            Ok(permit) => Ok(WriteSlot { lane, permit }),
            Err(mpsc::error::TrySendError::Full(())) => Err(EngineError::Overloaded),
            Err(mpsc::error::TrySendError::Closed(())) => {
                Err(EngineError::Store(StoreError::WriterGone))
            }
        }
    }

    /// A slot in the org's lane, waiting for room: for the system's own
    /// writes (lease expiry), which nobody can be told to retry.
    pub async fn reserve_waiting(&self, org: OrgId) -> Result<WriteSlot<'_>, StoreError> {
        let lane = self.lane(org);
        let permit = lane
            .tx
            .reserve()
            .await
            .map_err(|_| StoreError::WriterGone)?;
        Ok(WriteSlot { lane, permit })
    }

    /// Waits until every batch this org queued so far is committed, so a
    /// read from the store sees them.
    pub async fn barrier(&self, org: OrgId) -> Result<(), StoreError> {
        wait_for_lane(self.lane(org)).await
    }

    /// Like `barrier`, and lifts a failure mark on the org.
    pub async fn reopen(&self, org: OrgId) -> Result<(), StoreError> {
        let lane = self.lane(org);
        wait_for_lane(lane).await?;
        lane.reloading.lock().expect("not poisoned").remove(&org);
        Ok(())
    }

    /// Waits until everything queued on every lane is committed.
    pub async fn flush_all(&self) -> Result<(), StoreError> {
        for lane in self.lanes.iter() {
            wait_for_lane(lane).await?;
        }
        Ok(())
    }

    /// Batches queued and not yet taken by a writer, over all lanes.
    pub fn queued(&self) -> usize {
        self.lanes
            .iter()
            .map(|l| l.tx.max_capacity() - l.tx.capacity())
            .sum()
    }
}

/// Waits until the writer has finished every batch submitted to `lane` so far.
async fn wait_for_lane(lane: &Lane) -> Result<(), StoreError> {
    let target = lane.submitted.load(Ordering::SeqCst);
    let mut finished = lane.finished.clone();
    finished
        .wait_for(|done| *done >= target)
        .await
        .map(|_| ())
        .map_err(|_| StoreError::WriterGone)
}

/// A lane's end of its queue: the batches in, how many it has finished
/// with out (for barriers), the signal to stop and the gate it commits
/// through.
struct Queue {
    rx: mpsc::Receiver<Job>,
    finished: watch::Sender<u64>,
    stop: watch::Receiver<bool>,
    /// Where the lane waits for its turn to commit.
    gate: Arc<CommitGate>,
}

/// Where a lane's connection comes from.
struct ConnSource {
    store: Store,
    sqlite_nice: i32,
}

/// Commits batches on the lane's own connection (taken again after a
/// failure, which may have broken it), unless a test simulates an outage,
/// and records the transaction.
async fn apply(
    source: &ConnSource,
    conn: &mut Option<WriterConn>,
    health: &StoreHealth,
    stats: &WriterStats,
    batches: &[&WriteBatch],
) -> Result<i64, StoreError> {
    if health.outage_simulated() {
        return Err(StoreError::Unavailable("simulated outage".into()));
    }
    let start = Instant::now();
    let result = match conn {
        Some(c) => c.apply(batches).await,
        None => match source.store.writer_conn(source.sqlite_nice).await {
            Ok(c) => conn.insert(c).apply(batches).await,
            Err(e) => Err(e),
        },
    };
    if result.is_err() {
        *conn = None;
    }
    let rows = batches.iter().map(|b| b.ops.len()).sum();
    stats.record(batches.len(), rows, start.elapsed(), result.is_ok());
    result
}

async fn run(
    source: ConnSource,
    health: Arc<StoreHealth>,
    queue: Queue,
    reloading: Arc<Mutex<HashSet<OrgId>>>,
    on_failure: FailureHook,
    stats: Arc<WriterStats>,
    hub: Arc<EventHub>,
) {
    let Queue {
        mut rx,
        finished,
        mut stop,
        gate,
    } = queue;
    let is_reloading = |org: &OrgId| reloading.lock().expect("not poisoned").contains(org);
    let mut conn: Option<WriterConn> = None;
    let mut queued = Vec::with_capacity(64);
    loop {
        let taken = tokio::select! {
            biased;
            taken = rx.recv_many(&mut queued, MAX_BATCHES_PER_COMMIT) => taken,
            _ = stop.wait_for(|stop| *stop) => 0,
        };
        if taken == 0 {
            break;
        }
        // Held until the commit is done; what arrives while it is awaited
        // joins this commit.
        let _turn = gate.enter().await;
        while queued.len() < MAX_BATCHES_PER_COMMIT {
            match rx.try_recv() {
                Ok(job) => queued.push(job),
                Err(_) => break,
            }
        }
        let taken = queued.len() as u64;
        let mut accepted: Vec<Job> = Vec::with_capacity(queued.len());
        for (batch, reply) in queued.drain(..) {
            if is_reloading(&batch.org) {
                let _ = reply.send(Err(StoreError::OrgReloading));
            } else {
                accepted.push((batch, reply));
            }
        }
        if !accepted.is_empty() {
            let batches: Vec<&WriteBatch> = accepted.iter().map(|(b, _)| b).collect();
            match apply(&source, &mut conn, &health, &stats, &batches).await {
                Ok(first_event) => {
                    hub.publish(&batches, first_event);
                    for (_, reply) in accepted {
                        let _ = reply.send(Ok(()));
                    }
                }
                Err(e) if e.is_unavailable() => {
                    health.observe(&e);
                    let message = e.to_string();
                    let mut failed: HashSet<OrgId> = HashSet::new();
                    for (batch, reply) in accepted {
                        if failed.insert(batch.org)
                            && reloading.lock().expect("not poisoned").insert(batch.org)
                        {
                            hub.cut_off(batch.org);
                            on_failure(batch.org);
                        }
                        let _ = reply.send(Err(StoreError::Unavailable(message.clone())));
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, batches = accepted.len(), "group commit failed; retrying batches one by one");
                    for (batch, reply) in accepted {
                        if is_reloading(&batch.org) {
                            let _ = reply.send(Err(StoreError::OrgReloading));
                            continue;
                        }
                        let result = apply(&source, &mut conn, &health, &stats, &[&batch]).await;
                        match &result {
                            Ok(first_event) => hub.publish(&[&batch], *first_event),
                            Err(e) => {
                                health.observe(e);
                                tracing::error!(org_id = %batch.org, error = %e, "commit failed; org will reload from the store");
                                reloading.lock().expect("not poisoned").insert(batch.org);
                                hub.cut_off(batch.org);
                                on_failure(batch.org);
                            }
                        }
                        let _ = reply.send(result.map(drop));
                    }
                }
            }
        }
        finished.send_modify(|done| *done += taken);
    }
    if let Some(conn) = conn {
        conn.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::CommitGate;

    #[test]
    fn a_nodes_lanes_commit_their_share_of_the_live_nodes_at_once() {
        assert_eq!(CommitGate::share(4, 1), 4);
        assert_eq!(CommitGate::share(4, 2), 2);
        assert_eq!(CommitGate::share(4, 3), 1);
        assert_eq!(CommitGate::share(4, 8), 1);
        assert_eq!(CommitGate::share(1, 0), 1);
    }

    /// Whether a lane could enter the gate now, without waiting.
    async fn enters_now(gate: &CommitGate) -> bool {
        tokio::select! {
            biased;
            _turn = gate.enter() => true,
            () = std::future::ready(()) => false,
        }
    }

    #[tokio::test]
    async fn the_gate_narrows_as_nodes_join_and_widens_as_they_leave() {
        let gate = CommitGate::new(4);
        let four = [
            gate.enter().await,
            gate.enter().await,
            gate.enter().await,
            gate.enter().await,
        ];
        assert!(!enters_now(&gate).await, "four lanes, four turns");
        gate.share_among(3);
        drop(four);
        let held = gate.enter().await;
        assert!(
            !enters_now(&gate).await,
            "with three nodes, one lane commits"
        );
        gate.share_among(1);
        assert!(
            enters_now(&gate).await,
            "a node alone commits on every lane"
        );
        drop(held);
        assert_eq!(gate.free(), 4);
    }

    #[tokio::test]
    async fn turns_held_while_the_gate_narrows_are_retired_as_they_end() {
        let gate = CommitGate::new(4);
        let (a, b) = (gate.enter().await, gate.enter().await);
        gate.share_among(4);
        gate.share_among(3);
        // Two free permits went at once; one of the two held is retired.
        assert_eq!(gate.free(), 0);
        drop(a);
        assert_eq!(gate.free(), 0);
        drop(b);
        assert_eq!(gate.free(), 1);
        // Narrowed and widened again before the held turns end: what was
        // to be retired is kept instead of added.
        gate.share_among(1);
        let four = [
            gate.enter().await,
            gate.enter().await,
            gate.enter().await,
            gate.enter().await,
        ];
        gate.share_among(3);
        gate.share_among(1);
        drop(four);
        assert_eq!(gate.free(), 4);
    }

    #[tokio::test]
    async fn a_lane_waiting_for_its_turn_gets_it_when_one_ends() {
        let gate = std::sync::Arc::new(CommitGate::new(2));
        gate.share_among(2);
        let held = gate.enter().await;
        let waiting = {
            let gate = gate.clone();
            tokio::spawn(async move {
                let _turn = gate.enter().await;
            })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(held);
        waiting.await.expect("the waiting lane committed");
    }
}
