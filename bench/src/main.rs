//! `taskq-bench`: a load generator for the task-queue HTTP API.
//!
//! A binary of its own rather than a `taskq` subcommand: it speaks only
//! HTTP to the server and starts it as a child process, so it needs
//! neither the engine, the database drivers nor the embedding model, and
//! the server binary carries none of the load tool (BM25, a compiled-in
//! evaluation set). The server it starts is the `taskq` binary named by
//! `--server-bin`, by default the one beside this executable (`cargo build
//! --release --workspace` puts both in `target/release/`).
//!
//! # What it measures
//!
//! The latency and throughput that agents see on the hot routes:
//! `POST /tasks` (create, batches of 25), `POST /tasks/claim` and
//! `POST /tasks/update` (complete), and for the `idle-orgs` scenario the
//! server's memory for many small organizations.
//!
//! # How
//!
//! - Target: `--url` points at a running server, with the operator token from
//!   `--admin-token` or `TASKQ_ADMIN_TOKEN`. Without `--url` the bench starts
//!   `taskq serve` itself (`--server-bin`) on a free loopback port, in a
//!   fresh temporary directory holding the SQLite database (or the
//!   `--database-url` given), the master key and the server log
//!   (`server.log`). At the end it stops the server with SIGTERM and removes
//!   the directory.
//! - Bootstrap (not measured): through the operator API, one enterprise org
//!   per `--orgs` with every rate and volume limit lifted, and one member with
//!   its own API key per agent; `--agents` are spread evenly over the orgs.
//! - Scenarios:
//!   - `cycle` (default): a create phase fills every org with
//!     `--tasks-per-org` tasks in batches of 25 spread over the org's agents;
//!     then for `--duration` seconds every agent repeats claim (lease 300 s,
//!     no context) and complete (fenced by the claim's `lease_id`). One claim
//!     plus one complete is a cycle. An agent whose claim finds the queue
//!     empty stops early, and the report says so.
//!     With `--boards N`, N board sessions do what the board's page does
//!     while the cycles run, on its stream or (`--boards-poll`) polling
//!     (see `boards`); with `--expired N`, the
//!     retention sweep removes N expired tasks of the first org meanwhile
//!     (see `expired`).
//!   - `create`: every agent creates batches of 25 for `--duration` seconds.
//!   - `idle-orgs`: creates `--orgs` orgs, `--concurrency` at a time, each with
//!     three tasks and one claim, then reports the server's resident memory
//!     (spawned server on Linux only: `/proc/<pid>/status`).
//!   - `longpoll`: every agent long-polls an empty org; the server's CPU
//!     while they all wait, then how soon a created task reaches a waiting
//!     agent (see `longpoll`).
//!   - `reports`: seeds `--report-orgs` orgs of `--report-tasks` tasks,
//!     then claim+complete cycles alone and again while the operator's
//!     recompute runs org after org; reports the change in claim p99
//!     (see `reports`).
//!   - `search`: recall@3 and MRR of `POST /tasks/search` on a compiled-in
//!     evaluation set (builtin model, the same through an endpoint, and a
//!     keyword baseline), then search latency in orgs of `--search-sizes`
//!     tasks (see `search`). It starts its own servers, one per phase.
//! - Figures, per operation: `count` is the number of successful requests,
//!   `errors` the failed ones (transport error, 30 s timeout, or an
//!   unexpected status: a 207 partial update is an error), `per_sec` is
//!   `count` over the wall time of the operation's phase, and the latency
//!   percentiles (nearest rank) cover successful requests, measured from
//!   sending the request to having read the whole response body. For the
//!   cycles, also the CPU time a cycle cost the spawned server and the
//!   bench itself (`/proc/<pid>/stat`): it compares two builds or settings
//!   where the rate moves with the machine's other load.
//! - Every agent is its own tokio task with its own HTTP/1.1 keep-alive
//!   connection (`conn`: hyper's connection API for `http://`, reqwest for
//!   `https://`) and records its latencies locally (microseconds); they are
//!   merged when the phase ends, so no lock is taken on the request path. A progress
//!   line goes to stderr once per second; results go to stdout, as a table or
//!   with `--json` as one JSON document.
//!
//! # Where things are
//!
//! This file holds the run from start to report; `args` the flags and
//! the checks on them, `server` the server the bench starts itself, `bootstrap` the
//! operator API and the orgs and keys of a run, `api` the HTTP client and
//! the agents' requests, `conn` an agent's connection, `scenarios` the
//! measured phases, `longpoll`, `reports` and `search` the scenarios of
//! their names, `boards` the open boards of `--boards`, `streams` the
//! event streams of `--streams`, `expired` the sweep of `--expired`,
//! `stats` their figures and progress line, and `report` the results and
//! their table.

mod api;
mod args;
mod boards;
mod bootstrap;
mod conn;
mod expired;
mod longpoll;
mod report;
mod reports;
mod scenarios;
mod search;
mod server;
mod stats;
mod streams;
mod waiting;
mod webhooks;

use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _};
use reqwest::Url;

use args::validate;
pub use args::{BenchArgs, Scenario, SqliteSynchronous};
use bootstrap::{agents_of, bootstrap, owner_keys_of, Admin};
use report::{render_table, CommitPath, CycleSummary, Memory, PhaseCpu, Report};
use scenarios::{
    big_pages_phase, create_fixed_phase, create_timed_phase, cycle_phase, idle_orgs_phase, Content,
};
use server::Server;
use stats::Op;
// The agents' many small allocations per request, as in the server: the
// load tool shares the cores with the server it measures.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let args = <BenchArgs as clap::Parser>::parse();
    install_crypto_provider();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(args))
}

/// Installs ring as rustls's process-wide crypto provider, for `https://`
/// targets and embeddings endpoints. Later calls do nothing.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Runs the benchmark described by `args` and prints its results.
async fn run(args: BenchArgs) -> anyhow::Result<()> {
    validate(&args)?;
    if args.url.is_none() {
        // Before any work: a missing server binary is the likeliest mistake.
        server::server_binary(&args)?;
    }
    if args.scenario == Scenario::Search {
        // Its phases start servers of their own; an interrupted run's
        // servers are killed and removed as they are dropped.
        let summary = tokio::select! {
            summary = search::run(&args) => summary?,
            Ok(()) = tokio::signal::ctrl_c() => return Err(anyhow!("interrupted")),
        };
        return print_report(&args, &search_report(&args, summary));
    }

    let mut server = None;
    let (base, token) = match &args.url {
        Some(url) => {
            let token =
                args.admin_token.clone().filter(|t| !t.is_empty()).context(
                    "--url needs the operator token: --admin-token or TASKQ_ADMIN_TOKEN",
                )?;
            (url.trim_end_matches('/').to_owned(), token)
        }
        None => {
            let spawned = Server::start(&args).await?;
            let target = (spawned.process.url().to_owned(), spawned.token.clone());
            server = Some(spawned);
            target
        }
    };
    Url::parse(&base).with_context(|| format!("invalid server URL {base:?}"))?;

    let (outcome, interrupted) = tokio::select! {
        outcome = execute(&args, &base, &token, server.as_ref()) => (outcome, false),
        Ok(()) = tokio::signal::ctrl_c() => (Err(anyhow!("interrupted")), true),
    };

    if let Some(server) = server {
        let show_log = outcome.is_err() && !interrupted;
        if let Err(e) = server.stop(show_log).await {
            eprintln!("warning: stopping the server: {e:#}");
        }
    }

    print_report(&args, &outcome?)
}

fn print_report(args: &BenchArgs, report: &Report) -> anyhow::Result<()> {
    if args.json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print!("{}", render_table(report));
    }
    Ok(())
}

fn search_report(args: &BenchArgs, summary: search::SearchSummary) -> Report {
    Report {
        url: "one spawned server per phase".to_owned(),
        database: Some(
            args.database_url
                .clone()
                .unwrap_or_else(|| "a fresh SQLite file per server".to_owned()),
        ),
        orgs: 1,
        search: Some(summary),
        ..blank_report(args)
    }
}

/// A report holding the run's settings and no figures yet.
fn blank_report(args: &BenchArgs) -> Report {
    Report {
        scenario: args.scenario,
        url: String::new(),
        server: "spawned",
        database: None,
        sqlite_synchronous: args.sqlite_synchronous.map(SqliteSynchronous::as_env),
        orgs: args.orgs,
        agents: args.agents,
        concurrency: args.concurrency,
        duration_secs: args.duration,
        tasks_per_org: None,
        claim_batch: None,
        bootstrap_secs: 0.0,
        phases: Vec::new(),
        ops: Vec::new(),
        cycles: None,
        commit_path: None,
        memory: None,
        actors_alive_end: None,
        actors_alive_settled: None,
        longpoll: None,
        search: None,
        reports: None,
        webhooks: None,
        boards: None,
        waiting: None,
        streams: None,
        expired: None,
    }
}

/// Bootstrap, the scenario's phases, and memory readings.
async fn execute(
    args: &BenchArgs,
    base: &str,
    token: &str,
    server: Option<&Server>,
) -> anyhow::Result<Report> {
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let process = server.map(|s| &s.process);
    let rss_start = match process {
        Some(process) => process.rss_kb().await,
        None => None,
    };

    let mut report = Report {
        url: base.to_owned(),
        server: if server.is_some() {
            "spawned"
        } else {
            "external"
        },
        database: server.map(|s| s.database.clone()),
        agents: if args.scenario == Scenario::IdleOrgs {
            0
        } else {
            args.agents
        },
        tasks_per_org: matches!(args.scenario, Scenario::Cycle | Scenario::Reports)
            .then_some(args.tasks_per_org),
        claim_batch: (args.scenario == Scenario::Cycle).then_some(args.claim_batch),
        ..blank_report(args)
    };

    let admin = Admin::new(base, token, args.concurrency)?;
    // The orgs and agents every scenario but `idle-orgs` runs with.
    let (agents, owner_keys, first_org) = if args.scenario == Scenario::IdleOrgs {
        (Vec::new(), Vec::new(), String::new())
    } else {
        let started = Instant::now();
        let orgs = bootstrap(&admin, args, &run_id).await?;
        report.bootstrap_secs = started.elapsed().as_secs_f64();
        let first = orgs.first().map(|o| o.org_id.clone()).unwrap_or_default();
        (agents_of(&orgs), owner_keys_of(&orgs), first)
    };
    let deadline = Duration::from_secs(args.duration);
    match args.scenario {
        Scenario::Cycle | Scenario::Reports => {
            if args.scenario == Scenario::Cycle && args.waiting > 0 {
                let (summary, created) =
                    waiting::fill(base, &agents, args.waiting, process).await?;
                report.waiting = Some(summary);
                report.add_phase(created, &[Op::Create]);
            }
            let mut expired = match args.expired {
                0 => None,
                n => {
                    let keys = agents.iter().filter(|a| a.org == 0).map(|a| a.key.clone());
                    let spawned = server.map(|s| (&s.process, s.database.as_str()));
                    Some(
                        expired::Expired::prepare(
                            base,
                            &admin,
                            &first_org,
                            keys.collect(),
                            n,
                            !args.no_sweep,
                            spawned,
                        )
                        .await?,
                    )
                }
            };
            let created =
                create_fixed_phase(base, &agents, args.tasks_per_org, Content::Small).await?;
            report.add_phase(created, &[Op::Create]);
            if args.scenario == Scenario::Cycle {
                let sink = match args.webhook {
                    Some(kind) => {
                        let sink = webhooks::Sink::start(kind).await?;
                        sink.subscribe(base, &owner_keys).await?;
                        Some(sink)
                    }
                    None => None,
                };
                let boards = match args.boards {
                    0 => None,
                    n => {
                        let keys: Vec<String> = agents.iter().map(|a| a.key.clone()).collect();
                        Some(boards::Boards::open(base, &keys, n, args.boards_poll, process).await?)
                    }
                };
                let streams = match (args.streams, args.slow_streams) {
                    (0, 0) => None,
                    (n, k) => Some(streams::Streams::open(base, &owner_keys, n, k).await?),
                };
                if let Some(expired) = &mut expired {
                    expired.start().await?;
                }
                let before = admin.commit_counters().await;
                let cpu_before = phase_cpu(process).await;
                let cycled = cycle_phase(base, &agents, deadline, args.claim_batch).await?;
                let cpu = phase_cpu(process).await.since(cpu_before);
                if let Some(streams) = streams {
                    report.streams = Some(streams.close().await);
                }
                if let Some(boards) = boards {
                    report.boards = Some(boards.close(admin.board_pages_shared().await).await);
                }
                if let (Some(before), Some(after)) = (before, admin.commit_counters().await) {
                    report.commit_path = Some(CommitPath::between(before, after, cycled.wall));
                }
                report.cycles = Some(CycleSummary::new(&cycled, agents.len(), cpu));
                if let Some(expired) = expired.take() {
                    let summary = expired.summary(cycled.wall, args.expired_drain).await?;
                    report.expired = Some(summary);
                }
                if let Some(sink) = &sink {
                    report.webhooks = Some(sink.summary(owner_keys.len()).await);
                }
                report.add_phase(cycled, &[Op::Claim, Op::Complete, Op::Cycle]);
            } else {
                let (summary, phases) = reports::run(base, &admin, &agents, args, &run_id).await?;
                report.reports = Some(summary);
                for phase in phases {
                    report.add_phase(phase, &[Op::Claim, Op::Complete, Op::Cycle]);
                }
            }
        }
        Scenario::Create => {
            let created = create_timed_phase(base, &agents, deadline).await?;
            report.add_phase(created, &[Op::Create]);
        }
        Scenario::BigPages => {
            let created =
                create_fixed_phase(base, &agents, args.big_tasks, Content::Largest).await?;
            report.add_phase(created, &[Op::Create]);
            // The peak reported is that of the reading, not of the filling.
            if let Some(process) = process {
                process.reset_peak_rss().await;
            }
            let read = big_pages_phase(base, &agents, deadline).await?;
            report.add_phase(read, &[Op::Page]);
        }
        Scenario::Longpoll => {
            let (summary, phase) =
                longpoll::longpoll_phase(base, &admin, &agents, deadline, process).await?;
            report.longpoll = Some(summary);
            report.add_phase(phase, &[Op::Create]);
        }
        Scenario::Search => return Err(anyhow!("the search scenario runs on servers of its own")),
        Scenario::IdleOrgs => {
            let result = idle_orgs_phase(base, token, args, &run_id).await?;
            report.add_phase(
                result,
                &[
                    Op::OrgCreate,
                    Op::OrgLimits,
                    Op::Create,
                    Op::Claim,
                    Op::Complete,
                ],
            );
        }
    }

    let metrics = Admin::new(base, token, 1)?;
    report.actors_alive_end = metrics.actors_alive().await;
    if let Some(process) = process {
        let rss_end = process.rss_kb().await;
        let rss_settled = if args.settle > 0 {
            eprintln!(
                "[settle] waiting {} s before the last memory reading",
                args.settle
            );
            tokio::time::sleep(Duration::from_secs(args.settle)).await;
            report.actors_alive_settled = metrics.actors_alive().await;
            process.rss_kb().await
        } else {
            None
        };
        let peak = process.peak_rss_kb().await;
        let per_org_kb = match (args.scenario, rss_start, rss_end) {
            (Scenario::IdleOrgs, Some(start), Some(end)) => {
                Some((end as f64 - start as f64) / args.orgs as f64)
            }
            _ => None,
        };
        if rss_end.is_some() {
            report.memory = Some(Memory {
                rss_start_kb: rss_start,
                rss_end_kb: rss_end,
                rss_settled_kb: rss_settled,
                rss_peak_kb: peak,
                per_org_kb,
            });
        }
    }
    Ok(report)
}

/// CPU used so far by the spawned server (if the bench started it) and by
/// the bench itself.
async fn phase_cpu(server: Option<&taskq_process::ServerProcess>) -> PhaseCpu {
    let server = match server {
        Some(server) => server.cpu_time().await,
        None => None,
    };
    PhaseCpu {
        server,
        bench: taskq_process::cpu_time_of(std::process::id()).await,
    }
}
