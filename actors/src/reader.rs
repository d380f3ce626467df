//! Grouped point reads, the read-side twin of group commit.
//!
//! Every claim answers with its task's content, read from the store. Under
//! load many claims read at once; the reader takes every request queued,
//! serves them with one query, and answers each. At one request nothing
//! waits for company. Its queue is bounded: when it is full a read waits
//! for room (the claims it serves are already committed, so they are not
//! refused), which also slows whoever sends them.

use std::collections::HashMap;

use tokio::sync::{mpsc, oneshot};

use crate::domain::{OrgId, StoredTask, TaskId};
use crate::store::{Store, StoreError};

type Reply = oneshot::Sender<Result<Option<StoredTask>, StoreError>>;

/// Reads per query at most (two binds each, well under any bind limit).
const MAX_READS_PER_QUERY: usize = 256;

#[derive(Clone)]
pub struct TaskReader {
    tx: mpsc::Sender<(OrgId, TaskId, Reply)>,
}

impl TaskReader {
    pub fn start(store: Store, queue_bound: usize) -> Self {
        let (tx, rx) = mpsc::channel(queue_bound.max(1));
        tokio::spawn(run(store, rx));
        Self { tx }
    }

    /// One task, or `None` if the org has no such task.
    pub async fn get(&self, org: OrgId, task: TaskId) -> Result<Option<StoredTask>, StoreError> {
        self.ask(org, task).await?.wait().await
    }

    /// Queues the read of one task and answers the read's outcome, to be
    /// awaited later: reads queued together are served by one query.
    pub async fn ask(&self, org: OrgId, task: TaskId) -> Result<Answer, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send((org, task, reply))
            .await
            .map_err(|_| StoreError::WriterGone)?;
        Ok(Answer(Outcome::Queued(answer)))
    }
}

/// A read's outcome: queued, or known without a read.
pub struct Answer(Outcome);

enum Outcome {
    Known(Box<StoredTask>),
    Queued(oneshot::Receiver<Result<Option<StoredTask>, StoreError>>),
}

impl Answer {
    /// The outcome of a read that need not be made: the task is at hand.
    pub fn known(task: Box<StoredTask>) -> Self {
        Answer(Outcome::Known(task))
    }

    pub async fn wait(self) -> Result<Option<StoredTask>, StoreError> {
        match self.0 {
            Outcome::Known(task) => Ok(Some(*task)),
            Outcome::Queued(answer) => answer.await.map_err(|_| StoreError::WriterGone)?,
        }
    }
}

async fn run(store: Store, mut rx: mpsc::Receiver<(OrgId, TaskId, Reply)>) {
    let mut queued = Vec::with_capacity(64);
    while rx.recv_many(&mut queued, MAX_READS_PER_QUERY).await > 0 {
        let mut keys: Vec<(OrgId, TaskId)> = queued.iter().map(|(o, t, _)| (*o, *t)).collect();
        keys.sort();
        keys.dedup();
        match store.tasks_by_keys(&keys).await {
            Ok(found) => {
                let by_key: HashMap<(OrgId, TaskId), StoredTask> = found
                    .into_iter()
                    .map(|(org, t)| ((org, t.header.task_id), t))
                    .collect();
                for (org, task, reply) in queued.drain(..) {
                    let _ = reply.send(Ok(by_key.get(&(org, task)).cloned()));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "grouped read failed");
                let message = e.to_string();
                let unavailable = e.is_unavailable();
                for (_, _, reply) in queued.drain(..) {
                    let error = if unavailable {
                        StoreError::Unavailable(message.clone())
                    } else {
                        StoreError::ReadFailed(message.clone())
                    };
                    let _ = reply.send(Err(error));
                }
            }
        }
    }
}
