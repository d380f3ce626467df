//! The command line: the flags of a run and the checks on them before
//! anything starts.

use std::path::PathBuf;

use anyhow::{ensure, Context as _};
use reqwest::Url;
use serde::Serialize;

use crate::webhooks;

/// Where `taskq serve` looks for the builtin model unless told otherwise
/// (the server's `DEFAULT_MODEL_DIR`).
const DEFAULT_MODEL_DIR: &str = "taskq-data/models/all-MiniLM-L6-v2";

/// The largest org the `search` scenario fills.
const MAX_SEARCH_SIZE: u64 = 1_000_000;

/// Load-test the task API: throughput and latency of create, claim and
/// complete with many concurrent agents, or server memory with many orgs.
///
/// Without --url the bench starts its own server (`taskq serve`, see
/// --server-bin) in a temporary directory and stops it at the end.
#[derive(clap::Parser, Debug, Clone)]
#[command(name = "taskq-bench", version)]
pub struct BenchArgs {
    /// What to run: create then claim+complete cycles, only creates, or many small orgs.
    #[arg(long, value_enum, default_value_t = Scenario::Cycle)]
    pub scenario: Scenario,

    /// Base URL of a running server (e.g. http://127.0.0.1:8080). Without it the
    /// bench starts its own server in a temporary directory.
    #[arg(long)]
    pub url: Option<String>,

    /// The `taskq` binary the bench starts its servers (and, in the `search`
    /// scenario, its embeddings endpoint) with [default: `taskq` beside this
    /// executable].
    #[arg(long, conflicts_with = "url")]
    pub server_bin: Option<PathBuf>,

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

    /// Tasks each agent claims per request in the `cycle` scenario (1 to
    /// 25). Above 1, an agent claims with `count` and completes what it got
    /// in one update; every task is still one cycle.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=25))]
    pub claim_batch: u32,

    /// In the `cycle` scenario, subscribe every org to a webhook receiver
    /// the bench serves on loopback, for every event, once the tasks are
    /// created: one that answers at once, or one that answers after 2 s.
    /// Reports the events delivered and the backlog after the cycles.
    #[arg(long, value_enum)]
    pub webhook: Option<webhooks::Receiver>,

    /// In the `cycle` scenario, keep this many board sessions open (signed
    /// in with the agents' keys in turn), each doing what the board's script
    /// does: hold the board's stream open and, on each change, fetch the
    /// changed cards or (at most every 5 s) the page again. Reports their
    /// cost on an idle server and during the cycles.
    #[arg(long, default_value_t = 0)]
    pub boards: usize,
    /// With `--boards`: the boards poll as the script did before the
    /// stream (the change mark every second, the page again when it moves).
    #[arg(long, requires = "boards")]
    pub boards_poll: bool,
    /// In the `cycle` scenario, keep this many subscribers on the orgs'
    /// event streams (`GET /events`; stream i follows org i % orgs, ten
    /// streams a key, the keys issued by the orgs' owners), opened after the
    /// create phase and read while the cycles run. Reports the events
    /// received, disconnects and the time from a commit to its event's
    /// arrival.
    #[arg(long, default_value_t = 0)]
    pub streams: usize,

    /// In the `cycle` scenario, this many more subscribers that open the
    /// stream and read nothing before the cycles end, so that the server
    /// cuts off a stream more than 10,000 events behind; reports how many
    /// were cut off.
    #[arg(long, default_value_t = 0)]
    pub slow_streams: usize,

    /// Cycle: fill the first org with this many finished tasks, make them
    /// expired (a retention of one day, the clock moved two days on: a
    /// server built with the test hooks), and run the cycles while the
    /// retention sweep removes them, paced as the periodic one is.
    #[arg(long, default_value_t = 0)]
    pub expired: u64,

    /// With `--expired`: the same store, without the sweep (the pair's
    /// other half).
    #[arg(long, requires = "expired")]
    pub no_sweep: bool,

    /// With `--expired`: after the cycles, wait for the sweep to remove
    /// every expired task, then fill as many again; reports the time and
    /// the SQLite file's size at each step.
    #[arg(long, requires = "expired", conflicts_with = "no_sweep")]
    pub expired_drain: bool,

    /// Cycle: tasks per org that wait a year (a `run_at` ahead), created
    /// before the run so that claims run beside them; the server's CPU over
    /// five idle seconds with them present is reported.
    #[arg(long, default_value_t = 0)]
    pub waiting: u64,

    /// Tasks with the largest allowed content created in every org
    /// (`big-pages` scenario).
    #[arg(long, default_value_t = 200)]
    pub big_tasks: u64,

    /// Requests in flight during bootstrap and the `idle-orgs` scenario.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,

    /// Seconds to wait after the last phase before the final memory reading
    /// (e.g. to let idle org actors stop).
    #[arg(long, default_value_t = 0)]
    pub settle: u64,

    /// The builtin model's folder (`search` scenario): its servers run it,
    /// and so does the embeddings endpoint the bench starts
    /// (`taskq models serve`).
    #[arg(long, env = "TASKQ_EMBEDDINGS_MODEL_DIR", default_value = DEFAULT_MODEL_DIR)]
    pub model_dir: PathBuf,

    /// An OpenAI-compatible embeddings endpoint's base URL for the `search`
    /// scenario's endpoint phase, instead of the one the bench starts.
    #[arg(long)]
    pub embeddings_url: Option<String>,

    /// The model name sent to --embeddings-url [default: all-MiniLM-L6-v2].
    #[arg(long, requires = "embeddings_url")]
    pub embeddings_model: Option<String>,

    /// Org sizes (tasks) at which the `search` scenario measures latency.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    pub search_sizes: Vec<u64>,

    /// Orgs the `reports` scenario seeds and recomputes.
    #[arg(long, default_value_t = 1_000)]
    pub report_orgs: usize,

    /// Tasks in each of those orgs (60% completed, 10% failed).
    #[arg(long, default_value_t = 1_000)]
    pub report_tasks: u64,

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
    /// --big-tasks tasks per org with the largest allowed content, then every
    /// agent reads them in full pages (`GET /tasks?full=true&limit=200`) for
    /// --duration seconds; reports the server's peak memory while reading.
    BigPages,
    /// Every agent long-polls an empty org: server CPU while --duration
    /// seconds pass idle, then for --duration seconds how soon a task created
    /// one at a time reaches a waiting agent.
    Longpoll,
    /// Relevance of search (builtin model, endpoint, keyword baseline) on
    /// the compiled-in evaluation set, then search latency for --agents
    /// agents over --duration seconds in orgs of --search-sizes tasks.
    Search,
    /// --report-orgs orgs of --report-tasks tasks each, then claim+complete
    /// cycles for --duration seconds alone and again while the operator's
    /// recompute runs org after org: the change in claim p99.
    Reports,
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
    pub fn as_env(self) -> &'static str {
        match self {
            Self::Full => "FULL",
            Self::Normal => "NORMAL",
        }
    }
}

/// Refuses flags that do not fit together before anything starts.
pub fn validate(args: &BenchArgs) -> anyhow::Result<()> {
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
    if args.scenario == Scenario::Search {
        ensure!(
            args.url.is_none(),
            "--scenario search starts its own servers, one per embedder: drop --url"
        );
        ensure!(!args.search_sizes.is_empty(), "--search-sizes needs a size");
        for &size in &args.search_sizes {
            ensure!(
                (1..=MAX_SEARCH_SIZE).contains(&size),
                "--search-sizes: {size} is not from 1 to {MAX_SEARCH_SIZE}"
            );
        }
        if let Some(url) = &args.embeddings_url {
            let parsed =
                Url::parse(url).with_context(|| format!("invalid --embeddings-url {url:?}"))?;
            ensure!(
                matches!(parsed.scheme(), "http" | "https"),
                "--embeddings-url must be an http(s) URL, not {url:?}"
            );
        }
    }
    ensure!(
        args.webhook.is_none() || args.scenario == Scenario::Cycle,
        "--webhook is for the cycle scenario"
    );
    ensure!(
        args.expired == 0 || args.scenario == Scenario::Cycle,
        "--expired is for the cycle scenario"
    );
    ensure!(
        args.boards == 0 || args.scenario == Scenario::Cycle,
        "--boards is for the cycle scenario"
    );
    ensure!(
        (args.streams == 0 && args.slow_streams == 0) || args.scenario == Scenario::Cycle,
        "--streams and --slow-streams are for the cycle scenario"
    );
    if matches!(args.scenario, Scenario::Cycle | Scenario::Reports) {
        ensure!(
            args.tasks_per_org >= 1,
            "--tasks-per-org must be at least 1"
        );
    }
    Ok(())
}
