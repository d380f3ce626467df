//! What the task API gets from meaning: search, near-duplicates and
//! suggested tags on create results, prior art in claim context.
//!
//! Each answers only what the vectors already say, within a budget: a
//! create waits for its own tasks' vectors at most `create_budget` (and not
//! at all while the worker has a backlog), a claim never waits. Search
//! waits for the org's backlog a little longer, since results must be
//! filled up to the limit.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::Engine;
use crate::api::{
    CreatedItem, PriorArt, SearchAnswer, SearchHit, SearchTasks, SimilarTask, Unavailable,
};
use crate::domain::account::{Caller, Encryption, Tier};
use crate::domain::usage::RequestKind;
use crate::domain::{OrgId, StoredTask, TaskId, TaskStatus};
use crate::error::EngineError;
use crate::meaning::index::Scored;
use crate::views;

/// The score from which an open task counts as a near-duplicate.
pub const NEAR_DUPLICATE_SCORE: f32 = 0.9;
/// How long a search waits for its org's backlog to be embedded.
const SEARCH_SETTLE: Duration = Duration::from_secs(10);
/// Beyond this many tasks waiting across orgs, a create does not wait.
const CREATE_WAIT_BACKLOG: usize = 64;
/// Neighbours whose tags a suggestion draws on, and tags suggested.
const TAG_NEIGHBOURS: usize = 5;
const MAX_SUGGESTED_TAGS: usize = 3;
/// Prior art listed in a claim's context.
const MAX_PRIOR_ART: usize = 3;
/// The free tier searches this far back.
const FREE_WINDOW_MS: i64 = 90 * 24 * 60 * 60 * 1000;

/// The embedding worker's figures, for `/metrics`.
#[derive(Debug, Clone, Copy)]
pub struct MeaningStats {
    /// Tasks waiting for a vector.
    pub backlog: usize,
    /// Vectors in the loaded indexes, and the bytes they take.
    pub indexed_tasks: usize,
    pub index_bytes: usize,
}

impl Engine {
    /// `None` without an embedder.
    pub fn meaning_stats(&self) -> Option<MeaningStats> {
        let meaning = self.inner.meaning.as_ref()?;
        let (index_bytes, indexed_tasks) = meaning.footprint();
        Some(MeaningStats {
            backlog: meaning.backlog(),
            indexed_tasks,
            index_bytes,
        })
    }

    /// Why `POST /tasks/search` would answer `unavailable` for the
    /// caller's org, if it would: its content is the client's (BYOK), or
    /// the server has no embedder. Reads the org's cached record only, and
    /// is not counted, so a page may ask it before offering a search.
    pub async fn search_unavailable(
        &self,
        caller: &Caller,
    ) -> Result<Option<Unavailable>, EngineError> {
        if let Some(unavailable) = self.unreadable_content(caller).await? {
            return Ok(Some(unavailable));
        }
        Ok(self
            .inner
            .meaning
            .is_none()
            .then(|| Unavailable::because("not_configured")))
    }

    /// `POST /tasks/search`.
    pub async fn search_tasks(
        &self,
        caller: &Caller,
        request: SearchTasks,
    ) -> Result<SearchAnswer, EngineError> {
        self.admit(caller, RequestKind::Read).await?;
        if let Some(unavailable) = self.search_unavailable(caller).await? {
            return Ok(SearchAnswer::Unavailable(unavailable));
        }
        let Some(meaning) = &self.inner.meaning else {
            return Ok(SearchAnswer::Unavailable(Unavailable::because(
                "not_configured",
            )));
        };
        self.check_store()?;
        let org = caller.org_id;
        let entry = self.inner.directory.get(org).await?;
        let since =
            (entry.record.tier == Tier::Free).then(|| self.inner.clock.now_ms() - FREE_WINDOW_MS);
        let (settled, query) = tokio::join!(
            meaning.settle(org, SEARCH_SETTLE),
            meaning.query(&request.query)
        );
        settled?;
        let hits = meaning
            .search(org, &query?, usize::from(request.limit), since)
            .await?;
        let tasks = self.tasks_by_id(org, &hits).await?;
        let mut results = Vec::with_capacity(hits.len());
        for hit in &hits {
            let Some(t) = tasks.get(&hit.task_id) else {
                continue;
            };
            let status = t.header.status;
            results.push(SearchHit {
                task_id: hit.task_id,
                title: views::title(&entry.cipher, t)?,
                status,
                output: if status == TaskStatus::Completed {
                    views::output(&entry.cipher, t)?
                } else {
                    None
                },
                score: hit.score,
            });
        }
        Ok(SearchAnswer::Results { results })
    }

    pub(super) async fn tasks_by_id(
        &self,
        org: OrgId,
        hits: &[Scored],
    ) -> Result<HashMap<TaskId, StoredTask>, EngineError> {
        let ids: Vec<TaskId> = hits.iter().map(|h| h.task_id).collect();
        Ok(self
            .stored(self.inner.store.tasks(org, &ids).await)?
            .into_iter()
            .map(|t| (t.header.task_id, t))
            .collect())
    }

    /// Whether meaning serves this org: an embedder runs and the server
    /// can read the org's words.
    async fn meaning_serves(&self, org: OrgId) -> Result<bool, EngineError> {
        if self.inner.meaning.is_none() {
            return Ok(false);
        }
        let entry = self.inner.directory.get(org).await?;
        Ok(entry.record.encryption == Encryption::Managed)
    }

    /// Notes tasks whose words changed, for the embedding worker.
    pub(super) async fn note_words(&self, org: OrgId, ids: Vec<TaskId>) {
        if ids.is_empty() || !self.meaning_serves(org).await.unwrap_or(false) {
            return;
        }
        if let Some(meaning) = &self.inner.meaning {
            meaning.note(org, ids);
        }
    }

    /// Adds near-duplicates and suggested tags to a create's results, when
    /// the new tasks' vectors come within the budget. Best effort: a
    /// failure here leaves the fields absent, never fails the create.
    pub(super) async fn enrich_created(&self, org: OrgId, results: &mut [CreatedItem]) {
        let Some(meaning) = &self.inner.meaning else {
            return;
        };
        let ids: Vec<TaskId> = results.iter().map(|r| r.task_id).collect();
        if !self.meaning_serves(org).await.unwrap_or(false) {
            return;
        }
        let wait = meaning.backlog() <= CREATE_WAIT_BACKLOG && !meaning.is_down();
        meaning.note(org, ids.iter().copied());
        if !wait || !meaning.indexed(org, &ids, self.inner.create_budget).await {
            return;
        }
        if let Err(e) = self.near_tasks(org, results).await {
            tracing::debug!(%org, error = %e, "create results without near tasks");
        }
    }

    async fn near_tasks(&self, org: OrgId, results: &mut [CreatedItem]) -> Result<(), EngineError> {
        let Some(meaning) = &self.inner.meaning else {
            return Ok(());
        };
        let neighbours: Vec<Vec<Scored>> = results
            .iter()
            .map(|r| meaning.neighbours(org, r.task_id).unwrap_or_default())
            .collect();
        let mut wanted: Vec<Scored> = neighbours.iter().flatten().copied().collect();
        wanted.extend(results.iter().map(|r| Scored {
            task_id: r.task_id,
            score: 1.0,
        }));
        let tasks = self.tasks_by_id(org, &wanted).await?;
        let entry = self.inner.directory.get(org).await?;
        let vocabulary: HashSet<String> = self
            .stored(self.inner.store.org_tags(org).await)?
            .into_iter()
            .map(|t| t.name)
            .collect();
        for (item, near) in results.iter_mut().zip(&neighbours) {
            let mut similar = Vec::new();
            for n in near.iter().filter(|n| n.score >= NEAR_DUPLICATE_SCORE) {
                if let Some(t) = tasks
                    .get(&n.task_id)
                    .filter(|t| !t.header.status.is_terminal())
                {
                    similar.push(SimilarTask {
                        task_id: n.task_id,
                        title: views::title(&entry.cipher, t)?,
                        score: n.score,
                    });
                }
            }
            item.similar_open_tasks = (!similar.is_empty()).then_some(similar);
            let own: &[String] = tasks
                .get(&item.task_id)
                .map_or(&[], |t| t.header.tags.as_slice());
            item.suggested_tags = Some(suggest_tags(
                near.iter()
                    .take(TAG_NEIGHBOURS)
                    .filter_map(|n| tasks.get(&n.task_id).map(|t| (n.score, &t.header.tags[..]))),
                own,
                &vocabulary,
            ));
        }
        Ok(())
    }

    /// Completed tasks near the claimed one, with their output; never
    /// waits for a vector. Paid tiers, managed orgs.
    pub(super) async fn prior_art(
        &self,
        org: OrgId,
        task: TaskId,
    ) -> Result<Option<Vec<PriorArt>>, EngineError> {
        let Some(meaning) = &self.inner.meaning else {
            return Ok(None);
        };
        let entry = self.inner.directory.get(org).await?;
        if entry.record.tier == Tier::Free || entry.record.encryption != Encryption::Managed {
            return Ok(None);
        }
        let Some(near) = meaning.neighbours(org, task) else {
            return Ok(None);
        };
        if near.is_empty() {
            return Ok(None);
        }
        let tasks = self.tasks_by_id(org, &near).await?;
        let mut art = Vec::new();
        for n in &near {
            let Some(t) = tasks.get(&n.task_id) else {
                continue;
            };
            if t.header.status != TaskStatus::Completed || art.len() == MAX_PRIOR_ART {
                continue;
            }
            art.push(PriorArt {
                task_id: n.task_id,
                title: views::title(&entry.cipher, t)?,
                output: views::output(&entry.cipher, t)?,
                score: n.score,
            });
        }
        Ok((!art.is_empty()).then_some(art))
    }
}

/// Tags the nearest tasks carry and the new one lacks, weighted by how
/// near each task is, heaviest first; only tags still in the vocabulary.
fn suggest_tags<'a>(
    near: impl Iterator<Item = (f32, &'a [String])>,
    own: &[String],
    vocabulary: &HashSet<String>,
) -> Vec<String> {
    let mut weights: Vec<(String, f32)> = Vec::new();
    for (score, tags) in near {
        for tag in tags {
            if own.contains(tag) || !vocabulary.contains(tag) {
                continue;
            }
            match weights.iter_mut().find(|(t, _)| t == tag) {
                Some((_, w)) => *w += score,
                None => weights.push((tag.clone(), score)),
            }
        }
    }
    weights.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    weights
        .into_iter()
        .take(MAX_SUGGESTED_TAGS)
        .map(|(t, _)| t)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn suggested_tags_are_weighted_new_and_in_the_vocabulary() {
        let vocabulary: HashSet<String> =
            tags(&["ci", "infra", "docs", "db"]).into_iter().collect();
        let (a, b, c) = (
            tags(&["ci", "infra"]),
            tags(&["ci", "gone"]),
            tags(&["docs", "db"]),
        );
        let near = [(0.8, &a[..]), (0.7, &b[..]), (0.6, &c[..])];
        let got = suggest_tags(near.into_iter(), &tags(&["infra"]), &vocabulary);
        // ci weighs 1.5; docs and db tie at 0.6 and go by name; "gone" left
        // the vocabulary and "infra" is the task's own.
        assert_eq!(got, tags(&["ci", "db", "docs"]));
        assert!(suggest_tags(std::iter::empty(), &[], &vocabulary).is_empty());
    }
}
