//! `--waiting N`: every org holds N tasks whose `run_at` is a year ahead
//! while the cycle runs, so the claim figures show what waiting tasks cost
//! the claims (nothing, if the org's index of waiting tasks is apart from
//! its claim index), and the server's CPU over a few idle seconds shows
//! what they cost while nothing happens (nothing, with one timer for the
//! earliest `run_at` and no poll).

use std::time::{Duration, Instant};

use serde::Serialize;
use taskq_process::ServerProcess;

use super::bootstrap::Agent;
use super::scenarios::{create_fixed_phase, Content};
use super::stats::PhaseResult;

/// How long the server is watched idle with its waiting tasks.
const IDLE: Duration = Duration::from_secs(5);

#[derive(Serialize)]
pub(super) struct WaitingSummary {
    per_org: u64,
    idle_secs: f64,
    /// Server CPU over the idle window, percent of one core.
    idle_server_cpu_pct: Option<f64>,
}

impl WaitingSummary {
    pub(super) fn render(&self) -> String {
        let pct = self
            .idle_server_cpu_pct
            .map_or_else(|| "unknown".to_owned(), |p| format!("{p:.2}%"));
        format!(
            "waiting: {} tasks per org wait a year; idle {:.1} s with them: server CPU {pct} of one core\n",
            self.per_org, self.idle_secs
        )
    }
}

/// Creates the waiting tasks, then watches the server idle.
pub(super) async fn fill(
    base: &str,
    agents: &[Agent],
    per_org: u64,
    server: Option<&ServerProcess>,
) -> anyhow::Result<(WaitingSummary, PhaseResult)> {
    let created = create_fixed_phase(base, agents, per_org, Content::Waiting).await?;
    let started = Instant::now();
    let before = match server {
        Some(s) => s.cpu_time().await,
        None => None,
    };
    tokio::time::sleep(IDLE).await;
    let after = match server {
        Some(s) => s.cpu_time().await,
        None => None,
    };
    let idle = started.elapsed();
    let idle_server_cpu_pct = match (before, after) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a).as_secs_f64() / idle.as_secs_f64() * 100.0),
        _ => None,
    };
    let summary = WaitingSummary {
        per_org,
        idle_secs: idle.as_secs_f64(),
        idle_server_cpu_pct,
    };
    Ok((summary, created))
}
