//! The server the bench starts when no `--url` is given: `taskq serve`
//! from this same binary, in a fresh temporary directory holding its
//! database, master key and log, stopped and removed at the end. A
//! scenario may start several, one after another, each with environment
//! variables of its own (the `search` scenario's embedders).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};

use super::BenchArgs;
use crate::process::{log_tail, ServeCommand, ServerProcess, StartError, READY_PREFIX};

/// How long a spawned server may take to print its readiness line.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a spawned server may take to exit after SIGTERM.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Server log lines shown when a spawned server fails.
const LOG_TAIL_LINES: usize = 20;

/// A `taskq serve` child process in its own temporary directory.
pub(super) struct Server {
    pub(super) process: ServerProcess,
    dir: PathBuf,
    pub(super) token: String,
    pub(super) database: String,
}

impl Server {
    pub(super) async fn start(args: &BenchArgs) -> anyhow::Result<Self> {
        // The reports scenario measures recomputes it asks for itself; the
        // schedule would add runs of its own at random moments.
        let env: &[(&str, String)] = match args.scenario {
            super::Scenario::Reports => &[("TASKQ_REPORTS_SCHEDULE", "off".to_owned())],
            _ => &[],
        };
        Self::start_with_env(args, env).await
    }

    /// A server with `env` set on top of what it inherits from the bench.
    pub(super) async fn start_with_env(
        args: &BenchArgs,
        env: &[(&str, String)],
    ) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "taskq-bench-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        tokio::fs::create_dir(&dir)
            .await
            .with_context(|| format!("creating {}", dir.display()))?;
        match Self::launch(args, &dir, env).await {
            Ok(server) => Ok(server),
            Err(e) => {
                // A server that failed to start has exited or been killed.
                let _ = tokio::fs::remove_dir_all(&dir).await;
                Err(e)
            }
        }
    }

    async fn launch(args: &BenchArgs, dir: &Path, env: &[(&str, String)]) -> anyhow::Result<Self> {
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

        let mut command = ServeCommand::new(&exe, dir, &database, &token, &log, STARTUP_TIMEOUT);
        if let Some(mode) = args.sqlite_synchronous {
            command = command.env("TASKQ_SQLITE_SYNCHRONOUS", mode.as_env());
        }
        if let Some(secs) = args.org_idle_secs {
            command = command.env("TASKQ_ORG_IDLE_SECS", secs.to_string());
        }
        command = command.envs(env.iter().map(|(key, value)| (*key, value.as_str())));
        let process = match command.spawn().await {
            Ok(process) => process,
            Err(StartError::OpenLog { path, source }) => {
                return Err(source).with_context(|| format!("creating {}", path.display()))
            }
            Err(StartError::Spawn { binary, source }) => {
                return Err(source).with_context(|| format!("starting {} serve", binary.display()))
            }
            Err(StartError::ReadStdout { source, .. }) => {
                return Err(source).context("reading the server's stdout")
            }
            Err(StartError::StdoutClosed { status }) => {
                let status = status.map_or_else(|| "still running".to_owned(), |s| s.to_string());
                bail!(
                    "the server closed its stdout before it was ready ({status}); server log:\n{}",
                    log_tail(&log, LOG_TAIL_LINES)
                );
            }
            Err(StartError::NotReady { timeout }) => bail!(
                "the server did not print {READY_PREFIX:?} within {} s; server log:\n{}",
                timeout.as_secs(),
                log_tail(&log, LOG_TAIL_LINES)
            ),
        };
        eprintln!(
            "[server] {} (pid {}), database {database}, log {}",
            process.url(),
            process
                .pid()
                .map_or_else(|| "?".to_owned(), |p| p.to_string()),
            log.display()
        );

        Ok(Server {
            process,
            dir: dir.to_owned(),
            token,
            database,
        })
    }

    /// Stops the server (SIGTERM, then kill after a grace period) and
    /// removes its directory. Shows the log's tail when asked, or when the
    /// server did not exit cleanly.
    pub(super) async fn stop(mut self, show_log: bool) -> anyhow::Result<()> {
        let mut clean = self.process.terminate().is_ok();
        if clean {
            match self.process.wait_for_exit(SHUTDOWN_TIMEOUT).await {
                Ok(Some(status)) if status.success() => {}
                Ok(Some(status)) => {
                    eprintln!("warning: the server exited with {status}");
                    clean = false;
                }
                Err(e) => {
                    eprintln!("warning: waiting for the server: {e}");
                    clean = false;
                }
                Ok(None) => {
                    eprintln!(
                        "warning: the server did not exit within {} s of SIGTERM; killing it",
                        SHUTDOWN_TIMEOUT.as_secs()
                    );
                    clean = false;
                }
            }
        }
        self.process.kill().await.context("killing the server")?;
        if show_log || !clean {
            let log = self.process.stderr_log();
            eprintln!(
                "server log ({}), last lines:\n{}",
                log.display(),
                log_tail(log, LOG_TAIL_LINES)
            );
        }
        tokio::fs::remove_dir_all(&self.dir)
            .await
            .with_context(|| format!("removing {}", self.dir.display()))
    }
}

impl Drop for Server {
    /// A server dropped without `stop` (the run failed or was interrupted
    /// while a scenario held it) is killed by its process handle; its
    /// directory goes too.
    fn drop(&mut self) {
        if self.dir.exists() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
