//! Group commit: the only path by which org actors write.
//!
//! An org actor applies a change in memory, then hands the rows to a writer
//! and moves on; the caller waits for the commit, not the actor. A writer
//! takes everything queued, commits it in one transaction and only then
//! answers every caller, so under load one fsync covers many requests and at
//! one request nothing waits for company.
//!
//! Each org is pinned to one writer, so its batches commit in the order its
//! actor produced them. When a commit fails the writer retries each batch on
//! its own; an org whose batch still fails is marked as reloading: its later
//! batches are refused (they were built on memory that is now ahead of the
//! store) until its restarted actor reopens it, and `on_failure` asks the
//! supervisor for that restart.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::domain::OrgId;
use crate::store::{Store, StoreError, WriteBatch};

/// Resolves once the batch is durable (or failed).
pub type Commit = oneshot::Receiver<Result<(), StoreError>>;

/// How many batches one transaction may carry.
const MAX_BATCHES_PER_COMMIT: usize = 512;

enum WriterMsg {
    Write(WriteBatch, oneshot::Sender<Result<(), StoreError>>),
    /// Answered once everything queued before it is committed.
    Barrier(oneshot::Sender<()>),
    /// A restarted actor has reloaded from the store; accept its writes again.
    Reopen(OrgId, oneshot::Sender<()>),
}

pub type FailureHook = Arc<dyn Fn(OrgId) + Send + Sync>;

#[derive(Clone)]
pub struct Writers {
    lanes: Arc<Vec<mpsc::UnboundedSender<WriterMsg>>>,
}

impl Writers {
    /// Starts `store.writer_count()` writer tasks.
    pub fn start(
        store: Store,
        on_failure: FailureHook,
    ) -> (Self, Vec<tokio::task::JoinHandle<()>>) {
        let mut lanes = Vec::new();
        let mut handles = Vec::new();
        for _ in 0..store.writer_count() {
            let (tx, rx) = mpsc::unbounded_channel();
            lanes.push(tx);
            handles.push(tokio::spawn(run(store.clone(), rx, on_failure.clone())));
        }
        (
            Self {
                lanes: Arc::new(lanes),
            },
            handles,
        )
    }

    fn lane(&self, org: OrgId) -> &mpsc::UnboundedSender<WriterMsg> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        org.hash(&mut h);
        &self.lanes[(h.finish() as usize) % self.lanes.len()]
    }

    /// Queues a batch; the returned `Commit` resolves when it is durable.
    pub fn submit(&self, batch: WriteBatch) -> Commit {
        let (tx, rx) = oneshot::channel();
        let lane = self.lane(batch.org);
        if let Err(mpsc::error::SendError(WriterMsg::Write(_, tx))) =
            lane.send(WriterMsg::Write(batch, tx))
        {
            let _ = tx.send(Err(StoreError::WriterGone));
        }
        rx
    }

    /// Waits until every batch this org queued so far is committed, so a
    /// read from the store sees them.
    pub async fn barrier(&self, org: OrgId) -> Result<(), StoreError> {
        wait_behind(self.lane(org), WriterMsg::Barrier).await
    }

    /// Like `barrier`, and lifts a failure mark on the org.
    pub async fn reopen(&self, org: OrgId) -> Result<(), StoreError> {
        wait_behind(self.lane(org), |done| WriterMsg::Reopen(org, done)).await
    }

    /// Waits until everything queued on every lane is committed.
    pub async fn flush_all(&self) -> Result<(), StoreError> {
        for lane in self.lanes.iter() {
            wait_behind(lane, WriterMsg::Barrier).await?;
        }
        Ok(())
    }
}

/// Queues a marker on a lane and waits until the writer reaches it.
async fn wait_behind(
    lane: &mpsc::UnboundedSender<WriterMsg>,
    marker: impl FnOnce(oneshot::Sender<()>) -> WriterMsg,
) -> Result<(), StoreError> {
    let (done, reached) = oneshot::channel();
    lane.send(marker(done))
        .map_err(|_| StoreError::WriterGone)?;
    reached.await.map_err(|_| StoreError::WriterGone)
}

async fn run(store: Store, mut rx: mpsc::UnboundedReceiver<WriterMsg>, on_failure: FailureHook) {
    let mut reloading: HashSet<OrgId> = HashSet::new();
    let mut queued = Vec::with_capacity(64);
    while rx.recv_many(&mut queued, MAX_BATCHES_PER_COMMIT).await > 0 {
        let mut accepted: Vec<(WriteBatch, oneshot::Sender<Result<(), StoreError>>)> = Vec::new();
        let mut after_commit: Vec<oneshot::Sender<()>> = Vec::new();
        for msg in queued.drain(..) {
            match msg {
                WriterMsg::Write(batch, reply) if reloading.contains(&batch.org) => {
                    let _ = reply.send(Err(StoreError::OrgReloading));
                }
                WriterMsg::Write(batch, reply) => accepted.push((batch, reply)),
                WriterMsg::Barrier(reply) => after_commit.push(reply),
                WriterMsg::Reopen(org, reply) => {
                    reloading.remove(&org);
                    after_commit.push(reply);
                }
            }
        }
        if !accepted.is_empty() {
            let batches: Vec<&WriteBatch> = accepted.iter().map(|(b, _)| b).collect();
            match store.apply(&batches).await {
                Ok(()) => {
                    for (_, reply) in accepted {
                        let _ = reply.send(Ok(()));
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, batches = accepted.len(), "group commit failed; retrying batches one by one");
                    for (batch, reply) in accepted {
                        if reloading.contains(&batch.org) {
                            let _ = reply.send(Err(StoreError::OrgReloading));
                            continue;
                        }
                        let result = store.apply(&[&batch]).await;
                        if let Err(e) = &result {
                            tracing::error!(org_id = %batch.org, error = %e, "commit failed; org will reload from the store");
                            reloading.insert(batch.org);
                            on_failure(batch.org);
                        }
                        let _ = reply.send(result);
                    }
                }
            }
        }
        for reply in after_commit {
            let _ = reply.send(());
        }
    }
}
