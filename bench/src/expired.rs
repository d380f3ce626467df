//! `--expired N`: the claims while the retention sweep removes N expired
//! tasks of another org.
//!
//! Before the cycle orgs are filled with the tasks the cycles claim, the
//! first org gets N tasks, claimed and completed in batches of 25 by its
//! agents (not measured), then a retention of one day, and the server's
//! clock (a build with the test hooks) moves two days on, so that every
//! one of them is expired: the sweep then removes them from the org whose
//! claims it measures, through the same actor and writer.
//! Just before the cycles a sweep starts, paced as the periodic one
//! (`POST /admin/test/retention/paced`), unless `--no-sweep` asks for the
//! same store without it: the pair compares the claims with and without
//! the sweep beside them. The report says how many tasks the sweep
//! removed during the cycles and, with `--expired-drain`, how long it took
//! to remove them all, the SQLite file's size before the fill, after it
//! and after the sweep, and after a second fill of N (the freed pages
//! taken again rather than the file grown).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, ensure, Context as _};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde_json::json;
use tokio::task::JoinSet;

use taskq_process::ServerProcess;

use super::api::{AgentApi, Routes};
use super::bootstrap::Admin;

const BATCH: u64 = 25;
const DAY_SECONDS: i64 = 86_400;

pub(super) struct Expired {
    admin: Admin,
    org_id: String,
    keys: Vec<String>,
    base: String,
    tasks: u64,
    sweep: bool,
    database: Option<PathBuf>,
    fill_secs: f64,
    settle_secs: Option<f64>,
    db_bytes_empty: Option<u64>,
    db_bytes_filled: Option<u64>,
    wal_bytes_filled: Option<u64>,
    /// Tasks of the org stored when the cycles began.
    stored_before: i64,
    sweep_started: Option<Instant>,
}

#[derive(Serialize)]
pub(super) struct ExpiredSummary {
    tasks: u64,
    swept: bool,
    fill_secs: f64,
    /// How long the spawned server took, after the fill, to finish the
    /// background work it left (settling the finished tasks' order)
    /// before the cycles began.
    settle_secs: Option<f64>,
    /// Tasks of the org stored when the cycles began (the expired ones and
    /// those the cycles claim) and when they ended.
    stored_at_start: i64,
    stored_at_end: i64,
    removed_during_cycles: i64,
    removed_per_sec: f64,
    /// With `--expired-drain`: from the sweep's start to its last task.
    drain_secs: Option<f64>,
    /// The SQLite database with its WAL, when the bench started the server
    /// on SQLite.
    db_bytes_empty: Option<u64>,
    db_bytes_filled: Option<u64>,
    db_bytes_swept: Option<u64>,
    db_bytes_refilled: Option<u64>,
    /// Of those, the WAL alone.
    wal_bytes_filled: Option<u64>,
    wal_bytes_swept: Option<u64>,
    wal_bytes_refilled: Option<u64>,
}

impl ExpiredSummary {
    pub(super) fn render(&self) -> String {
        let mb = |b: Option<u64>| {
            b.map_or_else(|| "-".to_owned(), |b| format!("{:.0} MB", b as f64 / 1e6))
        };
        format!(
            "expired: {} tasks filled in {:.1} s, settled in {}, sweep {}\n\
             stored at the cycles' start {}, at their end {}: {} removed, {:.0}/s\n\
             drained in {}; database empty {}, filled {}, swept {}, filled again {}\n\
             of which the log: filled {}, swept {}, filled again {}\n",
            self.tasks,
            self.fill_secs,
            self.settle_secs
                .map_or_else(|| "-".to_owned(), |s| format!("{s:.0} s")),
            if self.swept { "on" } else { "off" },
            self.stored_at_start,
            self.stored_at_end,
            self.removed_during_cycles,
            self.removed_per_sec,
            self.drain_secs
                .map_or_else(|| "-".to_owned(), |s| format!("{s:.1} s")),
            mb(self.db_bytes_empty),
            mb(self.db_bytes_filled),
            mb(self.db_bytes_swept),
            mb(self.db_bytes_refilled),
            mb(self.wal_bytes_filled),
            mb(self.wal_bytes_swept),
            mb(self.wal_bytes_refilled),
        )
    }
}

/// Waits until the server uses less than a twentieth of a core over a
/// second (at most five minutes); answers how long that took.
async fn until_idle(process: &ServerProcess) -> f64 {
    let started = Instant::now();
    eprintln!("[expired] waiting for the server to finish its background work");
    let mut last = process.cpu_time().await;
    while started.elapsed() < Duration::from_secs(300) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = process.cpu_time().await;
        match (last, now) {
            (Some(a), Some(b)) if b.saturating_sub(a) < Duration::from_millis(50) => break,
            (_, None) => break,
            _ => last = now,
        }
    }
    started.elapsed().as_secs_f64()
}

/// The SQLite file of a `sqlite://` URL, if that is what it is.
fn sqlite_file(database: &str) -> Option<PathBuf> {
    let rest = database.strip_prefix("sqlite://")?;
    let path = rest.split('?').next().unwrap_or(rest);
    Some(PathBuf::from(path))
}

/// The database file and its WAL, in bytes.
async fn db_bytes(file: Option<&Path>) -> Option<u64> {
    let main = tokio::fs::metadata(file?).await.ok()?.len();
    Some(main + wal_bytes(file).await?)
}

/// The database's WAL alone, in bytes.
async fn wal_bytes(file: Option<&Path>) -> Option<u64> {
    let mut wal = file?.as_os_str().to_owned();
    wal.push("-wal");
    Some(tokio::fs::metadata(&wal).await.map_or(0, |m| m.len()))
}

impl Expired {
    /// The org `org_id`, filled with `tasks` finished tasks that the moved
    /// clock makes expired, by its agents' `keys`.
    pub(super) async fn prepare(
        base: &str,
        admin: &Admin,
        org_id: &str,
        keys: Vec<String>,
        tasks: u64,
        sweep: bool,
        server: Option<(&ServerProcess, &str)>,
    ) -> anyhow::Result<Self> {
        let (process, database) = match server {
            Some((process, database)) => (Some(process), Some(database)),
            None => (None, None),
        };
        ensure!(
            !keys.is_empty(),
            "--expired needs an agent in the first org"
        );
        let database = database.and_then(sqlite_file);
        let db_bytes_empty = db_bytes(database.as_deref()).await;
        let mut expired = Expired {
            admin: admin.clone(),
            org_id: org_id.to_owned(),
            keys,
            base: base.to_owned(),
            tasks,
            sweep,
            database,
            fill_secs: 0.0,
            settle_secs: None,
            db_bytes_empty,
            db_bytes_filled: None,
            wal_bytes_filled: None,
            stored_before: 0,
            sweep_started: None,
        };
        let started = Instant::now();
        expired.fill().await?;
        expired.fill_secs = started.elapsed().as_secs_f64();
        expired.db_bytes_filled = db_bytes(expired.database.as_deref()).await;
        expired.wal_bytes_filled = wal_bytes(expired.database.as_deref()).await;
        expired
            .admin
            .call(
                Method::PATCH,
                &format!("/admin/orgs/{}", expired.org_id),
                &json!({ "retention_days": 1 }),
                StatusCode::OK,
            )
            .await
            .map_err(|e| anyhow!(e))?;
        expired
            .admin
            .call(
                Method::POST,
                "/admin/test/clock",
                &json!({ "advance_seconds": 2 * DAY_SECONDS }),
                StatusCode::OK,
            )
            .await
            .map_err(|e| anyhow!("{e} (--expired needs a server built with the test hooks)"))?;
        if let Some(process) = process {
            expired.settle_secs = Some(until_idle(process).await);
        }
        Ok(expired)
    }

    /// Creates `tasks` tasks in the org, then claims and completes them
    /// all, in batches of 25 over the fillers.
    async fn fill(&self) -> anyhow::Result<()> {
        eprintln!(
            "[expired] filling an org with {} finished tasks",
            self.tasks
        );
        let routes = Routes::new(&self.base)?;
        let next = Arc::new(AtomicU64::new(0));
        let mut fillers = JoinSet::new();
        for key in &self.keys {
            let api = AgentApi::new(&routes, key)?;
            let next = next.clone();
            let total = self.tasks;
            fillers.spawn(async move {
                loop {
                    let seq = next.fetch_add(BATCH, Ordering::Relaxed);
                    if seq >= total {
                        break;
                    }
                    api.create(seq, BATCH.min(total - seq))
                        .await
                        .map_err(|e| anyhow!(e))?;
                }
                loop {
                    let (claimed, _) = api
                        .claim_batch(BATCH as u32)
                        .await
                        .map_err(|e| anyhow!(e))?;
                    if claimed.is_empty() {
                        return anyhow::Ok(());
                    }
                    api.complete(&claimed).await.map_err(|e| anyhow!(e))?;
                }
            });
        }
        while let Some(joined) = fillers.join_next().await {
            joined.context("a filler failed")??;
        }
        Ok(())
    }

    /// The org's tasks the store holds now.
    async fn stored(&self) -> anyhow::Result<i64> {
        let (body, _) = self
            .admin
            .call(
                Method::GET,
                &format!("/admin/orgs/{}", self.org_id),
                &json!(null),
                StatusCode::OK,
            )
            .await
            .map_err(|e| anyhow!(e))?;
        let org: serde_json::Value = serde_json::from_slice(&body)?;
        org["stored"]["tasks"]
            .as_i64()
            .ok_or_else(|| anyhow!("GET /admin/orgs/{{id}} has no stored.tasks: {org}"))
    }

    /// Starts the sweep, unless `--no-sweep`: just before the cycles.
    pub(super) async fn start(&mut self) -> anyhow::Result<()> {
        self.stored_before = self.stored().await?;
        if self.sweep {
            self.admin
                .call(
                    Method::POST,
                    "/admin/test/retention/paced",
                    &json!(null),
                    StatusCode::ACCEPTED,
                )
                .await
                .map_err(|e| anyhow!(e))?;
            self.sweep_started = Some(Instant::now());
        }
        Ok(())
    }

    /// After the cycles: what the sweep removed meanwhile; with `drain`,
    /// also the time to remove them all and the file's sizes.
    pub(super) async fn summary(
        self,
        cycles: Duration,
        drain: bool,
    ) -> anyhow::Result<ExpiredSummary> {
        let stored_at_end = self.stored().await?;
        let removed = self.stored_before - stored_at_end;
        let mut summary = ExpiredSummary {
            tasks: self.tasks,
            swept: self.sweep,
            fill_secs: self.fill_secs,
            settle_secs: self.settle_secs,
            stored_at_start: self.stored_before,
            stored_at_end,
            removed_during_cycles: removed,
            removed_per_sec: removed as f64 / cycles.as_secs_f64().max(1e-9),
            drain_secs: None,
            db_bytes_empty: self.db_bytes_empty,
            db_bytes_filled: self.db_bytes_filled,
            db_bytes_swept: None,
            db_bytes_refilled: None,
            wal_bytes_filled: self.wal_bytes_filled,
            wal_bytes_swept: None,
            wal_bytes_refilled: None,
        };
        if let (true, Some(started)) = (drain, self.sweep_started) {
            let left = self.tasks as i64 - removed;
            eprintln!("[expired] waiting for the sweep to remove {left} more tasks");
            let kept = self.stored_before - self.tasks as i64;
            while self.stored().await? > kept {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            summary.drain_secs = Some(started.elapsed().as_secs_f64());
            summary.db_bytes_swept = db_bytes(self.database.as_deref()).await;
            summary.wal_bytes_swept = wal_bytes(self.database.as_deref()).await;
            self.fill().await?;
            summary.db_bytes_refilled = db_bytes(self.database.as_deref()).await;
            summary.wal_bytes_refilled = wal_bytes(self.database.as_deref()).await;
        }
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::sqlite_file;
    use std::path::PathBuf;

    #[test]
    fn the_sqlite_file_of_a_url() {
        assert_eq!(
            sqlite_file("sqlite:///tmp/x/taskq.db?mode=rwc"),
            Some(PathBuf::from("/tmp/x/taskq.db"))
        );
        assert_eq!(sqlite_file("postgres://h/db"), None);
    }
}
