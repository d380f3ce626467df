//! The server the bench starts when no `--url` is given: `taskq serve`
//! from the `--server-bin` binary, in a fresh temporary directory holding
//! its database, master key and log, stopped and removed at the end. A
//! scenario may start several, one after another, each with environment
//! variables of its own (the `search` scenario's embedders).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, Context as _};
use taskq_process::{log_tail, ServeCommand, ServerProcess, StartError, READY_PREFIX};

use super::BenchArgs;

/// How long a spawned server may take to print its readiness line.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a spawned server may take to exit after SIGTERM.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Server log lines shown when a spawned server fails.
const LOG_TAIL_LINES: usize = 20;

/// The `taskq` binary to start: `--server-bin`, or `taskq` in the folder of
/// this executable, where cargo builds both. Absolute: each child runs in a
/// directory of its own, where a relative path would be looked up.
pub(super) fn server_binary(args: &BenchArgs) -> anyhow::Result<PathBuf> {
    if let Some(path) = &args.server_bin {
        return if path.is_file() {
            std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))
        } else {
            Err(anyhow!(
                "--server-bin {}: no such file; build the server with `cargo build --release` \
                 (target/release/taskq)",
                path.display()
            ))
        };
    }
    let exe = std::env::current_exe().context("locating the taskq-bench executable")?;
    let beside = exe
        .parent()
        .map(|dir| dir.join(format!("taskq{}", std::env::consts::EXE_SUFFIX)))
        .filter(|path| path.is_file());
    beside.ok_or_else(|| {
        anyhow!(
            "no taskq server binary beside {}: build it with `cargo build --release` \
             (or `cargo build` for a debug bench), or name one with --server-bin PATH",
            exe.display()
        )
    })
}

/// A fresh directory under the system's temporary one, for a child's
/// files.
pub(super) async fn temp_dir(what: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "taskq-bench-{what}{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    tokio::fs::create_dir(&dir)
        .await
        .with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Words why a child (`what`: "the server") did not become ready, with
/// its log's tail where that says more.
pub(super) fn start_error(error: StartError, what: &str, log: &Path) -> anyhow::Error {
    match error {
        StartError::OpenLog { path, source } => {
            anyhow!(source).context(format!("creating {}", path.display()))
        }
        StartError::Spawn { binary, source } => {
            anyhow!(source).context(format!("starting {what} ({})", binary.display()))
        }
        StartError::ReadStdout { source, .. } => {
            anyhow!(source).context(format!("reading the stdout of {what}"))
        }
        StartError::StdoutClosed { status } => {
            let status = status.map_or_else(|| "still running".to_owned(), |s| s.to_string());
            anyhow!(
                "{what} closed its stdout before it was ready ({status}); its log:\n{}",
                log_tail(log, LOG_TAIL_LINES)
            )
        }
        StartError::NotReady { timeout } => anyhow!(
            "{what} did not print {READY_PREFIX:?} within {} s; its log:\n{}",
            timeout.as_secs(),
            log_tail(log, LOG_TAIL_LINES)
        ),
    }
}

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
        let mut env: Vec<(&str, String)> = Vec::new();
        if args.scenario == super::Scenario::Reports {
            env.push(("TASKQ_REPORTS_SCHEDULE", "off".to_owned()));
        }
        // The bench's webhook receiver is on loopback.
        if args.webhook.is_some() {
            env.push(("TASKQ_WEBHOOKS_ALLOW_PRIVATE", "1".to_owned()));
        }
        Self::start_with_env(args, &env).await
    }

    /// A server with `env` set on top of what it inherits from the bench.
    pub(super) async fn start_with_env(
        args: &BenchArgs,
        env: &[(&str, String)],
    ) -> anyhow::Result<Self> {
        let dir = temp_dir("").await?;
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
        let exe = server_binary(args)?;
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
        let process = command
            .spawn()
            .await
            .map_err(|e| start_error(e, "the server", &log))?;
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

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, Parser as _};

    use super::*;

    fn args(command_line: &[&str]) -> BenchArgs {
        BenchArgs::try_parse_from(
            std::iter::once("taskq-bench").chain(command_line.iter().copied()),
        )
        .unwrap()
    }

    #[test]
    fn the_flags_hang_together() {
        BenchArgs::command().debug_assert();
    }

    #[test]
    fn a_named_server_binary_is_taken() {
        let exe = std::env::current_exe().unwrap();
        let found = server_binary(&args(&["--server-bin", &exe.display().to_string()])).unwrap();
        assert_eq!(found, exe);
    }

    #[test]
    fn a_missing_server_binary_says_how_to_get_one() {
        let missing = server_binary(&args(&["--server-bin", "/nonexistent/taskq"])).unwrap_err();
        assert!(
            missing.to_string().contains("cargo build --release"),
            "{missing}"
        );
        // The test binary has no `taskq` beside it in target/*/deps/.
        let default = server_binary(&args(&[])).unwrap_err();
        assert!(default.to_string().contains("--server-bin"), "{default}");
    }

    #[test]
    fn a_server_binary_needs_no_url() {
        let both = [
            "taskq-bench",
            "--url",
            "http://127.0.0.1:1",
            "--server-bin",
            "x",
        ];
        assert!(BenchArgs::try_parse_from(both).is_err());
    }
}
