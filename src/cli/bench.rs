//! `taskq bench`: a load generator for the task-queue HTTP API.
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
//!   `taskq serve` itself (this same binary) on a free loopback port, in a
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
//!   - `create`: every agent creates batches of 25 for `--duration` seconds.
//!   - `idle-orgs`: creates `--orgs` orgs, `--concurrency` at a time, each with
//!     three tasks and one claim, then reports the server's resident memory
//!     (spawned server on Linux only: `/proc/<pid>/status`).
//! - Figures, per operation: `count` is the number of successful requests,
//!   `errors` the failed ones (transport error, 30 s timeout, or an
//!   unexpected status: a 207 partial update is an error), `per_sec` is
//!   `count` over the wall time of the operation's phase, and the latency
//!   percentiles (nearest rank) cover successful requests, measured from
//!   sending the request to having read the whole response body.
//! - Every agent is its own tokio task with its own HTTP/1.1 keep-alive
//!   client and records its latencies locally (microseconds); they are merged
//!   when the phase ends, so no lock is taken on the request path. A progress
//!   line goes to stderr once per second; results go to stdout, as a table or
//!   with `--json` as one JSON document.

use std::error::Error as StdError;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context as _};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Client, Method, StatusCode, Url};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};

/// Items per create request (the API's batch maximum).
const BATCH: u64 = 25;
/// Timeout of every HTTP request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a spawned server may take to print its readiness line.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a spawned server may take to exit after SIGTERM.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause after a failed request, so a dead server is not hammered in a loop.
const ERROR_BACKOFF: Duration = Duration::from_millis(20);
/// Tasks created in every org of the `idle-orgs` scenario.
const IDLE_ORG_TASKS: u64 = 3;
/// Error bodies kept per operation.
const ERROR_SAMPLES: usize = 5;
/// Longest error text kept per sample.
const ERROR_TEXT_MAX: usize = 300;
/// Server log lines shown when a spawned server fails.
const LOG_TAIL_LINES: usize = 20;
const READY_PREFIX: &str = "taskq listening on ";
const CLAIM_BODY: &str = r#"{"lease_seconds":300,"include_context":false}"#;
const TASK_DESCRIPTION: &str = "Synthetic task written by taskq bench. Claim it, do nothing, \
                                and complete it with a short note and a tiny output object.";

/// Load-test the task API: throughput and latency of create, claim and
/// complete with many concurrent agents, or server memory with many orgs.
///
/// Without --url the bench starts its own server (this binary's `serve`) in a
/// temporary directory and stops it at the end.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// What to run: create then claim+complete cycles, only creates, or many small orgs.
    #[arg(long, value_enum, default_value_t = Scenario::Cycle)]
    pub scenario: Scenario,

    /// Base URL of a running server (e.g. http://127.0.0.1:8080). Without it the
    /// bench starts its own server in a temporary directory.
    #[arg(long)]
    pub url: Option<String>,

    /// Operator token of the server at --url.
    #[arg(long, env = "TASKQ_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Database URL for the server the bench starts (default: a fresh SQLite
    /// file in the temporary directory). A postgres:// URL selects PostgreSQL.
    #[arg(long, conflicts_with = "url")]
    pub database_url: Option<String>,

    /// SQLite synchronous mode of the server the bench starts
    /// (sets TASKQ_SQLITE_SYNCHRONOUS).
    #[arg(long, value_enum, ignore_case = true, conflicts_with = "url")]
    pub sqlite_synchronous: Option<SqliteSynchronous>,

    /// Idle time after which the server the bench starts stops an org actor
    /// (sets TASKQ_ORG_IDLE_SECS).
    #[arg(long, conflicts_with = "url")]
    pub org_idle_secs: Option<u64>,

    /// Number of organizations.
    #[arg(long, default_value_t = 1)]
    pub orgs: usize,

    /// Number of concurrent agents, spread evenly over the orgs, each with its own API key.
    #[arg(long, default_value_t = 64)]
    pub agents: usize,

    /// Seconds the timed phase runs (cycles, or creates in the `create` scenario).
    #[arg(long, default_value_t = 10)]
    pub duration: u64,

    /// Tasks created in every org before the cycles start (`cycle` scenario).
    #[arg(long, visible_alias = "prefill", default_value_t = 20_000)]
    pub tasks_per_org: u64,

    /// Requests in flight during bootstrap and the `idle-orgs` scenario.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,

    /// Seconds to wait after the last phase before the final memory reading
    /// (e.g. to let idle org actors stop).
    #[arg(long, default_value_t = 0)]
    pub settle: u64,

    /// Print one JSON document with all results instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// The workload to run.
#[derive(clap::ValueEnum, Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Create phase, then claim+complete cycles for --duration seconds.
    Cycle,
    /// Only creates, in batches of 25, for --duration seconds.
    Create,
    /// --orgs small orgs with three tasks and one claim each; reports server memory.
    IdleOrgs,
}

/// SQLite `synchronous` pragma of a spawned server.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqliteSynchronous {
    #[value(name = "FULL")]
    Full,
    #[value(name = "NORMAL")]
    Normal,
}

impl SqliteSynchronous {
    fn as_env(self) -> &'static str {
        match self {
            Self::Full => "FULL",
            Self::Normal => "NORMAL",
        }
    }
}

/// Runs the benchmark described by `args` and prints its results.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    validate(&args)?;

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
            let target = (spawned.base.clone(), spawned.token.clone());
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

    let report = outcome?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_table(&report));
    }
    Ok(())
}

fn validate(args: &BenchArgs) -> anyhow::Result<()> {
    ensure!(args.orgs >= 1, "--orgs must be at least 1");
    ensure!(args.concurrency >= 1, "--concurrency must be at least 1");
    if args.scenario != Scenario::IdleOrgs {
        ensure!(args.duration >= 1, "--duration must be at least 1 second");
        ensure!(
            args.agents >= args.orgs,
            "--agents ({}) must be at least --orgs ({}): every org needs an agent",
            args.agents,
            args.orgs
        );
    }
    if args.scenario == Scenario::Cycle {
        ensure!(
            args.tasks_per_org >= 1,
            "--tasks-per-org must be at least 1"
        );
    }
    Ok(())
}

/// Bootstrap, the scenario's phases, and memory readings.
async fn execute(
    args: &BenchArgs,
    base: &str,
    token: &str,
    server: Option<&Server>,
) -> anyhow::Result<Report> {
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let pid = server.and_then(|s| s.pid);
    let rss_start = match pid {
        Some(pid) => proc_status_kb(pid, "VmRSS").await,
        None => None,
    };

    let mut report = Report {
        scenario: args.scenario,
        url: base.to_owned(),
        server: if server.is_some() {
            "spawned"
        } else {
            "external"
        },
        database: server.map(|s| s.database.clone()),
        sqlite_synchronous: args.sqlite_synchronous.map(SqliteSynchronous::as_env),
        orgs: args.orgs,
        agents: if args.scenario == Scenario::IdleOrgs {
            0
        } else {
            args.agents
        },
        concurrency: args.concurrency,
        duration_secs: args.duration,
        tasks_per_org: (args.scenario == Scenario::Cycle).then_some(args.tasks_per_org),
        bootstrap_secs: 0.0,
        phases: Vec::new(),
        ops: Vec::new(),
        cycles: None,
        memory: None,
        actors_alive_end: None,
        actors_alive_settled: None,
    };

    match args.scenario {
        Scenario::Cycle | Scenario::Create => {
            let admin = Admin::new(base, token, args.concurrency)?;
            let started = Instant::now();
            let orgs = bootstrap(&admin, args, &run_id).await?;
            report.bootstrap_secs = started.elapsed().as_secs_f64();
            let agents = agents_of(&orgs);

            if args.scenario == Scenario::Cycle {
                let created = create_fixed_phase(base, &agents, args.tasks_per_org).await?;
                report.add_phase(created, &[Op::Create]);
                let deadline = Duration::from_secs(args.duration);
                let cycled = cycle_phase(base, &agents, deadline).await?;
                report.cycles = Some(CycleSummary::new(&cycled, agents.len()));
                report.add_phase(cycled, &[Op::Claim, Op::Complete, Op::Cycle]);
            } else {
                let deadline = Duration::from_secs(args.duration);
                let created = create_timed_phase(base, &agents, deadline).await?;
                report.add_phase(created, &[Op::Create]);
            }
        }
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
    if let Some(pid) = pid {
        let rss_end = proc_status_kb(pid, "VmRSS").await;
        let rss_settled = if args.settle > 0 {
            eprintln!(
                "[settle] waiting {} s before the last memory reading",
                args.settle
            );
            tokio::time::sleep(Duration::from_secs(args.settle)).await;
            report.actors_alive_settled = metrics.actors_alive().await;
            proc_status_kb(pid, "VmRSS").await
        } else {
            None
        };
        let peak = proc_status_kb(pid, "VmHWM").await;
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

// ---------------------------------------------------------------------------
// Operations and their statistics
// ---------------------------------------------------------------------------

/// A measured operation.
#[derive(Debug, Clone, Copy)]
enum Op {
    OrgCreate,
    OrgLimits,
    Create,
    Claim,
    Complete,
    Cycle,
}

impl Op {
    const COUNT: usize = 6;

    fn name(self) -> &'static str {
        match self {
            Op::OrgCreate => "org_create",
            Op::OrgLimits => "org_limits",
            Op::Create => "create",
            Op::Claim => "claim",
            Op::Complete => "complete",
            Op::Cycle => "cycle",
        }
    }
}

/// One operation's raw figures, recorded by one agent.
#[derive(Default)]
struct OpStats {
    latencies_us: Vec<u32>,
    errors: u64,
    /// Tasks carried by the successful requests (created, claimed, completed).
    items: u64,
    samples: Vec<String>,
}

impl OpStats {
    fn ok(&mut self, latency: Duration, items: u64) {
        self.latencies_us
            .push(u32::try_from(latency.as_micros()).unwrap_or(u32::MAX));
        self.items += items;
    }

    /// Counts a failure without keeping its text.
    fn fail(&mut self) {
        self.errors += 1;
    }

    fn err(&mut self, text: String) {
        self.fail();
        if self.samples.len() < ERROR_SAMPLES {
            self.samples.push(text);
        }
    }

    fn merge(&mut self, other: OpStats) {
        self.latencies_us.extend(other.latencies_us);
        self.errors += other.errors;
        self.items += other.items;
        let room = ERROR_SAMPLES.saturating_sub(self.samples.len());
        self.samples.extend(other.samples.into_iter().take(room));
    }
}

/// All operations' figures of one agent or one phase.
#[derive(Default)]
struct Stats {
    ops: [OpStats; Op::COUNT],
}

impl Stats {
    fn op(&mut self, op: Op) -> &mut OpStats {
        &mut self.ops[op as usize]
    }

    fn merge(&mut self, other: Stats) {
        for (mine, theirs) in self.ops.iter_mut().zip(other.ops) {
            mine.merge(theirs);
        }
    }
}

/// What one agent task hands back.
#[derive(Default)]
struct AgentOutcome {
    stats: Stats,
    /// Time into the phase at which this agent found the queue empty.
    drained_at: Option<Duration>,
}

/// Counters read by the progress line.
#[derive(Default)]
struct Progress {
    done: AtomicU64,
    errors: AtomicU64,
}

impl Progress {
    fn add(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// Prints a progress line to stderr every second until dropped.
struct Ticker(JoinHandle<()>);

impl Ticker {
    fn start(phase: &'static str, unit: &'static str, progress: Arc<Progress>) -> Self {
        Ticker(tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let period = Duration::from_secs(1);
            let mut interval = tokio::time::interval_at(started + period, period);
            let mut last = 0;
            loop {
                interval.tick().await;
                let done = progress.done.load(Ordering::Relaxed);
                let errors = progress.errors.load(Ordering::Relaxed);
                eprintln!(
                    "[{phase}] {:>6.1}s  {unit} {done:>9}  now {:>9}/s  errors {errors}",
                    started.elapsed().as_secs_f64(),
                    done - last,
                );
                last = done;
            }
        }))
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A running phase: agent tasks, shared progress counters, and the ticker.
struct Phase {
    name: &'static str,
    started: Instant,
    progress: Arc<Progress>,
    tasks: JoinSet<AgentOutcome>,
    _ticker: Ticker,
}

/// A finished phase.
struct PhaseResult {
    name: &'static str,
    wall: Duration,
    stats: Stats,
    drained: Vec<Duration>,
}

impl Phase {
    fn start(name: &'static str, unit: &'static str) -> Self {
        let progress = Arc::new(Progress::default());
        Phase {
            name,
            started: Instant::now(),
            _ticker: Ticker::start(name, unit, progress.clone()),
            progress,
            tasks: JoinSet::new(),
        }
    }

    async fn finish(mut self) -> anyhow::Result<PhaseResult> {
        let mut stats = Stats::default();
        let mut drained = Vec::new();
        while let Some(joined) = self.tasks.join_next().await {
            let outcome = joined.map_err(|e| anyhow!("{} agent task failed: {e}", self.name))?;
            stats.merge(outcome.stats);
            drained.extend(outcome.drained_at);
        }
        let wall = self.started.elapsed();
        let done = self.progress.done.load(Ordering::Relaxed);
        eprintln!(
            "[{}] finished in {:.2} s ({done} done)",
            self.name,
            wall.as_secs_f64()
        );
        Ok(PhaseResult {
            name: self.name,
            wall,
            stats,
            drained,
        })
    }
}

// ---------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------

fn http_client(max_idle: usize) -> anyhow::Result<Client> {
    Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .pool_max_idle_per_host(max_idle)
        .tcp_nodelay(true)
        .http1_only()
        .build()
        .context("building the HTTP client")
}

/// Sends a request and reads the whole body. Succeeds only on status
/// `expect`; the error is a short description for the report.
async fn exchange(
    request: reqwest::RequestBuilder,
    expect: StatusCode,
) -> Result<(Vec<u8>, Duration), String> {
    let started = Instant::now();
    let response = request.send().await.map_err(|e| error_chain(&e))?;
    let status = response.status();
    let body = response.bytes().await.map_err(|e| error_chain(&e))?;
    let latency = started.elapsed();
    if status == expect {
        Ok((body.to_vec(), latency))
    } else {
        let text = String::from_utf8_lossy(&body);
        Err(truncate(&format!(
            "HTTP {}: {}",
            status.as_u16(),
            text.trim()
        )))
    }
}

fn error_chain(error: &dyn StdError) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    truncate(&text)
}

fn truncate(text: &str) -> String {
    match text.char_indices().nth(ERROR_TEXT_MAX) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_owned(),
    }
}

fn endpoint(base: &str, path: &str) -> anyhow::Result<Url> {
    Url::parse(&format!("{base}{path}")).with_context(|| format!("invalid URL {base}{path}"))
}

/// The task routes an agent calls.
#[derive(Clone)]
struct Routes {
    tasks: Url,
    claim: Url,
    update: Url,
}

impl Routes {
    fn new(base: &str) -> anyhow::Result<Self> {
        Ok(Routes {
            tasks: endpoint(base, "/tasks")?,
            claim: endpoint(base, "/tasks/claim")?,
            update: endpoint(base, "/tasks/update")?,
        })
    }
}

/// An agent's view of the task API: its client, key and routes.
struct AgentApi {
    client: Client,
    key: String,
    routes: Routes,
}

impl AgentApi {
    /// An agent with a client (and so a connection) of its own.
    fn new(routes: &Routes, key: &str) -> anyhow::Result<Self> {
        Ok(AgentApi {
            client: http_client(1)?,
            key: key.to_owned(),
            routes: routes.clone(),
        })
    }

    fn post(&self, url: &Url, body: impl Into<reqwest::Body>) -> reqwest::RequestBuilder {
        self.client
            .post(url.clone())
            .header("x-api-key", &self.key)
            .header(CONTENT_TYPE, "application/json")
            .body(body)
    }

    /// Creates `count` tasks; `seq` numbers the first one.
    async fn create(&self, seq: u64, count: u64) -> Result<Duration, String> {
        let tasks = (seq..seq + count)
            .map(|n| NewTask {
                title: format!("bench task {n}"),
                description: TASK_DESCRIPTION,
                metadata: TaskMetadata {
                    bench: true,
                    seq: n,
                },
            })
            .collect();
        let body = serde_json::to_vec(&CreateBody { tasks }).map_err(|e| e.to_string())?;
        let (_, latency) =
            exchange(self.post(&self.routes.tasks, body), StatusCode::CREATED).await?;
        Ok(latency)
    }

    /// Claims the next task; `None` when the queue is empty.
    async fn claim(&self) -> Result<(Option<Claimed>, Duration), String> {
        let request = self.post(&self.routes.claim, CLAIM_BODY);
        let (body, latency) = exchange(request, StatusCode::OK).await?;
        let claimed = serde_json::from_slice(&body).map_err(|e| {
            truncate(&format!(
                "unexpected claim response ({e}): {}",
                lossy(&body)
            ))
        })?;
        Ok((claimed, latency))
    }

    /// Completes a claimed task.
    async fn complete(&self, task: &Claimed) -> Result<Duration, String> {
        let body = serde_json::to_vec(&UpdateBody {
            updates: [Completion {
                task_id: &task.task_id,
                status: "completed",
                note: "done",
                output: CompletionOutput { ok: true },
                lease_id: task.lease_id.as_deref(),
            }],
        })
        .map_err(|e| e.to_string())?;
        let (_, latency) = exchange(self.post(&self.routes.update, body), StatusCode::OK).await?;
        Ok(latency)
    }
}

fn lossy(body: &[u8]) -> String {
    String::from_utf8_lossy(body).into_owned()
}

#[derive(Serialize)]
struct CreateBody {
    tasks: Vec<NewTask>,
}

#[derive(Serialize)]
struct NewTask {
    title: String,
    description: &'static str,
    metadata: TaskMetadata,
}

#[derive(Serialize)]
struct TaskMetadata {
    bench: bool,
    seq: u64,
}

#[derive(Deserialize)]
struct Claimed {
    task_id: String,
    #[serde(default)]
    lease_id: Option<String>,
}

#[derive(Serialize)]
struct UpdateBody<'a> {
    updates: [Completion<'a>; 1],
}

#[derive(Serialize)]
struct Completion<'a> {
    task_id: &'a str,
    status: &'static str,
    note: &'static str,
    output: CompletionOutput,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_id: Option<&'a str>,
}

#[derive(Serialize)]
struct CompletionOutput {
    ok: bool,
}

// ---------------------------------------------------------------------------
// Operator API and bootstrap
// ---------------------------------------------------------------------------

#[derive(Clone)]
struct Admin {
    client: Client,
    base: Arc<str>,
    token: Arc<str>,
}

#[derive(Deserialize)]
struct CreatedOrg {
    org_id: String,
    owner: CreatedKey,
}

#[derive(Deserialize)]
struct CreatedKey {
    api_key: String,
}

impl Admin {
    fn new(base: &str, token: &str, max_idle: usize) -> anyhow::Result<Self> {
        Ok(Admin {
            client: http_client(max_idle)?,
            base: base.into(),
            token: token.into(),
        })
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: &serde_json::Value,
        expect: StatusCode,
    ) -> Result<(Vec<u8>, Duration), String> {
        let request = self
            .client
            .request(method.clone(), format!("{}{path}", self.base))
            .header(AUTHORIZATION, format!("Bearer {}", self.token))
            .json(body);
        exchange(request, expect)
            .await
            .map_err(|e| format!("{method} {path}: {e}"))
    }

    /// `POST /admin/orgs`: an enterprise org; returns its id and owner key.
    async fn create_org(
        &self,
        name: &str,
        owner_email: &str,
        seats: usize,
    ) -> Result<(CreatedOrg, Duration), String> {
        let body = json!({
            "name": name,
            "tier": "enterprise",
            "owner_email": owner_email,
            "seats": seats,
        });
        let (bytes, latency) = self
            .call(Method::POST, "/admin/orgs", &body, StatusCode::CREATED)
            .await?;
        let org = serde_json::from_slice(&bytes)
            .map_err(|e| truncate(&format!("unexpected org response ({e}): {}", lossy(&bytes))))?;
        Ok((org, latency))
    }

    /// `taskq_actors_alive` from `GET /metrics`.
    async fn actors_alive(&self) -> Option<u64> {
        let response = self
            .client
            .get(format!("{}/metrics", self.base))
            .header(AUTHORIZATION, format!("Bearer {}", self.token))
            .send()
            .await
            .ok()?;
        let text = response.text().await.ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("taskq_actors_alive "))
            .and_then(|v| v.trim().parse().ok())
    }

    /// `PATCH /admin/orgs/{id}`: lifts the rate and volume limits.
    async fn lift_limits(&self, org_id: &str) -> Result<Duration, String> {
        let body = json!({
            "limits": {
                "writes_per_minute": null,
                "reads_per_minute": null,
                "requests_per_month": null,
                "tasks_per_month": null,
            }
        });
        let path = format!("/admin/orgs/{org_id}");
        let (_, latency) = self
            .call(Method::PATCH, &path, &body, StatusCode::OK)
            .await?;
        Ok(latency)
    }

    /// `POST /admin/orgs/{id}/members`: agent `n` as a user; returns its key.
    async fn add_agent(&self, org_id: &str, n: usize) -> Result<String, String> {
        let body = json!({
            "email": format!("agent-{n}@bench.local"),
            "role": "user",
            "key_name": format!("agent-{n}"),
        });
        let path = format!("/admin/orgs/{org_id}/members");
        let (bytes, _) = self
            .call(Method::POST, &path, &body, StatusCode::CREATED)
            .await?;
        let key: CreatedKey = serde_json::from_slice(&bytes).map_err(|e| {
            truncate(&format!(
                "unexpected member response ({e}): {}",
                lossy(&bytes)
            ))
        })?;
        Ok(key.api_key)
    }
}

/// A bootstrapped org and its agents' keys.
struct BenchOrg {
    index: usize,
    agent_keys: Vec<String>,
}

/// One agent to run: its org (by index) and key.
#[derive(Clone)]
struct Agent {
    org: usize,
    key: String,
}

fn agents_of(orgs: &[BenchOrg]) -> Vec<Agent> {
    orgs.iter()
        .flat_map(|org| {
            org.agent_keys.iter().map(|key| Agent {
                org: org.index,
                key: key.clone(),
            })
        })
        .collect()
}

/// Creates the orgs, lifts their limits and issues one key per agent;
/// agent `n` belongs to org `n % orgs`.
async fn bootstrap(admin: &Admin, args: &BenchArgs, run_id: &str) -> anyhow::Result<Vec<BenchOrg>> {
    eprintln!(
        "[bootstrap] {} org(s), {} agent key(s)",
        args.orgs, args.agents
    );
    let permits = Arc::new(Semaphore::new(args.concurrency));
    let mut orgs = JoinSet::new();
    for index in 0..args.orgs {
        let agents: Vec<usize> = (index..args.agents).step_by(args.orgs).collect();
        let name = format!("bench-{run_id}-{index}");
        orgs.spawn(bootstrap_org(
            admin.clone(),
            permits.clone(),
            index,
            name,
            agents,
        ));
    }
    let mut created = Vec::with_capacity(args.orgs);
    while let Some(joined) = orgs.join_next().await {
        let org = joined
            .context("bootstrap task failed")?
            .context("bootstrap (creating orgs and agent keys)")?;
        created.push(org);
    }
    created.sort_by_key(|org| org.index);
    Ok(created)
}

/// One org of the bootstrap: the org, its limits, and its agents' keys
/// (agents numbered globally). `permits` bounds the requests in flight.
async fn bootstrap_org(
    admin: Admin,
    permits: Arc<Semaphore>,
    index: usize,
    name: String,
    agents: Vec<usize>,
) -> anyhow::Result<BenchOrg> {
    let org_id: Arc<str> = {
        let _permit = permits.acquire().await?;
        let owner_email = format!("owner-{index}@bench.local");
        let (org, _) = admin
            .create_org(&name, &owner_email, agents.len() + 1)
            .await
            .map_err(|e| anyhow!(e))?;
        admin
            .lift_limits(&org.org_id)
            .await
            .map_err(|e| anyhow!(e))?;
        org.org_id.into()
    };
    let mut members = JoinSet::new();
    for (slot, n) in agents.into_iter().enumerate() {
        let admin = admin.clone();
        let permits = permits.clone();
        let org_id = org_id.clone();
        members.spawn(async move {
            let _permit = permits.acquire().await?;
            let key = admin.add_agent(&org_id, n).await.map_err(|e| anyhow!(e))?;
            anyhow::Ok((slot, key))
        });
    }
    let mut agent_keys = vec![String::new(); members.len()];
    while let Some(joined) = members.join_next().await {
        let (slot, key) = joined??;
        agent_keys[slot] = key;
    }
    Ok(BenchOrg { index, agent_keys })
}

// ---------------------------------------------------------------------------
// Phases
// ---------------------------------------------------------------------------

/// Creates `tasks_per_org` tasks in every org, in batches of 25 shared out
/// among the org's agents.
async fn create_fixed_phase(
    base: &str,
    agents: &[Agent],
    tasks_per_org: u64,
) -> anyhow::Result<PhaseResult> {
    let routes = Routes::new(base)?;
    let orgs = agents.iter().map(|a| a.org).max().map_or(0, |m| m + 1);
    let next_batch: Vec<Arc<AtomicU64>> = (0..orgs).map(|_| Arc::default()).collect();
    let batches = tasks_per_org.div_ceil(BATCH);
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
                let seq = batch * BATCH;
                let count = BATCH.min(tasks_per_org - seq);
                match api.create(seq, count).await {
                    Ok(latency) => {
                        outcome.stats.op(Op::Create).ok(latency, count);
                        progress.add(count);
                    }
                    Err(e) => {
                        outcome.stats.op(Op::Create).err(e);
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

/// Every agent creates batches of 25 until `duration` has passed.
async fn create_timed_phase(
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
                match api.create(seq, BATCH).await {
                    Ok(latency) => {
                        outcome.stats.op(Op::Create).ok(latency, BATCH);
                        progress.add(BATCH);
                    }
                    Err(e) => {
                        outcome.stats.op(Op::Create).err(e);
                        progress.error();
                        tokio::time::sleep(ERROR_BACKOFF).await;
                    }
                }
                seq += BATCH;
            }
            outcome
        });
    }
    phase.finish().await
}

/// Every agent repeats claim + complete until `duration` has passed or its
/// org's queue is empty.
async fn cycle_phase(
    base: &str,
    agents: &[Agent],
    duration: Duration,
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
                let task = match api.claim().await {
                    Ok((claimed, latency)) => {
                        stats
                            .op(Op::Claim)
                            .ok(latency, u64::from(claimed.is_some()));
                        match claimed {
                            Some(task) => task,
                            None => {
                                outcome.drained_at = Some(started.elapsed());
                                break;
                            }
                        }
                    }
                    Err(e) => {
                        stats.op(Op::Claim).err(e);
                        stats.op(Op::Cycle).fail();
                        progress.error();
                        tokio::time::sleep(ERROR_BACKOFF).await;
                        continue;
                    }
                };
                match api.complete(&task).await {
                    Ok(latency) => {
                        stats.op(Op::Complete).ok(latency, 1);
                        stats.op(Op::Cycle).ok(cycle_started.elapsed(), 1);
                        progress.add(1);
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
async fn idle_orgs_phase(
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
        let api_client = http_client(1)?;
        let routes = routes.clone();
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
                    &api_client,
                    &routes,
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
    client: &Client,
    routes: &Routes,
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
    let api = AgentApi {
        client: client.clone(),
        key: org.owner.api_key,
        routes: routes.clone(),
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
        match api.complete(&task).await {
            Ok(latency) => stats.op(Op::Complete).ok(latency, 1),
            Err(e) => {
                stats.op(Op::Complete).err(e);
                return false;
            }
        }
    }
    true
}

// ---------------------------------------------------------------------------
// The spawned server
// ---------------------------------------------------------------------------

/// A `taskq serve` child process in its own temporary directory.
struct Server {
    child: Child,
    pid: Option<u32>,
    dir: PathBuf,
    log: PathBuf,
    base: String,
    token: String,
    database: String,
}

impl Server {
    async fn start(args: &BenchArgs) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "taskq-bench-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        tokio::fs::create_dir(&dir)
            .await
            .with_context(|| format!("creating {}", dir.display()))?;
        match Self::launch(args, &dir).await {
            Ok(server) => Ok(server),
            Err(e) => {
                // Dropping the child (kill_on_drop) has already stopped it.
                let _ = tokio::fs::remove_dir_all(&dir).await;
                Err(e)
            }
        }
    }

    async fn launch(args: &BenchArgs, dir: &Path) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("locating the taskq binary")?;
        let database = args
            .database_url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}/taskq.db", dir.display()));
        let token = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let log = dir.join("server.log");
        let log_file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;

        let mut command = Command::new(&exe);
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--database-url"])
            .arg(&database)
            .current_dir(dir)
            .env("TASKQ_ADMIN_TOKEN", &token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .kill_on_drop(true);
        if let Some(mode) = args.sqlite_synchronous {
            command.env("TASKQ_SQLITE_SYNCHRONOUS", mode.as_env());
        }
        if let Some(secs) = args.org_idle_secs {
            command.env("TASKQ_ORG_IDLE_SECS", secs.to_string());
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {} serve", exe.display()))?;
        let pid = child.id();
        let stdout = child.stdout.take().context("server stdout not captured")?;
        let mut lines = BufReader::new(stdout).lines();

        let ready = tokio::time::timeout(STARTUP_TIMEOUT, async {
            while let Some(line) = lines.next_line().await? {
                if let Some(address) = line.trim().strip_prefix(READY_PREFIX) {
                    return Ok(Some(address.trim_end_matches('/').to_owned()));
                }
            }
            Ok::<_, std::io::Error>(None)
        })
        .await;
        let base = match ready {
            Ok(Ok(Some(base))) => base,
            Ok(Ok(None)) => {
                let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
                let status = match status {
                    Ok(Ok(status)) => status.to_string(),
                    _ => "still running".to_owned(),
                };
                bail!(
                    "the server closed its stdout before it was ready ({status}); server log:\n{}",
                    log_tail(&log).await
                );
            }
            Ok(Err(e)) => return Err(e).context("reading the server's stdout"),
            Err(_) => bail!(
                "the server did not print {READY_PREFIX:?} within {} s; server log:\n{}",
                STARTUP_TIMEOUT.as_secs(),
                log_tail(&log).await
            ),
        };
        // Keep draining stdout so the server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        eprintln!(
            "[server] {base} (pid {}), database {database}, log {}",
            pid.map_or_else(|| "?".to_owned(), |p| p.to_string()),
            log.display()
        );

        Ok(Server {
            child,
            pid,
            dir: dir.to_owned(),
            log,
            base,
            token,
            database,
        })
    }

    /// Stops the server (SIGTERM, then kill after a grace period) and
    /// removes its directory. Shows the log's tail when asked, or when the
    /// server did not exit cleanly.
    async fn stop(mut self, show_log: bool) -> anyhow::Result<()> {
        let mut clean = terminate(&self.child).await;
        if clean {
            match tokio::time::timeout(SHUTDOWN_TIMEOUT, self.child.wait()).await {
                Ok(Ok(status)) if status.success() => {}
                Ok(Ok(status)) => {
                    eprintln!("warning: the server exited with {status}");
                    clean = false;
                }
                Ok(Err(e)) => {
                    eprintln!("warning: waiting for the server: {e}");
                    clean = false;
                }
                Err(_) => {
                    eprintln!(
                        "warning: the server did not exit within {} s of SIGTERM; killing it",
                        SHUTDOWN_TIMEOUT.as_secs()
                    );
                    clean = false;
                }
            }
        }
        if self.child.try_wait()?.is_none() {
            self.child.start_kill().context("killing the server")?;
            self.child.wait().await.context("waiting for the server")?;
        }
        if show_log || !clean {
            eprintln!(
                "server log ({}), last lines:\n{}",
                self.log.display(),
                log_tail(&self.log).await
            );
        }
        tokio::fs::remove_dir_all(&self.dir)
            .await
            .with_context(|| format!("removing {}", self.dir.display()))
    }
}

/// Asks the child to shut down gracefully; false if it could not be signalled.
#[cfg(unix)]
async fn terminate(child: &Child) -> bool {
    let Some(pid) = child.id() else {
        return false;
    };
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .is_ok_and(|status| status.success())
}

#[cfg(not(unix))]
async fn terminate(_child: &Child) -> bool {
    false
}

async fn log_tail(log: &Path) -> String {
    match tokio::fs::read_to_string(log).await {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", log.display()),
    }
}

/// A `kB` field of `/proc/<pid>/status` (Linux), e.g. `VmRSS`.
async fn proc_status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = tokio::fs::read_to_string(format!("/proc/{pid}/status"))
        .await
        .ok()?;
    status.lines().find_map(|line| {
        let value = line.strip_prefix(field)?.strip_prefix(':')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

#[derive(Serialize)]
struct Report {
    scenario: Scenario,
    url: String,
    /// `spawned` (started by the bench) or `external` (`--url`).
    server: &'static str,
    /// Database URL of a spawned server; unknown for an external one.
    database: Option<String>,
    sqlite_synchronous: Option<&'static str>,
    orgs: usize,
    /// Agents of the `cycle` and `create` scenarios (0 for `idle-orgs`).
    agents: usize,
    /// Requests in flight during bootstrap and `idle-orgs`.
    concurrency: usize,
    duration_secs: u64,
    tasks_per_org: Option<u64>,
    bootstrap_secs: f64,
    phases: Vec<PhaseReport>,
    ops: Vec<OpReport>,
    cycles: Option<CycleSummary>,
    memory: Option<Memory>,
    /// Org actors running when the load ended, and after `--settle`.
    actors_alive_end: Option<u64>,
    actors_alive_settled: Option<u64>,
}

#[derive(Serialize)]
struct PhaseReport {
    name: &'static str,
    wall_secs: f64,
}

#[derive(Serialize)]
struct OpReport {
    op: &'static str,
    phase: &'static str,
    count: u64,
    errors: u64,
    per_sec: f64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    max_ms: Option<f64>,
    /// Tasks carried by the successful requests.
    items: u64,
    items_per_sec: f64,
    error_samples: Vec<String>,
}

#[derive(Serialize)]
struct CycleSummary {
    count: u64,
    per_sec: f64,
    /// Agents that stopped early because their org's queue was empty.
    agents_drained: usize,
    agents: usize,
    first_drained_secs: Option<f64>,
}

impl CycleSummary {
    fn new(phase: &PhaseResult, agents: usize) -> Self {
        let cycles = &phase.stats.ops[Op::Cycle as usize];
        let count = cycles.latencies_us.len() as u64;
        CycleSummary {
            count,
            per_sec: rate(count, phase.wall),
            agents_drained: phase.drained.len(),
            agents,
            first_drained_secs: phase.drained.iter().min().map(Duration::as_secs_f64),
        }
    }
}

#[derive(Serialize)]
struct Memory {
    rss_start_kb: Option<u64>,
    rss_end_kb: Option<u64>,
    /// Reading after `--settle` seconds.
    rss_settled_kb: Option<u64>,
    rss_peak_kb: Option<u64>,
    /// (end - start) / orgs, for `idle-orgs`.
    per_org_kb: Option<f64>,
}

impl Report {
    fn add_phase(&mut self, phase: PhaseResult, ops: &[Op]) {
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

fn op_report(op: Op, phase: &'static str, stats: OpStats, wall: Duration) -> OpReport {
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

fn render_table(report: &Report) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "taskq bench: scenario {}, orgs {}",
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
            }
        }
        let _ = writeln!(out);
    }

    let _ = writeln!(
        out,
        "\n{:<10} {:>9} {:>8} {:>10} {:>8} {:>8} {:>8}",
        "op", "count", "errors", "per_sec", "p50_ms", "p99_ms", "max_ms"
    );
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
