//! A `taskq serve` child process, as started by the load tool
//! (`taskq-bench`) and by the black-box tests.
//!
//! Owns everything about running the server as a child: the command line
//! (`serve` on a free loopback port, in a given directory, with a given
//! database and operator token), waiting for the readiness line the server
//! prints on stdout, draining stdout afterwards, sending stderr to a log
//! file, stopping the process (SIGTERM, waiting with a timeout, SIGKILL), the
//! tail of its log, and its memory as Linux reports it in `/proc`. Other
//! `taskq` subcommands that print the same readiness line (`models serve`)
//! are run the same way.
//!
//! A crate of its own so that the load tool can start servers without
//! linking the server: it needs only tokio and thiserror. The `taskq` crate
//! re-exports it as `taskq::process`.
//!
//! Errors are returned, not printed: each caller words its own messages.
//! [`sse`] reads the server's event streams, for the same two callers.

pub mod sse;

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// What `taskq serve` (and `taskq models serve`) prints on stdout, followed
/// by its base URL (`http://ADDR` or `https://ADDR`), once it accepts
/// connections.
pub const READY_PREFIX: &str = "taskq listening on ";

/// How long a child that closed its stdout before the readiness line is
/// given to exit, so that its exit status can be reported.
const EXIT_STATUS_WAIT: Duration = Duration::from_secs(5);

/// How to start `taskq serve`: `serve --listen 127.0.0.1:0 --database-url
/// URL` in a directory, with `TASKQ_ADMIN_TOKEN` set, stderr appended to a
/// log file, and the rest of the environment inherited unless changed here.
pub struct ServeCommand {
    command: Command,
    binary: PathBuf,
    stderr_log: PathBuf,
    ready_timeout: Duration,
}

impl ServeCommand {
    /// `binary` is the `taskq` executable; `dir` its working directory (where
    /// the server keeps its master key).
    pub fn new(
        binary: &Path,
        dir: &Path,
        database_url: &str,
        admin_token: &str,
        stderr_log: &Path,
        ready_timeout: Duration,
    ) -> Self {
        let args = [
            OsStr::new("serve"),
            OsStr::new("--listen"),
            OsStr::new("127.0.0.1:0"),
            OsStr::new("--database-url"),
            OsStr::new(database_url),
        ];
        Self::subcommand(binary, args, dir, stderr_log, ready_timeout)
            .env("TASKQ_ADMIN_TOKEN", admin_token)
    }

    /// Any `taskq` command line whose process prints [`READY_PREFIX`] and
    /// its URL once it is ready (`models serve --listen 127.0.0.1:0`), run
    /// in `dir` like a server.
    pub fn subcommand<I, S>(
        binary: &Path,
        args: I,
        dir: &Path,
        stderr_log: &Path,
        ready_timeout: Duration,
    ) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = Command::new(binary);
        command.args(args).current_dir(dir);
        ServeCommand {
            command,
            binary: binary.to_owned(),
            stderr_log: stderr_log.to_owned(),
            ready_timeout,
        }
    }

    /// Sets an environment variable of the server.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.command.env(key, value);
        self
    }

    /// Sets environment variables of the server, in order.
    pub fn envs<K, V>(mut self, vars: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        self.command.envs(vars);
        self
    }

    /// Keeps a variable of this process's environment from the server.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.command.env_remove(key);
        self
    }

    /// Starts the server and waits until it prints its readiness line.
    ///
    /// The log file is opened for appending, so a restarted server adds to
    /// the log of its earlier runs. On failure the child has exited or been
    /// killed.
    pub async fn spawn(mut self) -> Result<ServerProcess, StartError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.stderr_log)
            .map_err(|source| StartError::OpenLog {
                path: self.stderr_log.clone(),
                source,
            })?;
        let mut child = self
            .command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| StartError::Spawn {
                binary: self.binary.clone(),
                source,
            })?;
        let pid = child.id();
        let Some(stdout) = child.stdout.take() else {
            return Err(StartError::ReadStdout {
                source: io::Error::other("stdout is not captured"),
                status: exit_status(&mut child).await,
            });
        };
        let mut lines = BufReader::new(stdout).lines();

        let ready = tokio::time::timeout(self.ready_timeout, async {
            while let Some(line) = lines.next_line().await? {
                if let Some(address) = line.trim().strip_prefix(READY_PREFIX) {
                    return Ok(Some(address.trim().trim_end_matches('/').to_owned()));
                }
            }
            Ok(None)
        })
        .await;
        let url = match ready {
            Ok(Ok(Some(url))) => url,
            Ok(Ok(None)) => {
                return Err(StartError::StdoutClosed {
                    status: exit_status(&mut child).await,
                })
            }
            Ok(Err(source)) => {
                return Err(StartError::ReadStdout {
                    source,
                    status: exit_status(&mut child).await,
                })
            }
            Err(_) => {
                let _ = child.kill().await;
                return Err(StartError::NotReady {
                    timeout: self.ready_timeout,
                });
            }
        };
        // Keep draining stdout so that the server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(ServerProcess {
            child,
            pid,
            url,
            stderr_log: self.stderr_log,
        })
    }
}

/// The exit status of a child that is expected to exit soon; `None` if it
/// is still running after a few seconds (or cannot be waited for).
async fn exit_status(child: &mut Child) -> Option<ExitStatus> {
    match tokio::time::timeout(EXIT_STATUS_WAIT, child.wait()).await {
        Ok(Ok(status)) => Some(status),
        _ => None,
    }
}

/// Why a server did not become ready.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("opening the server log {}", path.display())]
    OpenLog { path: PathBuf, source: io::Error },
    #[error("starting {}", binary.display())]
    Spawn { binary: PathBuf, source: io::Error },
    /// Reading stdout failed before the readiness line; `status` as for
    /// `StdoutClosed`.
    #[error("reading the server's stdout")]
    ReadStdout {
        source: io::Error,
        status: Option<ExitStatus>,
    },
    /// Stdout was closed before the readiness line; `status` is `None` when
    /// the server had not exited a few seconds later.
    #[error("the server closed its stdout before it was ready")]
    StdoutClosed { status: Option<ExitStatus> },
    /// No readiness line within the timeout; the server has been killed.
    #[error("the server did not print {READY_PREFIX:?} within {timeout:?}")]
    NotReady { timeout: Duration },
}

/// A running `taskq serve` child. Dropping it kills the process.
pub struct ServerProcess {
    child: Child,
    pid: Option<u32>,
    url: String,
    stderr_log: PathBuf,
}

impl ServerProcess {
    /// The base URL from the readiness line, without a trailing slash.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The process id, as read when the process started.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The file the server's stderr goes to.
    pub fn stderr_log(&self) -> &Path {
        &self.stderr_log
    }

    /// Asks the server to shut down gracefully (SIGTERM) without waiting.
    #[cfg(unix)]
    pub fn terminate(&self) -> io::Result<()> {
        let pid = self
            .pid
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the server has no pid"))?;
        let output = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .stdin(Stdio::null())
            .output()?;
        if output.status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "kill -TERM {pid} exited with {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )))
        }
    }

    #[cfg(not(unix))]
    pub fn terminate(&self) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "SIGTERM needs a Unix system",
        ))
    }

    /// Waits up to `timeout` for the server to exit; `None` when it is still
    /// running.
    pub async fn wait_for_exit(&mut self, timeout: Duration) -> io::Result<Option<ExitStatus>> {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => status.map(Some),
            Err(_) => Ok(None),
        }
    }

    /// SIGKILL, unless the server has already exited, then waits for it.
    pub async fn kill(&mut self) -> io::Result<()> {
        if self.child.try_wait()?.is_none() {
            self.child.kill().await?;
        }
        Ok(())
    }

    /// The server's resident memory in KiB (`VmRSS`; Linux only).
    pub async fn rss_kb(&self) -> Option<u64> {
        self.proc_status_kb("VmRSS").await
    }

    /// The server's peak resident memory in KiB (`VmHWM`; Linux only).
    pub async fn peak_rss_kb(&self) -> Option<u64> {
        self.proc_status_kb("VmHWM").await
    }

    /// Starts the peak (`VmHWM`) over from the current resident memory
    /// (Linux only; `false` where it cannot).
    pub async fn reset_peak_rss(&self) -> bool {
        let Some(pid) = self.pid else {
            return false;
        };
        tokio::fs::write(format!("/proc/{pid}/clear_refs"), b"5")
            .await
            .is_ok()
    }

    /// CPU time the server has used so far ([`cpu_time_of`]).
    pub async fn cpu_time(&self) -> Option<Duration> {
        cpu_time_of(self.pid?).await
    }

    /// A `kB` field of `/proc/<pid>/status`.
    async fn proc_status_kb(&self, field: &str) -> Option<u64> {
        let pid = self.pid?;
        let status = tokio::fs::read_to_string(format!("/proc/{pid}/status"))
            .await
            .ok()?;
        status.lines().find_map(|line| {
            let value = line.strip_prefix(field)?.strip_prefix(':')?;
            value.split_whitespace().next()?.parse().ok()
        })
    }
}

/// The last `lines` lines of a log file, or a note saying why it cannot be
/// read.
pub fn log_tail(path: &Path, lines: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// CPU time process `pid` has used so far, user plus system, over all its
/// threads (`/proc/<pid>/stat`; Linux only, counted in the kernel's 100 Hz
/// user-visible ticks).
pub async fn cpu_time_of(pid: u32) -> Option<Duration> {
    let stat = tokio::fs::read_to_string(format!("/proc/{pid}/stat"))
        .await
        .ok()?;
    // The command name may hold spaces: the fields after it are plain.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}
