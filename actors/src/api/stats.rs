//! `GET /admin/stats`: what the operator page shows, as the engine counts it.

use schemars::JsonSchema;
use serde::Serialize;

use super::{LastCount, Timestamp};
use crate::domain::account::Tier;
use crate::domain::OrgId;

/// The engine's state for its operator. Orgs whose actor has not run since
/// the server started are not listed: nothing about them is in memory.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct OperatorStats {
    pub generated_at: Timestamp,
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    pub store_up: bool,
    pub actors: ActorFigures,
    pub writer: WriterFigures,
    pub claim_cache: ClaimCacheFigures,
    /// Requests refused by a limit (429) since the server started.
    pub refusals_total: u64,
    /// Seconds ahead that `leases_expiring` counts.
    pub expiring_window_seconds: u32,
    /// By name, then id.
    pub orgs: Vec<OrgStats>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ActorFigures {
    /// Org actors running now.
    pub alive: usize,
    pub spawned: u64,
    /// Actor failures (each followed by a restart) since the server started.
    pub restarts: u64,
    pub idle_stops: u64,
    /// The most recent failure of any org.
    pub last_restart: Option<RestartView>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RestartView {
    pub org_id: OrgId,
    pub error: String,
    pub at: Timestamp,
}

/// Group commits: totals since the server started, and figures over the
/// most recent commits (`window_commits` of them).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct WriterFigures {
    pub commits: u64,
    pub batches: u64,
    pub rows: u64,
    /// Transactions that failed.
    pub failed_commits: u64,
    /// Batches waiting for a writer now.
    pub queued: usize,
    pub last: Option<CommitView>,
    pub window_commits: usize,
    pub batches_per_commit_mean: f64,
    pub batches_per_commit_max: u32,
    pub rows_per_commit_mean: f64,
    pub rows_per_commit_max: u32,
    pub latency_ms_p50: f64,
    pub latency_ms_p99: f64,
    pub latency_ms_max: f64,
}

/// The content of created tasks the org actors keep for their first
/// claim, all orgs together.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ClaimCacheFigures {
    pub bytes_used: usize,
    pub bytes_limit: usize,
    /// Claims since the server started answered with kept content.
    pub claims_kept: u64,
    /// Claims since the server started whose content was read from the store.
    pub claims_read: u64,
    /// Tasks whose content was read ahead of their claim, in bulk, and kept.
    pub tasks_refilled: u64,
}

/// One group commit.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CommitView {
    pub batches: u32,
    pub rows: u32,
    pub latency_ms: f64,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct OrgStats {
    pub org_id: OrgId,
    pub name: String,
    pub tier: Tier,
    /// Whether its actor is running now (an idle org's actor is stopped;
    /// its figures stay true, every change passes through the actor).
    pub actor_alive: bool,
    /// Open tasks by status; `null` when its actor never got to publish
    /// them (it failed while loading).
    pub tasks: Option<OpenTaskCounts>,
    /// Leases running.
    pub leases: usize,
    /// Leases expiring within the window.
    pub leases_expiring: usize,
    /// False when there are more than the engine samples (64): then
    /// `leases_expiring` is a lower bound.
    pub leases_expiring_exact: bool,
    pub next_lease_expiry: Option<Timestamp>,
    /// Claims waiting for a task (long polls).
    pub waiting_claims: usize,
    /// Actor failures of this org.
    pub restarts: u64,
    pub last_restart_error: Option<String>,
    pub last_restart_at: Option<Timestamp>,
    /// Requests of this org refused by a limit (429).
    pub refusals: u64,
    /// Days its finished tasks are kept; `null`: forever.
    pub retention_days: Option<i64>,
    /// What the store holds of it, as last counted (counted again in the
    /// background once a minute old); `null` until first counted.
    pub stored: Option<LastCount>,
}

/// Open tasks per status.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub struct OpenTaskCounts {
    pub pending: usize,
    pub in_progress: usize,
    pub blocked: usize,
    pub paused: usize,
    pub feedback: usize,
}
