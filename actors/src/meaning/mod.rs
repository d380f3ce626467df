//! Meaning: task vectors for search, near-duplicates and prior art, made
//! off the request path.
//!
//! A create or an update of a title or description only notes the task's
//! id here once it has committed; the embedding worker (one task for the
//! whole server) reads the task's current words from the store, embeds
//! them in batches, seals and stores each vector and puts it into the
//! org's in-memory index. Nothing here ever holds an org actor up: claims
//! and writes go on while a model runs, and an embedder that is down only
//! leaves tasks waiting for their vectors.
//!
//! An org's index is loaded from the store the first time anything needs
//! it; tasks with no vector by the current model (created while no
//! embedder ran, or under another model, or whose words changed) are noted
//! then, so they are embedded in the background. BYOK orgs are never
//! embedded: the server cannot read their words.
//!
//! Orgs take turns, a batch at a time, so one org's backlog does not starve
//! another; a search or a create that waits for its org moves it to the
//! front.

pub mod index;
mod worker;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::{Notify, OnceCell};
use tokio::time::Instant;

use crate::directory::OrgDirectory;
use crate::domain::{OrgId, TaskId};
use crate::embed::{EmbedError, Embedder};
use crate::error::EngineError;
use crate::store::Store;
use index::{OrgIndex, Query, Scored};
use worker::{clip, EMBED_TIMEOUT};

/// Entries whose neighbours are waiting to be looked for, at most.
const MAX_REFRESHES: usize = 1_024;
/// The sealed field a vector is bound to.
const VECTOR_FIELD: &str = "vector";

/// The ids an org has waiting, in order, and how many are being embedded.
#[derive(Default)]
struct Pending {
    order: VecDeque<TaskId>,
    ids: HashSet<TaskId>,
    in_flight: usize,
}

struct OrgMeaning {
    loaded: OnceCell<()>,
    index: RwLock<OrgIndex>,
    pending: Mutex<Pending>,
}

pub struct Meaning {
    embedder: Arc<dyn Embedder>,
    store: Store,
    directory: Arc<OrgDirectory>,
    orgs: DashMap<OrgId, Arc<OrgMeaning>>,
    /// Orgs with ids waiting, each at most once, in turn.
    turns: Mutex<VecDeque<OrgId>>,
    /// Entries of loaded indexes whose neighbours should be looked for.
    refreshes: Mutex<VecDeque<(OrgId, TaskId)>>,
    /// Ids waiting across all orgs.
    backlog: AtomicUsize,
    /// The last batch failed because the embedder or the store was down.
    down: AtomicBool,
    /// Wakes the worker when there is work.
    wake: Notify,
    /// The worker finished a batch.
    progress: Notify,
}

fn from_bytes(b: &[u8]) -> Option<Vec<f32>> {
    b.len().is_multiple_of(4).then(|| {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    })
}

impl Meaning {
    pub fn new(embedder: Arc<dyn Embedder>, store: Store, directory: Arc<OrgDirectory>) -> Self {
        Meaning {
            embedder,
            store,
            directory,
            orgs: DashMap::new(),
            turns: Mutex::default(),
            refreshes: Mutex::default(),
            backlog: AtomicUsize::new(0),
            down: AtomicBool::new(false),
            wake: Notify::new(),
            progress: Notify::new(),
        }
    }

    /// Drops the org's index: another node owns the org now, and the index
    /// is loaded again from the store if this node owns it later.
    pub fn unload(&self, org: OrgId) {
        self.orgs.remove(&org);
    }

    /// Starts the embedding worker.
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.clone().run())
    }

    /// Ids waiting for a vector, across all orgs.
    pub fn backlog(&self) -> usize {
        self.backlog.load(Ordering::Relaxed)
    }

    /// Whether the worker is waiting for the embedder (or the store) to
    /// answer again.
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Relaxed)
    }

    fn entry(&self, org: OrgId) -> Arc<OrgMeaning> {
        self.orgs
            .entry(org)
            .or_insert_with(|| {
                Arc::new(OrgMeaning {
                    loaded: OnceCell::new(),
                    index: RwLock::default(),
                    pending: Mutex::default(),
                })
            })
            .clone()
    }

    /// Notes tasks whose words are new or changed; the worker embeds them.
    pub fn note(&self, org: OrgId, ids: impl IntoIterator<Item = TaskId>) {
        let om = self.entry(org);
        let mut added = 0;
        {
            let mut p = om.pending.lock().expect("not poisoned");
            for id in ids {
                if p.ids.insert(id) {
                    p.order.push_back(id);
                    added += 1;
                }
            }
        }
        if added > 0 {
            self.backlog.fetch_add(added, Ordering::Relaxed);
            self.take_turn(org, false);
        }
    }

    /// Queues the org for the worker; `urgent` puts it first.
    fn take_turn(&self, org: OrgId, urgent: bool) {
        let mut turns = self.turns.lock().expect("not poisoned");
        match turns.iter().position(|o| *o == org) {
            Some(i) if urgent && i > 0 => {
                turns.remove(i);
                turns.push_front(org);
            }
            Some(_) => {}
            None if urgent => turns.push_front(org),
            None => turns.push_back(org),
        }
        drop(turns);
        self.wake.notify_one();
    }

    /// The org's index, loaded from the store on first use.
    async fn loaded(&self, org: OrgId) -> Result<Arc<OrgMeaning>, EngineError> {
        let om = self.entry(org);
        om.loaded.get_or_try_init(|| self.load(org, &om)).await?;
        Ok(om)
    }

    async fn load(&self, org: OrgId, om: &OrgMeaning) -> Result<(), EngineError> {
        let entry = self.directory.get(org).await?;
        if !entry.cipher.is_managed() {
            return Ok(());
        }
        let model = self.embedder.model();
        let stored = self.store.org_vectors(org, model).await?;
        let missing = self.store.unembedded_tasks(org, model).await?;
        let mut loaded = 0;
        {
            let mut index = om.index.write().expect("not poisoned");
            for v in &stored {
                let bytes = entry.cipher.open(v.task_id, VECTOR_FIELD, &v.sealed);
                let Some(vector) = bytes.ok().and_then(|b| from_bytes(&b)) else {
                    tracing::warn!(%org, task = %v.task_id, "stored vector does not open; it is made again");
                    continue;
                };
                if index.load(v.task_id, v.created_at, &vector).is_ok() {
                    loaded += 1;
                }
            }
        }
        tracing::debug!(%org, loaded, missing = missing.len(), "org index loaded");
        self.note(org, missing);
        Ok(())
    }

    /// Waits until the org has no task waiting for a vector, or `within`
    /// has passed; loads the org's index first.
    pub async fn settle(&self, org: OrgId, within: Duration) -> Result<(), EngineError> {
        let deadline = Instant::now() + within;
        let om = self.loaded(org).await?;
        self.until(org, deadline, || {
            let p = om.pending.lock().expect("not poisoned");
            p.order.is_empty() && p.in_flight == 0
        })
        .await;
        Ok(())
    }

    /// Waits until every one of `ids` is in the org's index, or `within`
    /// has passed; false if some are not.
    pub async fn indexed(&self, org: OrgId, ids: &[TaskId], within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let Ok(Ok(om)) = tokio::time::timeout_at(deadline, self.loaded(org)).await else {
            return false;
        };
        self.until(org, deadline, || {
            let index = om.index.read().expect("not poisoned");
            ids.iter().all(|id| index.contains(*id))
        })
        .await
    }

    /// Puts the org first and waits until `done` holds after a batch, or
    /// `deadline` passes; whether it holds.
    async fn until(&self, org: OrgId, deadline: Instant, done: impl Fn() -> bool) -> bool {
        self.take_turn(org, true);
        loop {
            let progress = self.progress.notified();
            if done() {
                return true;
            }
            if tokio::time::timeout_at(deadline, progress).await.is_err() {
                return done();
            }
        }
    }

    /// Embeds a search query.
    pub async fn query(&self, text: &str) -> Result<Query, EngineError> {
        Ok(Query::new(&self.embed_text(text).await?))
    }

    /// One text's vector, unit length (all zeros when it has no direction).
    pub async fn embed_text(&self, text: &str) -> Result<Vec<f32>, EngineError> {
        let embedded = tokio::time::timeout(
            EMBED_TIMEOUT,
            self.embedder.embed(vec![clip(text.to_owned())]),
        )
        .await
        .map_err(|_| EngineError::EmbedderUnavailable)?;
        match embedded {
            Ok(mut v) if v.len() == 1 => {
                let mut v = v.swap_remove(0);
                if !index::normalise(&mut v) {
                    v.iter_mut().for_each(|x| *x = 0.0);
                }
                Ok(v)
            }
            Ok(_) | Err(EmbedError::BadAnswer(_)) => {
                Err(EngineError::Internal("the embedder answered badly".into()))
            }
            Err(EmbedError::Unavailable(e)) => {
                tracing::warn!(error = %e, "text not embedded");
                Err(EngineError::EmbedderUnavailable)
            }
        }
    }

    /// The `k` tasks of the org nearest to `query`, best first, among those
    /// created at or after `since`.
    pub async fn search(
        &self,
        org: OrgId,
        query: &Query,
        k: usize,
        since: Option<i64>,
    ) -> Result<Vec<Scored>, EngineError> {
        let om = self.loaded(org).await?;
        let index = om.index.read().expect("not poisoned");
        if index.is_empty() {
            return Ok(Vec::new());
        }
        Ok(index.top(query, k, since, &[]))
    }

    /// The vectors of these tasks that the org's index holds, loading it
    /// first if needed (for the report writers, which may wait).
    pub async fn vectors(
        &self,
        org: OrgId,
        ids: &[TaskId],
    ) -> Result<HashMap<TaskId, Vec<f32>>, EngineError> {
        let om = self.loaded(org).await?;
        let index = om.index.read().expect("not poisoned");
        Ok(ids
            .iter()
            .filter_map(|id| index.vector(*id).map(|v| (*id, v)))
            .collect())
    }

    /// A task's vector if its org's index is loaded and holds it; never
    /// waits.
    pub fn vector_now(&self, org: OrgId, task: TaskId) -> Option<Vec<f32>> {
        let om = self.orgs.get(&org).map(|e| e.clone())?;
        if !om.loaded.initialized() {
            return None;
        }
        let index = om.index.read().expect("not poisoned");
        index.vector(task)
    }

    /// A task's neighbours, if its org's index is loaded and they are
    /// known; never waits. Unknown neighbours are looked for in the
    /// background, so a later call may have them.
    pub fn neighbours(&self, org: OrgId, task: TaskId) -> Option<Vec<Scored>> {
        let om = self.orgs.get(&org).map(|e| e.clone());
        let Some(om) = om.filter(|om| om.loaded.initialized()) else {
            // Load the index in the background for the next time.
            self.take_turn(org, false);
            return None;
        };
        let index = om.index.read().expect("not poisoned");
        if let Some(n) = index.neighbours(task) {
            return Some(n.to_vec());
        }
        if index.lacks_neighbours(task) {
            let mut r = self.refreshes.lock().expect("not poisoned");
            if r.len() < MAX_REFRESHES && !r.contains(&(org, task)) {
                r.push_back((org, task));
                self.wake.notify_one();
            }
        }
        None
    }

    /// Bytes the loaded indexes hold, and how many tasks they hold.
    pub fn footprint(&self) -> (usize, usize) {
        self.orgs
            .iter()
            .map(|e| {
                let index = e.index.read().expect("not poisoned");
                (index.bytes(), index.len())
            })
            .fold((0, 0), |(b, n), (b2, n2)| (b + b2, n + n2))
    }
}

#[cfg(test)]
mod tests {
    use super::worker::to_bytes;
    use super::*;

    #[test]
    fn vectors_round_trip_through_bytes() {
        let v = vec![0.25f32, -1.5, 3.0e-7];
        assert_eq!(from_bytes(&to_bytes(&v)).unwrap(), v);
        assert!(from_bytes(&[1, 2, 3]).is_none());
    }
}
