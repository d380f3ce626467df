//! The bench's results: the report (also the `--json` document), built
//! from the finished phases, and its rendering as a table.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::bootstrap::CommitCounters;
use super::stats::{Op, OpStats, PhaseResult};
use super::Scenario;

#[derive(Serialize)]
pub(super) struct Report {
    pub(super) scenario: Scenario,
    pub(super) url: String,
    /// `spawned` (started by the bench) or `external` (`--url`).
    pub(super) server: &'static str,
    /// Database URL of a spawned server; unknown for an external one.
    pub(super) database: Option<String>,
    pub(super) sqlite_synchronous: Option<&'static str>,
    pub(super) orgs: usize,
    /// Agents of the `cycle` and `create` scenarios (0 for `idle-orgs`).
    pub(super) agents: usize,
    /// Requests in flight during bootstrap and `idle-orgs`.
    pub(super) concurrency: usize,
    pub(super) duration_secs: u64,
    pub(super) tasks_per_org: Option<u64>,
    /// Tasks claimed per request in the `cycle` scenario.
    pub(super) claim_batch: Option<u32>,
    pub(super) bootstrap_secs: f64,
    pub(super) phases: Vec<PhaseReport>,
    pub(super) ops: Vec<OpReport>,
    pub(super) cycles: Option<CycleSummary>,
    pub(super) commit_path: Option<CommitPath>,
    pub(super) memory: Option<Memory>,
    /// Org actors running when the load ended, and after `--settle`.
    pub(super) actors_alive_end: Option<u64>,
    pub(super) actors_alive_settled: Option<u64>,
    pub(super) longpoll: Option<super::longpoll::LongPollSummary>,
    pub(super) search: Option<super::search::SearchSummary>,
    pub(super) reports: Option<super::reports::ReportsSummary>,
    pub(super) webhooks: Option<super::webhooks::WebhookSummary>,
    pub(super) boards: Option<super::boards::BoardsSummary>,
    pub(super) waiting: Option<super::waiting::WaitingSummary>,
    pub(super) streams: Option<super::streams::StreamsSummary>,
    pub(super) expired: Option<super::expired::ExpiredSummary>,
}

#[derive(Serialize)]
pub(super) struct PhaseReport {
    name: &'static str,
    wall_secs: f64,
}

#[derive(Serialize)]
pub(super) struct OpReport {
    op: &'static str,
    phase: &'static str,
    pub(super) count: u64,
    pub(super) errors: u64,
    pub(super) per_sec: f64,
    pub(super) p50_ms: Option<f64>,
    pub(super) p99_ms: Option<f64>,
    pub(super) max_ms: Option<f64>,
    /// Tasks carried by the successful requests.
    pub(super) items: u64,
    items_per_sec: f64,
    pub(super) error_samples: Vec<String>,
}

#[derive(Serialize)]
pub(super) struct CycleSummary {
    count: u64,
    per_sec: f64,
    /// Agents that stopped early because their org's queue was empty.
    agents_drained: usize,
    agents: usize,
    first_drained_secs: Option<f64>,
    /// CPU time (user and system) the spawned server used during the
    /// phase, per cycle, in microseconds: what a cycle costs the server
    /// whatever else the machine runs, so two builds or two settings
    /// compare on it where the rate drifts with the machine's other load.
    /// `None` for a server the bench did not start, or off Linux.
    server_cpu_us_per_cycle: Option<f64>,
    /// The same for the bench's own process (the agents, and any
    /// receiver, streams or boards it serves), which shares the cores.
    bench_cpu_us_per_cycle: Option<f64>,
}

/// CPU time used so far by the server and by the bench; between two
/// readings, over a phase.
#[derive(Debug, Clone, Copy)]
pub(super) struct PhaseCpu {
    pub server: Option<Duration>,
    pub bench: Option<Duration>,
}

impl PhaseCpu {
    /// What was used since `before`.
    pub(super) fn since(self, before: PhaseCpu) -> PhaseCpu {
        let between = |after: Option<Duration>, before: Option<Duration>| {
            Some(after?.saturating_sub(before?))
        };
        PhaseCpu {
            server: between(self.server, before.server),
            bench: between(self.bench, before.bench),
        }
    }
}

impl CycleSummary {
    pub(super) fn new(phase: &PhaseResult, agents: usize, cpu: PhaseCpu) -> Self {
        // A cycle is one task claimed and completed: with `--claim-batch`
        // one request pair carries several.
        let count = phase.stats.ops[Op::Cycle as usize].items;
        let per_cycle = |d: Option<Duration>| {
            d.filter(|_| count > 0)
                .map(|d| d.as_micros() as f64 / count as f64)
        };
        CycleSummary {
            count,
            per_sec: rate(count, phase.wall),
            agents_drained: phase.drained.len(),
            agents,
            first_drained_secs: phase.drained.iter().min().map(Duration::as_secs_f64),
            server_cpu_us_per_cycle: per_cycle(cpu.server),
            bench_cpu_us_per_cycle: per_cycle(cpu.bench),
        }
    }
}

/// What the server's writers did during the cycle phase, from `/metrics`
/// read before and after it.
#[derive(Serialize, Debug, PartialEq)]
pub(super) struct CommitPath {
    commits: u64,
    commits_per_sec: f64,
    batches_per_commit: f64,
    rows_per_commit: f64,
    /// Seconds spent committing per second of the phase, all lanes: for
    /// SQLite's one lane, the share of the time its serial commit path was
    /// busy.
    busy_share: f64,
    /// Claims answered with content kept since the task was created, and
    /// claims whose content was read from the store.
    claims_kept: u64,
    claims_read: u64,
}

impl CommitPath {
    pub(super) fn between(before: CommitCounters, after: CommitCounters, wall: Duration) -> Self {
        let commits = after.commits.saturating_sub(before.commits);
        let per_commit = |n: u64| {
            if commits == 0 {
                0.0
            } else {
                n as f64 / commits as f64
            }
        };
        let secs = wall.as_secs_f64();
        CommitPath {
            commits,
            commits_per_sec: rate(commits, wall),
            batches_per_commit: per_commit(after.batches.saturating_sub(before.batches)),
            rows_per_commit: per_commit(after.rows.saturating_sub(before.rows)),
            busy_share: if secs > 0.0 {
                (after.commit_secs - before.commit_secs).max(0.0) / secs
            } else {
                0.0
            },
            claims_kept: after.claims_kept.saturating_sub(before.claims_kept),
            claims_read: after.claims_read.saturating_sub(before.claims_read),
        }
    }
}

#[derive(Serialize)]
pub(super) struct Memory {
    pub(super) rss_start_kb: Option<u64>,
    pub(super) rss_end_kb: Option<u64>,
    /// Reading after `--settle` seconds.
    pub(super) rss_settled_kb: Option<u64>,
    pub(super) rss_peak_kb: Option<u64>,
    /// (end - start) / orgs, for `idle-orgs`.
    pub(super) per_org_kb: Option<f64>,
}

impl Report {
    pub(super) fn add_phase(&mut self, phase: PhaseResult, ops: &[Op]) {
        let PhaseResult {
            name,
            wall,
            mut stats,
            ..
        } = phase;
        self.phases.push(PhaseReport {
            name,
            wall_secs: wall.as_secs_f64(),
        });
        for &op in ops {
            let op_stats = std::mem::take(stats.op(op));
            self.ops.push(op_report(op, name, op_stats, wall));
        }
    }
}

pub(super) fn op_report(op: Op, phase: &'static str, stats: OpStats, wall: Duration) -> OpReport {
    let OpStats {
        mut latencies_us,
        errors,
        items,
        samples,
    } = stats;
    latencies_us.sort_unstable();
    let count = latencies_us.len() as u64;
    OpReport {
        op: op.name(),
        phase,
        count,
        errors,
        per_sec: rate(count, wall),
        p50_ms: percentile_ms(&latencies_us, 50.0),
        p99_ms: percentile_ms(&latencies_us, 99.0),
        max_ms: latencies_us.last().map(|&us| f64::from(us) / 1000.0),
        items,
        items_per_sec: rate(items, wall),
        error_samples: samples,
    }
}

fn rate(count: u64, wall: Duration) -> f64 {
    let secs = wall.as_secs_f64();
    if secs > 0.0 {
        count as f64 / secs
    } else {
        0.0
    }
}

/// Nearest-rank percentile of sorted microsecond latencies, in milliseconds.
fn percentile_ms(sorted_us: &[u32], p: f64) -> Option<f64> {
    if sorted_us.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted_us.len() as f64).ceil() as usize;
    let index = rank.clamp(1, sorted_us.len()) - 1;
    Some(f64::from(sorted_us[index]) / 1000.0)
}

pub(super) fn render_table(report: &Report) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "taskq-bench: scenario {}, orgs {}",
        scenario_name(report.scenario),
        report.orgs
    );
    if report.scenario != Scenario::IdleOrgs {
        let _ = write!(
            out,
            ", agents {}, duration {} s",
            report.agents, report.duration_secs
        );
    }
    if let Some(tasks) = report.tasks_per_org {
        let _ = write!(out, ", tasks per org {tasks}");
    }
    if let Some(batch) = report.claim_batch.filter(|b| *b > 1) {
        let _ = write!(out, ", claim batch {batch}");
    }
    let _ = writeln!(out);
    let database = report
        .database
        .as_deref()
        .unwrap_or("unknown (external server)");
    let _ = write!(
        out,
        "server: {} ({}), database {database}",
        report.url, report.server
    );
    if let Some(mode) = report.sqlite_synchronous {
        let _ = write!(out, ", synchronous {mode}");
    }
    let _ = writeln!(out);
    if report.bootstrap_secs > 0.0 {
        let _ = writeln!(out, "bootstrap: {:.2} s", report.bootstrap_secs);
    }
    for phase in &report.phases {
        let _ = write!(out, "phase {}: {:.2} s wall", phase.name, phase.wall_secs);
        if let Some(create) = report
            .ops
            .iter()
            .find(|op| op.phase == phase.name && op.op == "create")
        {
            let _ = write!(
                out,
                ", {} tasks created ({:.1} tasks/s)",
                create.items, create.items_per_sec
            );
        }
        if phase.name == "cycle" {
            if let Some(cycles) = &report.cycles {
                let _ = write!(
                    out,
                    ", {} cycles ({:.1} cycles/s)",
                    cycles.count, cycles.per_sec
                );
                if let Some(server) = cycles.server_cpu_us_per_cycle {
                    let _ = write!(out, ", server CPU {server:.1} µs a cycle");
                }
                if let Some(bench) = cycles.bench_cpu_us_per_cycle {
                    let _ = write!(out, ", bench CPU {bench:.1} µs a cycle");
                }
            }
        }
        let _ = writeln!(out);
        if let Some(path) = report
            .commit_path
            .as_ref()
            .filter(|_| phase.name == "cycle")
        {
            let _ = writeln!(
                out,
                "  commits: {:.0}/s of {:.1} batches and {:.1} rows, busy {:.0}% of the phase; \
                 claims answered from kept content {}, from the store {}",
                path.commits_per_sec,
                path.batches_per_commit,
                path.rows_per_commit,
                path.busy_share * 100.0,
                path.claims_kept,
                path.claims_read
            );
        }
    }

    if !report.ops.is_empty() {
        let _ = writeln!(
            out,
            "\n{:<10} {:>9} {:>8} {:>10} {:>8} {:>8} {:>8}",
            "op", "count", "errors", "per_sec", "p50_ms", "p99_ms", "max_ms"
        );
    }
    for op in &report.ops {
        let _ = writeln!(
            out,
            "{:<10} {:>9} {:>8} {:>10.1} {:>8} {:>8} {:>8}",
            op.op,
            op.count,
            op.errors,
            op.per_sec,
            ms(op.p50_ms),
            ms(op.p99_ms),
            ms(op.max_ms)
        );
    }

    if let Some(expired) = &report.expired {
        let _ = write!(out, "\n{}", expired.render());
    }
    if let Some(webhooks) = &report.webhooks {
        let _ = write!(out, "\n{}", webhooks.render());
    }
    if let Some(boards) = &report.boards {
        let _ = write!(out, "\n{}", boards.render());
    }
    if let Some(streams) = &report.streams {
        let _ = write!(out, "\n{}", streams.render());
    }
    if let Some(waiting) = &report.waiting {
        let _ = write!(out, "\n{}", waiting.render());
    }
    if let Some(longpoll) = &report.longpoll {
        let _ = write!(out, "\n{}", longpoll.render());
    }

    if let Some(reports) = &report.reports {
        let _ = write!(out, "\n{}", reports.render());
    }
    if let Some(search) = &report.search {
        let _ = write!(out, "\n{}", search.render());
    }

    if let Some(memory) = &report.memory {
        let _ = write!(
            out,
            "\nserver RSS: start {}, end {}",
            mib(memory.rss_start_kb),
            mib(memory.rss_end_kb)
        );
        if memory.rss_settled_kb.is_some() {
            let _ = write!(out, ", settled {}", mib(memory.rss_settled_kb));
        }
        let _ = write!(out, ", peak {}", mib(memory.rss_peak_kb));
        if let Some(per_org) = memory.per_org_kb {
            let _ = write!(out, "; {per_org:.1} KiB per org");
        }
        let _ = writeln!(out);
    }

    if let Some(alive) = report.actors_alive_end {
        let _ = write!(out, "org actors alive: {alive} at the end");
        if let Some(settled) = report.actors_alive_settled {
            let _ = write!(out, ", {settled} after settling");
        }
        let _ = writeln!(out);
    }

    let failing: Vec<&OpReport> = report
        .ops
        .iter()
        .filter(|op| !op.error_samples.is_empty())
        .collect();
    if !failing.is_empty() {
        let _ = writeln!(out, "\nfirst errors:");
        for op in failing {
            for sample in &op.error_samples {
                let _ = writeln!(out, "  {}: {sample}", op.op);
            }
        }
    }

    if let Some(cycles) = &report.cycles {
        if cycles.agents_drained > 0 {
            let _ = writeln!(
                out,
                "\nnote: {} of {} agents found their org's queue empty (first after {:.1} s) \
                 and stopped early; raise --tasks-per-org to keep them busy for --duration",
                cycles.agents_drained,
                cycles.agents,
                cycles.first_drained_secs.unwrap_or_default()
            );
        }
    }
    out
}

fn scenario_name(scenario: Scenario) -> &'static str {
    match scenario {
        Scenario::Cycle => "cycle",
        Scenario::Create => "create",
        Scenario::IdleOrgs => "idle-orgs",
        Scenario::BigPages => "big-pages",
        Scenario::Longpoll => "longpoll",
        Scenario::Search => "search",
        Scenario::Reports => "reports",
    }
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"))
}

fn mib(kb: Option<u64>) -> String {
    kb.map_or_else(
        || "?".to_owned(),
        |kb| format!("{:.1} MiB", kb as f64 / 1024.0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commit_path_is_what_changed_over_the_phase() {
        let before = CommitCounters {
            commits: 100,
            batches: 1_000,
            rows: 2_500,
            commit_secs: 1.5,
            claims_kept: 40,
            claims_read: 2,
        };
        let after = CommitCounters {
            commits: 2_100,
            batches: 31_000,
            rows: 77_500,
            commit_secs: 5.5,
            claims_kept: 20_040,
            claims_read: 10_002,
        };
        let path = CommitPath::between(before, after, Duration::from_secs(5));
        assert_eq!(
            path,
            CommitPath {
                commits: 2_000,
                commits_per_sec: 400.0,
                batches_per_commit: 15.0,
                rows_per_commit: 37.5,
                busy_share: 0.8,
                claims_kept: 20_000,
                claims_read: 10_000,
            }
        );
    }

    #[test]
    fn a_phase_without_commits_divides_by_nothing() {
        let same = CommitCounters::default();
        let path = CommitPath::between(same, same, Duration::ZERO);
        assert_eq!((path.batches_per_commit, path.busy_share), (0.0, 0.0));
    }

    #[test]
    fn cpu_is_what_was_used_over_the_phase_and_unknown_where_a_reading_is_missing() {
        let secs = |s| Some(Duration::from_secs(s));
        let before = PhaseCpu {
            server: secs(10),
            bench: secs(4),
        };
        let after = PhaseCpu {
            server: secs(13),
            bench: None,
        };
        let used = after.since(before);
        assert_eq!((used.server, used.bench), (secs(3), None));
    }
}
