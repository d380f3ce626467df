//! The retention sweep: in the background, off the claim path, each org
//! that keeps finished tasks for a time loses those older than that, a
//! page at a time, through its own actor and the group-commit writer like
//! any other write of the org. Between pages the sweep yields, so claims
//! and writes of the same org pass in between, and while the writers are
//! busy with others' work (`writer_load`, as webhook deliveries yield) it
//! trickles. In a cluster a node sweeps only the orgs it owns.

use std::time::Duration;

use super::writer_load::{Pacer, Pacing};
use super::Engine;
use crate::domain::retention::{cutoff, pinned};
use crate::domain::{OrgId, TaskId};
use crate::error::EngineError;
use crate::org::OrgMsg;

/// How often the sweep runs: well within the hour the contract allows.
const SWEEP_EVERY: Duration = Duration::from_secs(600);
/// Tasks removed in one write: small, so a commit that carries them stays
/// short beside the claims in it.
const PAGE: usize = 100;
/// A background sweep's pages, and the pause after each: while the
/// writers are busy with others' work, at most 50 tasks a write and one
/// write per 100 ms, so an org that stays busy still loses its expired
/// tasks.
const PACED: Pacing = Pacing {
    step: PAGE,
    pause: Duration::from_millis(20),
    busy_step: 50,
    busy_pause: Duration::from_millis(100),
};
/// The test hook's sweep: at once.
const AT_ONCE: Pacing = Pacing::unpaced(PAGE);

impl Engine {
    /// Runs the sweep every `SWEEP_EVERY` until the engine stops.
    pub(super) async fn sweep_periodically(self) {
        loop {
            tokio::time::sleep(SWEEP_EVERY).await;
            if let Err(e) = self.sweep(PACED).await {
                tracing::warn!(error = %e, "retention sweep stopped early; it runs again later");
            }
        }
    }

    /// One sweep of every org, at once: answers how many tasks it removed
    /// (the test hook's way to await it).
    pub async fn sweep_retention(&self) -> Result<usize, EngineError> {
        self.sweep(AT_ONCE).await
    }

    /// One sweep of every org in the background, paced as the periodic
    /// one is (the test hook's way to measure claims beside a sweep).
    pub fn start_paced_sweep(&self) {
        let engine = self.clone();
        tokio::spawn(async move {
            match engine.sweep(PACED).await {
                Ok(removed) => tracing::info!(removed, "paced retention sweep done"),
                Err(e) => tracing::warn!(error = %e, "paced retention sweep stopped early"),
            }
        });
    }

    async fn sweep(&self, pacing: Pacing) -> Result<usize, EngineError> {
        let orgs = self.stored(self.inner.store.retained_orgs().await)?;
        let mut removed = 0;
        for (org, days) in orgs {
            if let Some(cluster) = &self.inner.cluster {
                if !cluster.serves(org) {
                    continue;
                }
            }
            removed += self.sweep_org(org, days, pacing).await?;
        }
        Ok(removed)
    }

    async fn sweep_org(&self, org: OrgId, days: i64, pacing: Pacing) -> Result<usize, EngineError> {
        let cutoff = cutoff(self.now(), days);
        self.request(org, |reply| OrgMsg::SweepBegins { reply })
            .await?;
        let swept = self.sweep_pages(org, cutoff, pacing).await;
        self.request(org, |reply| OrgMsg::SweepEnds { reply })
            .await?;
        swept
    }

    /// The sweep's pages, once the org's actor pins what tasks written from
    /// now on name.
    async fn sweep_pages(
        &self,
        org: OrgId,
        cutoff: i64,
        pacing: Pacing,
    ) -> Result<usize, EngineError> {
        let store = &self.inner.store;
        let referrers = self.stored(store.referrers(org, cutoff).await)?;
        let kept = pinned(&referrers);
        self.request(org, |reply| OrgMsg::SweepRead {
            referrers: referrers.clone(),
            reply,
        })
        .await?;
        let mut after: Option<TaskId> = None;
        let mut removed = 0;
        let mut pacer = Pacer::new(pacing);
        let mut writes = 0;
        loop {
            let pace = pacer.pace(self, writes);
            let page = self.stored(store.eligible_tasks(org, cutoff, after, pace.limit).await)?;
            let Some(last) = page.last().copied() else {
                return Ok(removed);
            };
            after = Some(last);
            let task_ids: Vec<TaskId> = page.into_iter().filter(|t| !kept.contains(t)).collect();
            if !task_ids.is_empty() {
                writes += 1;
                removed += self
                    .request(org, |reply| OrgMsg::Prune {
                        task_ids: task_ids.clone(),
                        cutoff,
                        reply,
                    })
                    .await?;
            }
            Pacer::pause(pace).await;
        }
    }
}
