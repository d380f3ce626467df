//! The `longpoll` scenario: every agent long-polls (`wait_seconds` 30) an
//! org with nothing to do.
//!
//! Two windows of `--duration` seconds each:
//! - idle: all agents are waiting in the server (its `taskq_claim_waiters`
//!   gauge says so) and nothing else happens; the figure is the server's CPU
//!   time over the window, as a share of one core (a spawned server only).
//! - delivery: one producer per org creates a task at a time, a few
//!   milliseconds apart; each agent that receives one completes it and
//!   waits again. The figure is, per task, the time from the producer
//!   reading the create's answer to the agent reading the claim's answer.
//!   Both may be answered by the same group commit, so the claim can land
//!   first: such tasks count as 0 ms and are also counted apart.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::json;
use taskq_process::ServerProcess;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::api::{exchange, http_client, AgentApi, Routes};
use super::bootstrap::{Admin, Agent};
use super::stats::Op;

const WAIT_BODY: &str = r#"{"wait_seconds":30,"lease_seconds":300,"include_context":false}"#;
/// Pause between a producer's creates: arrivals are sparse, as for an
/// idle fleet that gets work now and then.
const PRODUCER_PAUSE: Duration = Duration::from_millis(5);

#[derive(Serialize)]
pub(super) struct LongPollSummary {
    /// Claims waiting when the idle window began.
    waiters: u64,
    idle_secs: f64,
    /// Server CPU over the idle window, percent of one core.
    idle_server_cpu_pct: Option<f64>,
    delivered: u64,
    /// Created but not claimed by the end of the delivery window.
    undelivered: u64,
    delivery_p50_ms: Option<f64>,
    delivery_p99_ms: Option<f64>,
    delivery_max_ms: Option<f64>,
    /// Claims answered before their task's create answer was read.
    claimed_before_create_answer: u64,
    errors: u64,
    error_samples: Vec<String>,
}

impl LongPollSummary {
    pub(super) fn render(&self) -> String {
        let pct = self
            .idle_server_cpu_pct
            .map_or_else(|| "? (external server)".to_owned(), |p| format!("{p:.2}%"));
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
        let mut out = format!(
            "long poll: {} waiting claims; idle {:.1} s: server CPU {pct} of one core\n\
             delivery: {} tasks claimed ({} not), create answer -> claim answer \
             p50 {} ms, p99 {} ms, max {} ms; {} claimed before the create's answer\n",
            self.waiters,
            self.idle_secs,
            self.delivered,
            self.undelivered,
            ms(self.delivery_p50_ms),
            ms(self.delivery_p99_ms),
            ms(self.delivery_max_ms),
            self.claimed_before_create_answer,
        );
        if self.errors > 0 {
            out.push_str(&format!("errors: {}\n", self.errors));
            for e in &self.error_samples {
                out.push_str(&format!("  {e}\n"));
            }
        }
        out
    }
}

#[derive(Deserialize)]
struct ClaimedTask {
    task_id: String,
    lease_id: Option<String>,
}

#[derive(Deserialize)]
struct Created {
    results: Vec<CreatedItem>,
}

#[derive(Deserialize)]
struct CreatedItem {
    task_id: String,
}

/// What one agent saw: the tasks it claimed and when.
#[derive(Default)]
struct AgentLog {
    claims: Vec<(String, Instant)>,
    errors: Vec<String>,
}

pub(super) async fn longpoll_phase(
    base: &str,
    admin: &Admin,
    agents: &[Agent],
    duration: Duration,
    server: Option<&ServerProcess>,
) -> anyhow::Result<(LongPollSummary, super::stats::PhaseResult)> {
    let routes = Routes::new(base)?;
    let (stop_tx, stop) = watch::channel(false);
    let mut tasks: JoinSet<AgentLog> = JoinSet::new();
    for agent in agents {
        let api = AgentApi::new(&routes, &agent.key)?;
        let mut stop = stop.clone();
        tasks.spawn(async move {
            let mut log = AgentLog::default();
            loop {
                let answer = tokio::select! {
                    answer = api.claim_with(WAIT_BODY) => answer,
                    _ = stop.wait_for(|s| *s) => break,
                };
                let body = match answer {
                    Ok((body, _)) => body,
                    Err(e) => {
                        log.errors.push(e);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                let at = Instant::now();
                let Ok(Some(task)) = serde_json::from_slice::<Option<ClaimedTask>>(&body) else {
                    continue;
                };
                log.claims.push((task.task_id.clone(), at));
                let claimed = super::api::Claimed::new(task.task_id, task.lease_id);
                if let Err(e) = api.complete(std::slice::from_ref(&claimed)).await {
                    log.errors.push(e);
                }
            }
            log
        });
    }

    let agents_n = agents.len() as u64;
    let ready_by = Instant::now() + Duration::from_secs(30);
    let waiters = loop {
        let waiting = admin.claim_waiters().await.unwrap_or(0);
        if waiting >= agents_n || Instant::now() > ready_by {
            break waiting;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("[longpoll] {waiters} claims waiting; idle for {duration:?}");

    let idle_started = Instant::now();
    let cpu_before = match server {
        Some(s) => s.cpu_time().await,
        None => None,
    };
    tokio::time::sleep(duration).await;
    let cpu_after = match server {
        Some(s) => s.cpu_time().await,
        None => None,
    };
    let idle = idle_started.elapsed();
    let idle_server_cpu_pct = match (cpu_before, cpu_after) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a).as_secs_f64() / idle.as_secs_f64() * 100.0),
        _ => None,
    };

    eprintln!("[longpoll] delivering tasks for {duration:?}");
    let mut phase = super::stats::Phase::start("longpoll", "tasks");
    let orgs = agents.iter().map(|a| a.org).max().map_or(0, |m| m + 1);
    let mut producers = JoinSet::new();
    for org in 0..orgs {
        let key = agents
            .iter()
            .find(|a| a.org == org)
            .map(|a| a.key.clone())
            .context("an org without agents")?;
        let client = http_client(1)?;
        let url = super::api::endpoint(base, "/tasks")?;
        let progress = phase.progress.clone();
        let deadline = phase.started + duration;
        producers.spawn(async move {
            let mut created: Vec<(String, Instant)> = Vec::new();
            let mut outcome = super::stats::AgentOutcome::default();
            let mut n = 0u64;
            while Instant::now() < deadline {
                let body = json!({ "tasks": [{ "title": format!("long-poll task {n}") }] });
                let request = client
                    .post(url.clone())
                    .header("x-api-key", &key)
                    .json(&body);
                match exchange(request, StatusCode::CREATED).await {
                    Ok((answer, latency)) => {
                        let at = Instant::now();
                        if let Ok(c) = serde_json::from_slice::<Created>(&answer) {
                            created.extend(c.results.into_iter().map(|r| (r.task_id, at)));
                        }
                        outcome.stats.op(Op::Create).ok(latency, 1);
                        progress.add(1);
                    }
                    Err(e) => outcome.stats.op(Op::Create).err(e),
                }
                n += 1;
                tokio::time::sleep(PRODUCER_PAUSE).await;
            }
            (created, outcome)
        });
    }
    let mut created_at = HashMap::new();
    while let Some(joined) = producers.join_next().await {
        let (created, outcome) = joined.context("a producer failed")?;
        created_at.extend(created);
        phase.tasks.spawn(async move { outcome });
    }
    // Let the last tasks reach their agents before they stop.
    let settle_by = Instant::now() + Duration::from_secs(5);
    while admin.claim_waiters().await.unwrap_or(0) < agents_n && Instant::now() < settle_by {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop_tx.send(true);
    let phase = phase.finish().await?;

    let mut latencies_us = Vec::new();
    let mut early = 0;
    let mut errors = Vec::new();
    let mut delivered = 0;
    while let Some(joined) = tasks.join_next().await {
        let log = joined.context("an agent failed")?;
        errors.extend(log.errors);
        for (task, claimed) in log.claims {
            let Some(created) = created_at.get(&task) else {
                continue;
            };
            delivered += 1;
            match claimed.checked_duration_since(*created) {
                Some(d) => latencies_us.push(d.as_micros() as u64),
                None => {
                    early += 1;
                    latencies_us.push(0);
                }
            }
        }
    }
    latencies_us.sort_unstable();
    let pct = |p: f64| -> Option<f64> {
        if latencies_us.is_empty() {
            return None;
        }
        let rank = (p / 100.0 * latencies_us.len() as f64).ceil() as usize;
        Some(latencies_us[rank.clamp(1, latencies_us.len()) - 1] as f64 / 1000.0)
    };
    let summary = LongPollSummary {
        waiters,
        idle_secs: idle.as_secs_f64(),
        idle_server_cpu_pct,
        delivered,
        undelivered: (created_at.len() as u64).saturating_sub(delivered),
        delivery_p50_ms: pct(50.0),
        delivery_p99_ms: pct(99.0),
        delivery_max_ms: latencies_us.last().map(|&us| us as f64 / 1000.0),
        claimed_before_create_answer: early,
        errors: errors.len() as u64,
        error_samples: errors.into_iter().take(5).collect(),
    };
    Ok((summary, phase))
}
