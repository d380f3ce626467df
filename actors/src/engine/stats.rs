//! `GET /admin/stats`: the operator's figures, assembled from what the org
//! actors, the supervisor, the writers and the engine already count. No
//! store read, except an org's record the directory has not cached.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use super::Engine;
use crate::api::{
    ActorFigures, CommitView, OpenTaskCounts, OperatorStats, OrgStats, RestartView, Timestamp,
    WriterFigures,
};
use crate::domain::OrgId;
use crate::stats::{CommitSample, OrgSnapshot};

/// How far ahead `leases_expiring` looks.
const EXPIRING_WINDOW_SECONDS: u32 = 60;

impl Engine {
    /// The operator's figures: every org whose actor ran since the server
    /// started (orgs never loaded are not listed), actors, writers, limits.
    pub async fn operator_stats(&self) -> OperatorStats {
        let now = self.now();
        let actor_stats = &self.inner.stats;
        let failures: BTreeMap<OrgId, _> = actor_stats.failures().into_iter().collect();
        let mut snapshots: BTreeMap<OrgId, Option<OrgSnapshot>> = self
            .inner
            .snapshots
            .all()
            .into_iter()
            .map(|(org, s)| (org, Some(s)))
            .collect();
        for org in failures.keys() {
            snapshots.entry(*org).or_insert(None);
        }
        let deadline = now + i64::from(EXPIRING_WINDOW_SECONDS) * 1000;
        let mut orgs = Vec::with_capacity(snapshots.len());
        for (org, snapshot) in snapshots {
            let entry = match self.inner.directory.cached(org) {
                Some(entry) => entry,
                None => match self.inner.directory.get(org).await {
                    Ok(entry) => entry,
                    Err(_) => continue,
                },
            };
            let snapshot = snapshot.as_ref();
            let (leases_expiring, leases_expiring_exact) =
                snapshot.map_or((0, true), |s| s.leases_expiring_by(deadline));
            let failure = failures.get(&org);
            orgs.push(OrgStats {
                org_id: org,
                name: entry.record.name.clone(),
                tier: entry.record.tier,
                actor_alive: self.inner.routes.contains_key(&org),
                tasks: snapshot.map(|s| OpenTaskCounts {
                    pending: s.counts.pending,
                    in_progress: s.counts.in_progress,
                    blocked: s.counts.blocked,
                    paused: s.counts.paused,
                    feedback: s.counts.feedback,
                }),
                leases: snapshot.map_or(0, |s| s.leases),
                leases_expiring,
                leases_expiring_exact,
                next_lease_expiry: snapshot
                    .and_then(|s| s.earliest_expiries.first().copied())
                    .map(Timestamp),
                waiting_claims: snapshot.map_or(0, |s| s.waiting_claims),
                restarts: failure.map_or(0, |f| f.count),
                last_restart_error: failure.map(|f| f.last_error.clone()),
                last_restart_at: failure.map(|f| Timestamp(f.last_at)),
                refusals: self.inner.refusals.of(org),
                retention_days: entry.record.retention_days,
                stored: self.last_stored(org),
            });
        }
        orgs.sort_by(|a, b| (&a.name, a.org_id).cmp(&(&b.name, b.org_id)));
        let last_restart = failures
            .iter()
            .max_by_key(|(_, f)| f.last_at)
            .map(|(org, f)| RestartView {
                org_id: *org,
                error: f.last_error.clone(),
                at: Timestamp(f.last_at),
            });
        OperatorStats {
            generated_at: Timestamp(now),
            backend: self.backend(),
            store_up: !self.store_down(),
            actors: ActorFigures {
                alive: self.actors_alive(),
                spawned: actor_stats.spawned.load(Ordering::Relaxed),
                restarts: actor_stats.restarts.load(Ordering::Relaxed),
                idle_stops: actor_stats.idle_stops.load(Ordering::Relaxed),
                last_restart,
            },
            writer: self.writer_figures(),
            claim_cache: self.claim_cache(),
            refusals_total: self.inner.refusals.total(),
            expiring_window_seconds: EXPIRING_WINDOW_SECONDS,
            orgs,
        }
    }

    /// Requests refused by a limit (429) since the server started.
    pub fn refusals_total(&self) -> u64 {
        self.inner.refusals.total()
    }

    fn writer_figures(&self) -> WriterFigures {
        let stats = self.inner.writers.stats();
        let totals = stats.totals();
        let recent = stats.recent();
        let n = recent.len();
        let mean = |f: fn(&CommitSample) -> u32| {
            if n == 0 {
                0.0
            } else {
                recent.iter().map(|s| f64::from(f(s))).sum::<f64>() / n as f64
            }
        };
        let max = |f: fn(&CommitSample) -> u32| recent.iter().map(f).max().unwrap_or(0);
        let mut latencies: Vec<u64> = recent.iter().map(|s| s.micros).collect();
        latencies.sort_unstable();
        let ms = |micros: u64| micros as f64 / 1000.0;
        WriterFigures {
            commits: totals.commits,
            batches: totals.batches,
            rows: totals.rows,
            failed_commits: totals.failed,
            queued: self.writes_queued(),
            last: recent.last().map(|s| CommitView {
                batches: s.batches,
                rows: s.rows,
                latency_ms: ms(s.micros),
            }),
            window_commits: n,
            batches_per_commit_mean: mean(|s| s.batches),
            batches_per_commit_max: max(|s| s.batches),
            rows_per_commit_mean: mean(|s| s.rows),
            rows_per_commit_max: max(|s| s.rows),
            latency_ms_p50: ms(percentile(&latencies, 50)),
            latency_ms_p99: ms(percentile(&latencies, 99)),
            latency_ms_max: ms(latencies.last().copied().unwrap_or(0)),
        }
    }
}

/// The nearest-rank percentile of sorted values (0 when there are none).
fn percentile(sorted: &[u64], pct: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (pct * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50), 50);
        assert_eq!(percentile(&v, 99), 99);
        assert_eq!(percentile(&[7], 99), 7);
        assert_eq!(percentile(&[], 50), 0);
    }
}
