//! The `reports` scenario: does computing reports slow claims down?
//!
//! Seeds `--report-orgs` enterprise orgs with `--report-tasks` tasks each
//! (titles drawn from a dozen kinds of work, so runbooks and failure
//! clusters have something to group; 60% completed, 10% failed), then runs
//! claim+complete cycles in the bench's own org(s) twice for `--duration`
//! seconds: once alone (the baseline), once while the operator's recompute
//! (all four reports) runs org after org, one at a time, as long as the
//! cycles do. The figure that matters is the change in claim p99; the
//! recomputes' own latency and rate say how long a pass over every org
//! takes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde_json::json;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::api::{exchange, http_client};
use super::bootstrap::{Admin, Agent};
use super::report::op_report;
use super::scenarios::cycle_phase;
use super::stats::{Op, OpStats, PhaseResult};
use super::BenchArgs;

/// Kinds of work the seeded titles are drawn from.
const TOPICS: [&str; 12] = [
    "Rotate the TLS certificate on",
    "Fix the flaky integration test in",
    "Upgrade the database driver of",
    "Investigate the latency spike in",
    "Write release notes for",
    "Migrate the config of",
    "Add metrics to",
    "Patch the dependency vulnerability in",
    "Restore the nightly backup of",
    "Review the access policy of",
    "Translate the onboarding emails of",
    "Tune the autoscaling of",
];
const SERVICES: [&str; 8] = [
    "billing", "search", "checkout", "gateway", "payments", "accounts", "reports", "mailer",
];
const BATCH: u64 = 25;

#[derive(Serialize)]
pub(super) struct ClaimFigures {
    cycles_per_sec: f64,
    claim_p50_ms: Option<f64>,
    claim_p99_ms: Option<f64>,
}

impl ClaimFigures {
    fn of(phase: &PhaseResult) -> Self {
        let cycles = phase.stats.ops[Op::Cycle as usize].latencies_us.len() as u64;
        let claims = op_report(
            Op::Claim,
            phase.name,
            phase.stats.ops[Op::Claim as usize].clone(),
            phase.wall,
        );
        ClaimFigures {
            cycles_per_sec: cycles as f64 / phase.wall.as_secs_f64().max(1e-9),
            claim_p50_ms: claims.p50_ms,
            claim_p99_ms: claims.p99_ms,
        }
    }
}

#[derive(Serialize)]
pub(super) struct ReportsSummary {
    report_orgs: usize,
    tasks_per_report_org: u64,
    seed_secs: f64,
    baseline: ClaimFigures,
    during_recompute: ClaimFigures,
    /// (p99 during - p99 alone) / p99 alone, in percent.
    claim_p99_change_pct: Option<f64>,
    recomputes: u64,
    recompute_errors: u64,
    recompute_p50_ms: Option<f64>,
    recompute_p99_ms: Option<f64>,
    recompute_orgs_per_sec: f64,
    /// How long one pass over every report org takes at that rate.
    all_orgs_secs: Option<f64>,
}

impl ReportsSummary {
    pub(super) fn render(&self) -> String {
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
        format!(
            "reports: {} orgs x {} tasks seeded in {:.1} s\n\
             claims alone:            {:.0} cycles/s, claim p50 {} ms, p99 {} ms\n\
             claims during recompute: {:.0} cycles/s, claim p50 {} ms, p99 {} ms\n\
             claim p99 change: {}\n\
             recomputes: {} ({} errors), p50 {} ms, p99 {} ms, {:.1} orgs/s; every org in {}\n",
            self.report_orgs,
            self.tasks_per_report_org,
            self.seed_secs,
            self.baseline.cycles_per_sec,
            ms(self.baseline.claim_p50_ms),
            ms(self.baseline.claim_p99_ms),
            self.during_recompute.cycles_per_sec,
            ms(self.during_recompute.claim_p50_ms),
            ms(self.during_recompute.claim_p99_ms),
            self.claim_p99_change_pct
                .map_or_else(|| "-".to_owned(), |p| format!("{p:+.1}%")),
            self.recomputes,
            self.recompute_errors,
            ms(self.recompute_p50_ms),
            ms(self.recompute_p99_ms),
            self.recompute_orgs_per_sec,
            self.all_orgs_secs
                .map_or_else(|| "-".to_owned(), |s| format!("{s:.0} s")),
        )
    }
}

/// One seeded org: its id.
struct ReportOrg {
    org_id: String,
}

/// Creates the report orgs and their histories, `--concurrency` orgs at a
/// time.
async fn seed(
    base: &str,
    admin: &Admin,
    args: &BenchArgs,
    run_id: &str,
) -> anyhow::Result<Vec<ReportOrg>> {
    eprintln!(
        "[seed] {} report orgs x {} tasks",
        args.report_orgs, args.report_tasks
    );
    let permits = Arc::new(Semaphore::new(args.concurrency));
    let client = http_client(args.concurrency)?;
    let done = Arc::new(AtomicUsize::new(0));
    let mut orgs = JoinSet::new();
    for index in 0..args.report_orgs {
        let (admin, permits, client, done) =
            (admin.clone(), permits.clone(), client.clone(), done.clone());
        let base = base.to_owned();
        let name = format!("reports-{run_id}-{index}");
        let tasks = args.report_tasks;
        let total = args.report_orgs;
        orgs.spawn(async move {
            let _permit = permits.acquire().await?;
            let email = format!("owner-{index}@reports.bench.local");
            let (org, _) = admin
                .create_org(&name, &email, 2)
                .await
                .map_err(|e| anyhow!(e))?;
            admin
                .lift_limits(&org.org_id)
                .await
                .map_err(|e| anyhow!(e))?;
            let post = |path: &str, body: serde_json::Value| {
                client
                    .post(format!("{base}{path}"))
                    .header("x-api-key", &org.owner.api_key)
                    .json(&body)
            };
            let mut n = 0;
            while n < tasks {
                let count = BATCH.min(tasks - n);
                let items: Vec<_> = (n..n + count)
                    .map(|i| {
                        let topic = TOPICS[(i as usize * 7 + index) % TOPICS.len()];
                        let service = SERVICES[(i as usize / 3) % SERVICES.len()];
                        json!({
                            "title": format!("{topic} {service}"),
                            "description": format!("Seeded task {i} of a reports bench org."),
                        })
                    })
                    .collect();
                let (body, _) = exchange(
                    post("/tasks", json!({ "tasks": items })),
                    StatusCode::CREATED,
                )
                .await
                .map_err(|e| anyhow!(e))?;
                let created: serde_json::Value = serde_json::from_slice(&body)?;
                // Six in ten completed, one in ten failed, the rest open.
                let finished: Vec<_> = created["results"]
                    .as_array()
                    .context("create results")?
                    .iter()
                    .enumerate()
                    .filter_map(|(k, r)| {
                        let status = match (n as usize + k) % 10 {
                            0..=5 => "completed",
                            6 => "failed",
                            _ => return None,
                        };
                        Some(json!({
                            "task_id": r["task_id"], "status": status, "assignee": email,
                            "note": "seeded", "output": { "summary": "done the usual way" },
                        }))
                    })
                    .collect();
                exchange(
                    post("/tasks/update", json!({ "updates": finished })),
                    StatusCode::OK,
                )
                .await
                .map_err(|e| anyhow!(e))?;
                n += count;
            }
            let seeded = done.fetch_add(1, Ordering::Relaxed) + 1;
            if seeded % 100 == 0 || seeded == total {
                eprintln!("[seed] {seeded}/{total} orgs");
            }
            anyhow::Ok(ReportOrg { org_id: org.org_id })
        });
    }
    let mut seeded = Vec::with_capacity(args.report_orgs);
    while let Some(joined) = orgs.join_next().await {
        seeded.push(joined.context("seeding task failed")??);
    }
    Ok(seeded)
}

/// Recomputes every report of the orgs, one at a time, round and round,
/// until `duration` has passed.
async fn recompute_loop(
    admin: &Admin,
    orgs: &[ReportOrg],
    duration: Duration,
) -> (OpStats, Duration) {
    let started = Instant::now();
    let mut stats = OpStats::default();
    for org in orgs.iter().cycle() {
        if started.elapsed() >= duration {
            break;
        }
        match admin.recompute(&org.org_id).await {
            Ok(latency) => stats.ok(latency, 1),
            Err(e) => stats.err(e),
        }
    }
    (stats, started.elapsed())
}

pub(super) async fn run(
    base: &str,
    admin: &Admin,
    agents: &[Agent],
    args: &BenchArgs,
    run_id: &str,
) -> anyhow::Result<(ReportsSummary, Vec<PhaseResult>)> {
    let started = Instant::now();
    let orgs = seed(base, admin, args, run_id).await?;
    let seed_secs = started.elapsed().as_secs_f64();
    let duration = Duration::from_secs(args.duration);
    let alone = cycle_phase(base, agents, duration, 1).await?;
    eprintln!("[recompute] one org after another while the cycles run");
    let (during, (recomputes, wall)) = tokio::join!(
        cycle_phase(base, agents, duration, 1),
        recompute_loop(admin, &orgs, duration)
    );
    let during = during?;
    let recompute = op_report(Op::Recompute, "recompute", recomputes, wall);
    let baseline = ClaimFigures::of(&alone);
    let during_recompute = ClaimFigures::of(&during);
    let rate = recompute.count as f64 / wall.as_secs_f64().max(1e-9);
    let summary = ReportsSummary {
        report_orgs: orgs.len(),
        tasks_per_report_org: args.report_tasks,
        seed_secs,
        claim_p99_change_pct: match (baseline.claim_p99_ms, during_recompute.claim_p99_ms) {
            (Some(a), Some(b)) if a > 0.0 => Some((b - a) / a * 100.0),
            _ => None,
        },
        baseline,
        during_recompute,
        recomputes: recompute.count,
        recompute_errors: recompute.errors,
        recompute_p50_ms: recompute.p50_ms,
        recompute_p99_ms: recompute.p99_ms,
        recompute_orgs_per_sec: rate,
        all_orgs_secs: (rate > 0.0).then(|| orgs.len() as f64 / rate),
    };
    if !recompute.error_samples.is_empty() {
        eprintln!("[recompute] errors: {:?}", recompute.error_samples);
    }
    Ok((summary, vec![alone, during]))
}

impl Admin {
    /// `POST /admin/orgs/{id}/recompute` of every report.
    pub(super) async fn recompute(&self, org_id: &str) -> Result<Duration, String> {
        let path = format!("/admin/orgs/{org_id}/recompute");
        let (_, latency) = self
            .call(Method::POST, &path, &json!({}), StatusCode::OK)
            .await?;
        Ok(latency)
    }
}
