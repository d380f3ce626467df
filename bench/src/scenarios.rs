//! The measured phases of each scenario: filling every org with tasks,
//! creating for a fixed time, claim+complete cycles, and the `idle-orgs`
//! run that creates many small orgs. Each agent is a task of its own that
//! records its figures locally.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::api::{AgentApi, Routes, BIG_BATCH};
use super::bootstrap::{Admin, Agent};
use super::stats::{AgentOutcome, Op, Phase, PhaseResult, Stats, ERROR_BACKOFF};
use super::BenchArgs;

/// Items per create request (the API's batch maximum).
const BATCH: u64 = 25;
/// Pause after a failed request, so a dead server is not hammered in a loop.
/// Tasks created in every org of the `idle-orgs` scenario.
const IDLE_ORG_TASKS: u64 = 3;
/// What the tasks a fill creates carry.
#[derive(Clone, Copy)]
pub(super) enum Content {
    /// A short title, description and metadata, 25 tasks a request.
    Small,
    /// The largest allowed content and output, `BIG_BATCH` tasks a request.
    Largest,
    /// A short title and a `run_at` a year ahead, 25 tasks a request.
    Waiting,
}

/// Creates `tasks_per_org` tasks in every org, in batches shared out among
/// the org's agents.
pub(super) async fn create_fixed_phase(
    base: &str,
    agents: &[Agent],
    tasks_per_org: u64,
    content: Content,
) -> anyhow::Result<PhaseResult> {
    let routes = Routes::new(base)?;
    let orgs = agents.iter().map(|a| a.org).max().map_or(0, |m| m + 1);
    let next_batch: Vec<Arc<AtomicU64>> = (0..orgs).map(|_| Arc::default()).collect();
    let per_request = match content {
        Content::Small | Content::Waiting => BATCH,
        Content::Largest => BIG_BATCH,
    };
    let batches = tasks_per_org.div_ceil(per_request);
    let mut phase = Phase::start("create", "tasks");
    for agent in agents {
        let api = AgentApi::new(&routes, &agent.key)?;
        let next = next_batch[agent.org].clone();
        let progress = phase.progress.clone();
        phase.tasks.spawn(async move {
            let mut outcome = AgentOutcome::default();
            loop {
                let batch = next.fetch_add(1, Ordering::Relaxed);
                if batch >= batches {
                    break;
                }
                let seq = batch * per_request;
                let count = per_request.min(tasks_per_org - seq);
                let created = match content {
                    Content::Small => api.create(seq, count).await,
                    Content::Largest => api.create_big(seq, count).await,
                    Content::Waiting => api.create_waiting(seq, count).await,
                };
                outcome.record(Op::Create, &progress, created, count).await;
            }
            outcome
        });
    }
    phase.finish().await
}

/// Every agent creates batches of 25 until `duration` has passed.
pub(super) async fn create_timed_phase(
    base: &str,
    agents: &[Agent],
    duration: Duration,
) -> anyhow::Result<PhaseResult> {
    let routes = Routes::new(base)?;
    let mut phase = Phase::start("create", "tasks");
    let deadline = phase.started + duration;
    for (n, agent) in agents.iter().enumerate() {
        let api = AgentApi::new(&routes, &agent.key)?;
        let progress = phase.progress.clone();
        // Distinct sequence numbers per agent keep titles unique.
        let mut seq = (n as u64) << 32;
        phase.tasks.spawn(async move {
            let mut outcome = AgentOutcome::default();
            while Instant::now() < deadline {
                outcome
                    .record(Op::Create, &progress, api.create(seq, BATCH).await, BATCH)
                    .await;
                seq += BATCH;
            }
            outcome
        });
    }
    phase.finish().await
}

/// Every agent reads its org's tasks in full pages, following the cursor
/// to the end and starting over, until `duration` has passed.
pub(super) async fn big_pages_phase(
    base: &str,
    agents: &[Agent],
    duration: Duration,
) -> anyhow::Result<PhaseResult> {
    let routes = Routes::new(base)?;
    let mut phase = Phase::start("pages", "pages");
    let deadline = phase.started + duration;
    for agent in agents {
        let api = AgentApi::new(&routes, &agent.key)?;
        let progress = phase.progress.clone();
        phase.tasks.spawn(async move {
            let mut outcome = AgentOutcome::default();
            let mut cursor: Option<String> = None;
            while Instant::now() < deadline {
                match api.full_page(cursor.as_deref()).await {
                    Ok((next, _bytes, latency)) => {
                        outcome.stats.op(Op::Page).ok(latency, 1);
                        progress.add(1);
                        cursor = next;
                    }
                    Err(e) => {
                        outcome.stats.op(Op::Page).err(e);
                        progress.error();
                        cursor = None;
                        tokio::time::sleep(ERROR_BACKOFF).await;
                    }
                }
            }
            outcome
        });
    }
    phase.finish().await
}

/// Every agent repeats claim + complete until `duration` has passed or its
/// org's queue is empty.
pub(super) async fn cycle_phase(
    base: &str,
    agents: &[Agent],
    duration: Duration,
    claim_batch: u32,
) -> anyhow::Result<PhaseResult> {
    let routes = Routes::new(base)?;
    let mut phase = Phase::start("cycle", "cycles");
    let started = phase.started;
    let deadline = started + duration;
    for agent in agents {
        let api = AgentApi::new(&routes, &agent.key)?;
        let progress = phase.progress.clone();
        phase.tasks.spawn(async move {
            let mut outcome = AgentOutcome::default();
            let stats = &mut outcome.stats;
            while Instant::now() < deadline {
                let cycle_started = Instant::now();
                let claimed = if claim_batch == 1 {
                    api.claim()
                        .await
                        .map(|(c, l)| (c.into_iter().collect::<Vec<_>>(), l))
                } else {
                    api.claim_batch(claim_batch).await
                };
                let tasks = match claimed {
                    Ok((tasks, latency)) => {
                        stats.op(Op::Claim).ok(latency, tasks.len() as u64);
                        if tasks.is_empty() {
                            outcome.drained_at = Some(started.elapsed());
                            break;
                        }
                        tasks
                    }
                    Err(e) => {
                        stats.op(Op::Claim).err(e);
                        stats.op(Op::Cycle).fail();
                        progress.error();
                        tokio::time::sleep(ERROR_BACKOFF).await;
                        continue;
                    }
                };
                let n = tasks.len() as u64;
                match api.complete(&tasks).await {
                    Ok(latency) => {
                        stats.op(Op::Complete).ok(latency, n);
                        stats.op(Op::Cycle).ok(cycle_started.elapsed(), n);
                        progress.add(n);
                    }
                    Err(e) => {
                        stats.op(Op::Complete).err(e);
                        stats.op(Op::Cycle).fail();
                        progress.error();
                        tokio::time::sleep(ERROR_BACKOFF).await;
                    }
                }
            }
            outcome
        });
    }
    phase.finish().await
}

/// Creates `--orgs` small orgs, `--concurrency` at a time: org, limits,
/// three tasks and one claim with the owner's key.
pub(super) async fn idle_orgs_phase(
    base: &str,
    token: &str,
    args: &BenchArgs,
    run_id: &str,
) -> anyhow::Result<PhaseResult> {
    let total = args.orgs as u64;
    let routes = Routes::new(base)?;
    let next = Arc::new(AtomicU64::new(0));
    let mut phase = Phase::start("idle-orgs", "orgs");
    for _ in 0..args.concurrency.min(args.orgs) {
        let admin = Admin::new(base, token, 1)?;
        let api = AgentApi::new(&routes, "")?;
        let run_id = run_id.to_owned();
        let next = next.clone();
        let progress = phase.progress.clone();
        phase.tasks.spawn(async move {
            let mut outcome = AgentOutcome::default();
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= total {
                    break;
                }
                let done = idle_org(
                    &admin,
                    &api,
                    &format!("bench-{run_id}-idle-{index}"),
                    &format!("owner-{index}@bench.local"),
                    &mut outcome.stats,
                )
                .await;
                if done {
                    progress.add(1);
                } else {
                    progress.error();
                    tokio::time::sleep(ERROR_BACKOFF).await;
                }
            }
            outcome
        });
    }
    phase.finish().await
}

/// One org of the `idle-orgs` scenario; false when a step failed (the
/// remaining steps are skipped).
async fn idle_org(
    admin: &Admin,
    connection: &AgentApi,
    name: &str,
    owner_email: &str,
    stats: &mut Stats,
) -> bool {
    let org = match admin.create_org(name, owner_email, 1).await {
        Ok((org, latency)) => {
            stats.op(Op::OrgCreate).ok(latency, 1);
            org
        }
        Err(e) => {
            stats.op(Op::OrgCreate).err(e);
            return false;
        }
    };
    match admin.lift_limits(&org.org_id).await {
        Ok(latency) => stats.op(Op::OrgLimits).ok(latency, 1),
        Err(e) => {
            stats.op(Op::OrgLimits).err(e);
            return false;
        }
    }
    let api = match connection.with_key(&org.owner.api_key) {
        Ok(api) => api,
        Err(e) => {
            stats.op(Op::Create).err(e.to_string());
            return false;
        }
    };
    match api.create(0, IDLE_ORG_TASKS).await {
        Ok(latency) => stats.op(Op::Create).ok(latency, IDLE_ORG_TASKS),
        Err(e) => {
            stats.op(Op::Create).err(e);
            return false;
        }
    }
    let claimed = match api.claim().await {
        Ok((claimed, latency)) => {
            stats
                .op(Op::Claim)
                .ok(latency, u64::from(claimed.is_some()));
            claimed
        }
        Err(e) => {
            stats.op(Op::Claim).err(e);
            return false;
        }
    };
    // Completing releases the lease, so the org's actor may go idle.
    if let Some(task) = claimed {
        match api.complete(std::slice::from_ref(&task)).await {
            Ok(latency) => stats.op(Op::Complete).ok(latency, 1),
            Err(e) => {
                stats.op(Op::Complete).err(e);
                return false;
            }
        }
    }
    true
}
