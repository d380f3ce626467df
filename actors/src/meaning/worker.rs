//! The embedding worker: one task for the server, taking orgs in turn, a
//! batch at a time; an embedder that is down pauses it, with retries that
//! back off, never a request.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::{index, Meaning, OrgMeaning, VECTOR_FIELD};
use crate::domain::{OrgId, StoredTask, TaskId};
use crate::embed::EmbedError;
use crate::error::EngineError;
use crate::views;

/// Texts per embedder call.
const BATCH: usize = 32;
/// Characters of a task's words that are embedded (MiniLM reads 256
/// tokens, about 1,000 characters of English; endpoints are spared more).
const MAX_TEXT_CHARS: usize = 2_000;
/// The longest an embedder call may take before it counts as down.
pub(super) const EMBED_TIMEOUT: Duration = Duration::from_secs(60);
/// Waits between retries while the embedder is down.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);
/// Beyond this many tasks waiting, new vectors are indexed without looking
/// for their neighbours.
const NEIGHBOURS_BACKLOG: usize = 64;
/// What the worker does with a batch that failed.
enum Failure {
    /// Put it back and wait: the embedder or the store is down.
    Retry(String),
    /// Give up on it until the org's index is loaded again.
    Drop(String),
}

impl From<EngineError> for Failure {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::StoreUnavailable => Failure::Retry(e.to_string()),
            EngineError::Store(ref s) if s.is_unavailable() => Failure::Retry(e.to_string()),
            other => Failure::Drop(other.to_string()),
        }
    }
}

impl From<crate::store::StoreError> for Failure {
    fn from(e: crate::store::StoreError) -> Self {
        EngineError::from(e).into()
    }
}

impl From<EmbedError> for Failure {
    fn from(e: EmbedError) -> Self {
        match e {
            EmbedError::Unavailable(_) => Failure::Retry(e.to_string()),
            EmbedError::BadAnswer(_) => Failure::Drop(e.to_string()),
        }
    }
}

/// The words of a task that are embedded: its title and description.
fn task_text(cipher: &crate::crypto::OrgCipher, t: &StoredTask) -> Result<String, EngineError> {
    let mut text = views::title(cipher, t)?
        .as_plain()
        .unwrap_or_default()
        .to_owned();
    if let Some(d) = views::description(cipher, t)? {
        if let Some(d) = d.as_plain() {
            text.push('\n');
            text.push_str(d);
        }
    }
    Ok(clip(text))
}

pub(super) fn clip(mut text: String) -> String {
    if let Some((cut, _)) = text.char_indices().nth(MAX_TEXT_CHARS) {
        text.truncate(cut);
    }
    text
}

pub(super) fn to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl Meaning {
    pub(super) async fn run(self: Arc<Self>) {
        let mut retry = RETRY_FIRST;
        loop {
            self.refresh_some();
            let Some((org, ids)) = self.next_batch().await else {
                self.wake.notified().await;
                continue;
            };
            let n = ids.len();
            let outcome = self.embed_batch(org, &ids).await;
            let om = self.entry(org);
            match outcome {
                Ok(()) => {
                    if self.down.swap(false, Ordering::Relaxed) {
                        tracing::info!("embedder answers again");
                    }
                    retry = RETRY_FIRST;
                    self.finish(&om, n);
                }
                Err(Failure::Drop(e)) => {
                    tracing::warn!(%org, tasks = n, error = %e, "tasks not embedded");
                    self.finish(&om, n);
                }
                Err(Failure::Retry(e)) => {
                    if !self.down.swap(true, Ordering::Relaxed) {
                        tracing::warn!(error = %e, "embedding paused until the embedder answers");
                    }
                    {
                        let mut p = om.pending.lock().expect("not poisoned");
                        for id in ids.into_iter().rev() {
                            if p.ids.insert(id) {
                                p.order.push_front(id);
                                self.backlog.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        p.in_flight -= n;
                    }
                    self.progress.notify_waiters();
                    self.take_turn(org, false);
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(RETRY_MAX);
                }
            }
        }
    }

    fn finish(&self, om: &OrgMeaning, n: usize) {
        om.pending.lock().expect("not poisoned").in_flight -= n;
        self.progress.notify_waiters();
    }

    /// Up to `BATCH` ids of the org whose turn it is; its index is loaded
    /// first (which may note more ids).
    async fn next_batch(&self) -> Option<(OrgId, Vec<TaskId>)> {
        loop {
            let org = self.turns.lock().expect("not poisoned").pop_front()?;
            let om = match self.loaded(org).await {
                Ok(om) => om,
                Err(e) => {
                    tracing::warn!(%org, error = %e, "org index not loaded");
                    let fail: Failure = e.into();
                    if let Failure::Retry(_) = fail {
                        self.take_turn(org, false);
                        tokio::time::sleep(RETRY_FIRST).await;
                    }
                    continue;
                }
            };
            let mut p = om.pending.lock().expect("not poisoned");
            let n = p.order.len().min(BATCH);
            let ids: Vec<TaskId> = p.order.drain(..n).collect();
            for id in &ids {
                p.ids.remove(id);
            }
            p.in_flight += n;
            let more = !p.order.is_empty();
            drop(p);
            self.backlog.fetch_sub(n, Ordering::Relaxed);
            if more {
                self.turns.lock().expect("not poisoned").push_back(org);
            }
            if n > 0 {
                return Some((org, ids));
            }
            self.progress.notify_waiters();
        }
    }

    /// Looks for the neighbours of entries a claim asked about.
    fn refresh_some(&self) {
        let batch: Vec<(OrgId, TaskId)> = {
            let mut r = self.refreshes.lock().expect("not poisoned");
            let n = r.len().min(BATCH);
            r.drain(..n).collect()
        };
        for (org, task) in batch {
            if let Some(om) = self.orgs.get(&org).map(|e| e.clone()) {
                om.index.write().expect("not poisoned").refresh(task);
            }
        }
    }

    async fn embed_batch(&self, org: OrgId, ids: &[TaskId]) -> Result<(), Failure> {
        let entry = self.directory.get(org).await?;
        let cipher = &entry.cipher;
        if !cipher.is_managed() {
            return Ok(());
        }
        let tasks = self.store.tasks(org, ids).await?;
        let mut texts = Vec::with_capacity(tasks.len());
        for t in &tasks {
            texts.push(task_text(cipher, t)?);
        }
        if texts.is_empty() {
            return Ok(());
        }
        let vectors = tokio::time::timeout(EMBED_TIMEOUT, self.embedder.embed(texts))
            .await
            .map_err(|_| Failure::Retry("the embedder did not answer in time".into()))??;
        if vectors.len() != tasks.len() {
            return Err(Failure::Drop(format!(
                "{} vectors for {} texts",
                vectors.len(),
                tasks.len()
            )));
        }
        let mut sealed = Vec::with_capacity(tasks.len());
        let mut normalised = Vec::with_capacity(tasks.len());
        for (t, mut v) in tasks.iter().zip(vectors) {
            if !index::normalise(&mut v) {
                v.iter_mut().for_each(|x| *x = 0.0);
            }
            let id = t.header.task_id;
            sealed.push((id, cipher.seal(id, VECTOR_FIELD, &to_bytes(&v))));
            normalised.push((id, t.header.created_at, v));
        }
        self.store
            .put_vectors(org, self.embedder.model(), &sealed)
            .await?;
        // Finding neighbours costs a scan of the org per task: worth it for
        // tasks just created, which a create is waiting on, not for a
        // backlog (a bulk load, a new model), whose neighbours are found
        // when a claim first asks for them.
        let with_neighbours = self.backlog() <= NEIGHBOURS_BACKLOG;
        let om = self.entry(org);
        let mut index = om.index.write().expect("not poisoned");
        for (id, created_at, v) in normalised {
            let put = if with_neighbours {
                index.insert(id, created_at, &v)
            } else {
                index.load(id, created_at, &v)
            };
            put.map_err(|e| Failure::Drop(e.to_string()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_whole_characters() {
        let long = "é".repeat(MAX_TEXT_CHARS + 5);
        assert_eq!(clip(long).chars().count(), MAX_TEXT_CHARS);
        assert_eq!(clip("short".into()), "short");
    }
}
