//! The server under test: a `taskq serve` process on its own temporary
//! directory and database (a SQLite file, or a fresh PostgreSQL database
//! dropped afterwards), started, stopped, killed and restarted by the tests,
//! and direct access to that database.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::str::FromStr;
use std::time::Duration;

use sqlx::Connection;
use taskq::process::{ServeCommand, ServerProcess, StartError};

use super::need;

/// Environment variable naming a PostgreSQL server (any database on it) that
/// the PostgreSQL variants of the tests may create databases on.
pub const POSTGRES_ENV: &str = "TASKQ_TEST_POSTGRES_URL";

/// How many PostgreSQL servers the tests run at once. Each opens up to a
/// dozen connections (a node of a cluster as many), and PostgreSQL's
/// default `max_connections` is 100: past it a server under test fails to
/// start, or answers 503, for a reason that is not the test's. A server
/// holds its share until it is dropped; the first node of a cluster holds
/// its nodes' shares (`Builder::nodes`), taken at once so that two
/// clusters starting together never wait on each other.
const POSTGRES_SERVERS_AT_ONCE: usize = 6;
static POSTGRES_SERVERS: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(POSTGRES_SERVERS_AT_ONCE);

const START_TIMEOUT: Duration = Duration::from_secs(30);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a server may take to exit after SIGTERM.
const EXIT_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub struct Builder {
    backend: Backend,
    idle_secs: Option<u64>,
    env: Vec<(String, String)>,
    /// A PEM certificate the harness's client trusts (a server over HTTPS).
    trusted: Option<Vec<u8>>,
    /// `host:port` the server reaches PostgreSQL through (a test's proxy).
    postgres_through: Option<String>,
    /// Another server's database and operator token: a second node of its
    /// cluster (the database is that server's to drop).
    joins: Option<(String, String)>,
    /// A store the test made and owns (`on_database`).
    database: Option<String>,
    /// The nodes of the cluster this server is the first of (1 alone).
    nodes: u32,
}

impl Builder {
    /// Makes the harness's client trust `pem`, the certificate of a server
    /// started with `TASKQ_TLS_CERT`.
    pub fn trust(mut self, pem: &[u8]) -> Self {
        self.trusted = Some(pem.to_vec());
        self
    }

    /// Makes the server reach PostgreSQL through `addr` (`host:port`), a
    /// proxy the test controls; the database is still created directly.
    pub fn postgres_through(mut self, addr: &str) -> Self {
        self.postgres_through = Some(addr.to_string());
        self
    }

    /// Makes this server the first of a cluster of `nodes` on PostgreSQL:
    /// it holds the share of the servers at once that the others, started
    /// `joining` it, then need not take.
    pub fn nodes(mut self, nodes: u32) -> Self {
        self.nodes = nodes;
        self
    }

    /// Sets `TASKQ_ORG_IDLE_SECS` for the server.
    pub fn idle_secs(mut self, secs: u64) -> Self {
        self.idle_secs = Some(secs);
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Starts another node of `first`'s cluster: its database and operator
    /// token (the master key must be given to both, `TASKQ_MASTER_KEY`).
    pub fn joining(mut self, first: &TestServer) -> Self {
        self.joins = Some((first.database_url.clone(), first.admin_token.clone()));
        self
    }

    /// Runs the server on the store at `url` (of the builder's backend),
    /// which the test made and removes; `sqlite_path` does not name it.
    pub fn on_database(mut self, url: &str) -> Self {
        self.database = Some(url.to_string());
        self
    }

    pub async fn start(self) -> TestServer {
        let postgres_share = match (self.backend, &self.joins) {
            (Backend::Postgres, None) => Some(
                POSTGRES_SERVERS
                    .acquire_many(self.nodes.min(POSTGRES_SERVERS_AT_ONCE as u32))
                    .await
                    .expect("the semaphore is never closed"),
            ),
            _ => None,
        };
        let dir = tempfile::Builder::new()
            .prefix("taskq-test-")
            .tempdir()
            .expect("create tempdir");
        let (database_url, pg_cleanup) = match (&self.joins, self.backend) {
            _ if self.database.is_some() => (self.database.clone().unwrap_or_default(), None),
            (Some((url, _)), _) => {
                let url = match &self.postgres_through {
                    Some(addr) => url_with_host(url, addr),
                    None => url.clone(),
                };
                (url, None)
            }
            (None, Backend::Sqlite) => (
                format!("sqlite://{}", dir.path().join("taskq.db").display()),
                None,
            ),
            (None, Backend::Postgres) => {
                let database = PostgresDatabase::create().await;
                let url = match &self.postgres_through {
                    Some(addr) => url_with_host(&database.url, addr),
                    None => database.url.clone(),
                };
                (url, Some(database))
            }
        };
        let mut env = self.env;
        // Tests that want meaning choose an embedder; the rest must not pick
        // up a model installed in the working directory.
        if !env.iter().any(|(k, _)| k == "TASKQ_EMBEDDINGS") {
            env.push(("TASKQ_EMBEDDINGS".into(), "none".into()));
        }
        // Reports are computed when a test asks (the operator's recompute),
        // so moving the clock never computes one behind its back.
        if !env.iter().any(|(k, _)| k == "TASKQ_REPORTS_SCHEDULE") {
            env.push(("TASKQ_REPORTS_SCHEDULE".into(), "off".into()));
        }
        if let Some(secs) = self.idle_secs {
            env.push(("TASKQ_ORG_IDLE_SECS".into(), secs.to_string()));
        }
        taskq::install_crypto_provider();
        let mut http = reqwest::Client::builder().timeout(REQUEST_TIMEOUT);
        if let Some(pem) = &self.trusted {
            http = http.add_root_certificate(
                reqwest::Certificate::from_pem(pem).expect("a PEM certificate"),
            );
        }
        let http = http.build().expect("http client");
        let mut srv = TestServer {
            backend: self.backend,
            base_url: String::new(),
            admin_token: match &self.joins {
                Some((_, token)) => token.clone(),
                None => format!("admin-{}", uuid::Uuid::new_v4().simple()),
            },
            database_url,
            dir,
            env,
            process: None,
            http,
            pg_cleanup,
            _postgres_share: postgres_share,
        };
        srv.spawn().await;
        srv
    }
}

/// A fresh database on the PostgreSQL server `TASKQ_TEST_POSTGRES_URL`
/// names, dropped when this is dropped.
pub struct PostgresDatabase {
    admin_url: String,
    db_name: String,
    pub url: String,
}

impl PostgresDatabase {
    pub async fn create() -> PostgresDatabase {
        let admin_url = need(POSTGRES_ENV);
        let db_name = format!("taskq_t_{}", uuid::Uuid::new_v4().simple());
        let mut conn = sqlx::PgConnection::connect(&admin_url)
            .await
            .unwrap_or_else(|e| panic!("connect to {admin_url}: {e}"));
        sqlx::query(&format!("CREATE DATABASE {db_name}"))
            .execute(&mut conn)
            .await
            .expect("create test database");
        let _ = conn.close().await;
        let url = url_with_database(&admin_url, &db_name);
        PostgresDatabase {
            admin_url,
            db_name,
            url,
        }
    }
}

impl Drop for PostgresDatabase {
    fn drop(&mut self) {
        let (admin_url, db_name) = (self.admin_url.clone(), self.db_name.clone());
        // Best effort; runs on its own thread because Drop is synchronous.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Ok(mut conn) = sqlx::PgConnection::connect(&admin_url).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {db_name} WITH (FORCE)"))
                        .execute(&mut conn)
                        .await;
                }
            });
        })
        .join();
    }
}

/// Replaces the database name in a PostgreSQL URL, keeping its query string.
fn url_with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let authority = match base[scheme_end..].find('/') {
        Some(i) => &base[scheme_end..scheme_end + i],
        None => &base[scheme_end..],
    };
    let mut out = format!("{}{}/{}", &base[..scheme_end], authority, db);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// Replaces the `host:port` of a URL, keeping its user and the rest.
fn url_with_host(url: &str, addr: &str) -> String {
    let scheme_end = url.find("://").map(|i| i + 3).unwrap_or(0);
    let rest = &url[scheme_end..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let user = authority.rfind('@').map(|i| &authority[..=i]).unwrap_or("");
    format!(
        "{}{user}{addr}{}",
        &url[..scheme_end],
        &rest[authority_end..]
    )
}

/// The `host:port` of the PostgreSQL server the tests use.
pub fn postgres_addr() -> String {
    let url = need(POSTGRES_ENV);
    let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    let host = authority.rsplit('@').next().unwrap_or(authority);
    if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:5432")
    }
}

/// One running (or stopped) `taskq serve` process with its own tempdir
/// (working directory, master key, SQLite file, stderr log) and database.
pub struct TestServer {
    pub backend: Backend,
    /// `http://127.0.0.1:PORT`, refreshed on every start.
    pub base_url: String,
    pub admin_token: String,
    pub database_url: String,
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
    process: Option<ServerProcess>,
    pub(super) http: reqwest::Client,
    pg_cleanup: Option<PostgresDatabase>,
    /// Released last, once the server has stopped (`POSTGRES_SERVERS`).
    _postgres_share: Option<tokio::sync::SemaphorePermit<'static>>,
}

impl TestServer {
    pub fn builder(backend: Backend) -> Builder {
        Builder {
            backend,
            idle_secs: None,
            env: Vec::new(),
            trusted: None,
            postgres_through: None,
            joins: None,
            database: None,
            nodes: 1,
        }
    }

    pub async fn start(backend: Backend) -> TestServer {
        Self::builder(backend).start().await
    }

    /// Sets (or with `None` removes) an environment variable for the
    /// server's next start.
    pub fn set_env(&mut self, key: &str, value: Option<&str>) {
        self.env.retain(|(k, _)| k != key);
        if let Some(v) = value {
            self.env.push((key.to_owned(), v.to_owned()));
        }
    }

    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    pub fn sqlite_path(&self) -> PathBuf {
        self.dir.path().join("taskq.db")
    }

    fn stderr_path(&self) -> PathBuf {
        self.dir.path().join("server-stderr.log")
    }

    /// Everything the server wrote to stderr so far (all its runs).
    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.stderr_path()).unwrap_or_default()
    }

    pub(super) fn log_tail(&self) -> String {
        let log = self.server_log();
        let start = log.len().saturating_sub(8000);
        let start = (start..log.len())
            .find(|i| log.is_char_boundary(*i))
            .unwrap_or(0);
        log[start..].to_string()
    }

    async fn spawn(&mut self) {
        assert!(self.process.is_none(), "server already running");
        let command = ServeCommand::new(
            Path::new(env!("CARGO_BIN_EXE_taskq")),
            self.dir.path(),
            &self.database_url,
            &self.admin_token,
            &self.stderr_path(),
            START_TIMEOUT,
        )
        .env("TASKQ_EMBEDDINGS", "none")
        .env("TASKQ_REPORTS_SCHEDULE", "off")
        .env("RUST_LOG", "info")
        .env_remove("TASKQ_MASTER_KEY")
        .env_remove("TASKQ_LISTEN")
        .env_remove("TASKQ_DATABASE_URL")
        .env_remove("TASKQ_LLM_URL")
        .env_remove("TASKQ_ORG_IDLE_SECS")
        .env_remove("TASKQ_LOG_FORMAT")
        .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let process = match command.spawn().await {
            Ok(process) => process,
            Err(StartError::OpenLog { source, .. }) => panic!("open stderr log: {source:?}"),
            Err(StartError::Spawn { source, .. }) => panic!("spawn taskq binary: {source:?}"),
            Err(StartError::ReadStdout { source, status }) => {
                self.not_started(&format!("reading stdout: {source}"), status)
            }
            Err(StartError::StdoutClosed { status }) => {
                self.not_started("stdout closed before the readiness line", status)
            }
            Err(StartError::NotReady { timeout }) => panic!(
                "taskq printed no readiness line within {timeout:?}. stderr:\n{}",
                self.log_tail()
            ),
        };
        self.base_url = process.url().to_string();
        self.process = Some(process);
    }

    fn not_started(&self, why: &str, status: Option<ExitStatus>) -> ! {
        panic!(
            "taskq did not start ({why}; exit status {status:?}). stderr:\n{}",
            self.log_tail()
        );
    }

    /// Sends SIGTERM without waiting (the server may still be finishing requests).
    pub fn signal_term(&self) {
        let process = self.process.as_ref().expect("server is not running");
        let pid = process.pid().expect("server is not running");
        if let Err(e) = process.terminate() {
            panic!("kill -TERM {pid} failed: {e}");
        }
    }

    /// Waits (up to 30 s) for the server process to exit.
    pub async fn wait_exit(&mut self) -> ExitStatus {
        let mut process = self.process.take().expect("server is not running");
        match process
            .wait_for_exit(EXIT_TIMEOUT)
            .await
            .expect("wait for taskq")
        {
            Some(status) => status,
            None => {
                let _ = process.kill().await;
                panic!(
                    "taskq did not exit within {} s of SIGTERM. stderr:\n{}",
                    EXIT_TIMEOUT.as_secs(),
                    self.log_tail()
                );
            }
        }
    }

    /// SIGTERM, wait for a graceful exit, and return the exit status.
    pub async fn stop(&mut self) -> ExitStatus {
        self.signal_term();
        self.wait_exit().await
    }

    /// Graceful restart (SIGTERM) on the same database, tempdir and master key.
    pub async fn restart(&mut self) {
        let status = self.stop().await;
        assert!(
            status.success(),
            "taskq exited with {status:?} after SIGTERM. stderr:\n{}",
            self.log_tail()
        );
        self.spawn().await;
    }

    /// SIGKILL: no chance to flush anything.
    /// The server's resident memory now and its peak since the last
    /// `reset_peak_rss`, in KiB (Linux only).
    pub async fn rss_kb(&self) -> (Option<u64>, Option<u64>) {
        let process = self.process.as_ref().expect("server is not running");
        (process.rss_kb().await, process.peak_rss_kb().await)
    }

    /// Starts the server's peak memory over from its current memory.
    pub async fn reset_peak_rss(&self) -> bool {
        let process = self.process.as_ref().expect("server is not running");
        process.reset_peak_rss().await
    }

    /// SIGSTOP (`pause: true`) or SIGCONT: the process is frozen, as a
    /// machine that stalls, and goes on where it stopped.
    pub fn freeze(&self, pause: bool) {
        let process = self.process.as_ref().expect("server is not running");
        let pid = process.pid().expect("server is not running");
        let signal = if pause { "-STOP" } else { "-CONT" };
        let status = std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid}");
    }

    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    pub async fn kill9(&mut self) {
        let mut process = self.process.take().expect("server is not running");
        process.kill().await.expect("kill -9 taskq");
    }

    /// Starts the server again after `kill9` or `stop`.
    pub async fn start_again(&mut self) {
        self.spawn().await;
    }
    // ------------------------------------------------------------ database

    /// Opens the server's database directly (SQLite in WAL mode allows this
    /// while the server runs).
    pub async fn open_db(&self) -> Db {
        match self.backend {
            Backend::Sqlite => {
                let opts = sqlx::sqlite::SqliteConnectOptions::from_str(&format!(
                    "{}?mode=rw",
                    self.database_url
                ))
                .expect("sqlite url")
                .busy_timeout(Duration::from_secs(10));
                Db::Sqlite(
                    sqlx::SqliteConnection::connect_with(&opts)
                        .await
                        .expect("open sqlite database"),
                )
            }
            Backend::Postgres => Db::Postgres(
                sqlx::PgConnection::connect(&self.database_url)
                    .await
                    .expect("open postgres database"),
            ),
        }
    }
}

impl TestServer {
    /// Runs one statement on the server's database, for a test that tampers
    /// with what the server stored: `?` placeholders (numbered `$1, $2, ...`
    /// for PostgreSQL) bound to `binds`. Answers the rows it changed.
    pub async fn execute(&self, sql: &str, binds: &[&str]) -> u64 {
        let changed = match self.open_db().await {
            Db::Sqlite(mut conn) => binds
                .iter()
                .fold(sqlx::query(sql), |q, b| q.bind(*b))
                .execute(&mut conn)
                .await
                .map(|r| r.rows_affected()),
            Db::Postgres(mut conn) => {
                let mut numbered = String::with_capacity(sql.len() + 8);
                for (n, part) in sql.split('?').enumerate() {
                    if n > 0 {
                        numbered.push_str(&format!("${n}"));
                    }
                    numbered.push_str(part);
                }
                binds
                    .iter()
                    .fold(sqlx::query(&numbered), |q, b| q.bind(*b))
                    .execute(&mut conn)
                    .await
                    .map(|r| r.rows_affected())
            }
        };
        changed.unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // Dropping the process kills it, before its database goes.
        drop(self.process.take());
        drop(self.pg_cleanup.take());
    }
}

pub enum Db {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

/// Starts `taskq serve` on a fresh SQLite file with `env` and expects it to
/// refuse to start; answers what it wrote on stderr.
pub async fn refused_at_start(env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_taskq"))
        .arg("serve")
        .envs(env.iter().copied())
        .env("TASKQ_DATA_DIR", dir.path())
        .env("TASKQ_LISTEN", "127.0.0.1:0")
        .env(
            "TASKQ_DATABASE_URL",
            format!("sqlite://{}", dir.path().join("t.db").display()),
        )
        .output()
        .await
        .expect("run taskq serve");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "the server started: {stderr}");
    stderr
}
