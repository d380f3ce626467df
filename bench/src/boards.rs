//! `--boards N`: what open boards cost the claim path. N board sessions
//! (signed in through `POST /board/login` with the agents' keys in turn,
//! as the members beside them would; the server keeps at most 32 sessions
//! of one key) each do what the board's script does: ask
//! `GET /board/live` for the org's change mark every second and, when the
//! mark moved, fetch the page again (`GET /board/tasks`, the board of the
//! first 200 tasks). They run from the create phase's end to the cycles'
//! end. Before the cycles they poll an idle server for a few seconds, which
//! gives what an open board costs the server when nothing changes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _};
use serde::Serialize;
use taskq_process::ServerProcess;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How often a board asks for the mark (the board script's period).
const POLL: Duration = Duration::from_secs(1);
/// How long the boards poll an idle server before the cycles.
const IDLE: Duration = Duration::from_secs(6);

#[derive(Default)]
struct Counts {
    polls: AtomicU64,
    refreshes: AtomicU64,
    refresh_micros: AtomicU64,
    errors: AtomicU64,
    /// Failures by what failed and its status (or `transport`).
    why: Mutex<BTreeMap<String, u64>>,
}

impl Counts {
    fn failed(&self, what: &str, answer: &Result<reqwest::Response, reqwest::Error>) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let why = match answer {
            Ok(r) => format!("{what} {}", r.status().as_u16()),
            Err(_) => format!("{what} transport"),
        };
        *self
            .why
            .lock()
            .expect("not poisoned")
            .entry(why)
            .or_default() += 1;
    }
}

/// The open boards, polling until stopped.
pub(super) struct Boards {
    n: usize,
    counts: Arc<Counts>,
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
    idle_server_cpu_pct: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub(super) struct BoardsSummary {
    pub boards: usize,
    /// Server CPU while the boards polled an idle server, in % of a core.
    pub idle_server_cpu_pct: Option<f64>,
    /// The same, per open board.
    pub idle_cpu_pct_per_board: Option<f64>,
    pub polls: u64,
    /// Pages fetched again because the mark moved.
    pub refreshes: u64,
    pub refresh_ms_mean: Option<f64>,
    pub errors: u64,
    /// Failures by request and status.
    pub errors_by_cause: BTreeMap<String, u64>,
}

impl Boards {
    /// Signs `n` boards in and starts them; measures them on the idle
    /// server first.
    pub(super) async fn open(
        base: &str,
        keys: &[String],
        n: usize,
        server: Option<&ServerProcess>,
    ) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(n.max(1))
            .build()?;
        let mut cookies = Vec::with_capacity(n);
        for i in 0..n {
            let key = &keys[i % keys.len()];
            let answer = client
                .post(format!("{base}/board/login"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(format!("api_key={key}"))
                .send()
                .await
                .context("POST /board/login")?;
            let cookie = answer
                .headers()
                .get("set-cookie")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split(';').next())
                .map(str::to_owned)
                .ok_or_else(|| {
                    anyhow!(
                        "POST /board/login answered {} and no cookie",
                        answer.status()
                    )
                })?;
            cookies.push(cookie);
        }
        let counts = Arc::new(Counts::default());
        let (stop, stopped) = watch::channel(false);
        let mut tasks = JoinSet::new();
        for (i, cookie) in cookies.into_iter().enumerate() {
            let (client, counts, mut stopped) = (client.clone(), counts.clone(), stopped.clone());
            let (live, page) = (format!("{base}/board/live"), format!("{base}/board/tasks"));
            tasks.spawn(async move {
                // Spread the boards over the period, as real ones are.
                let offset = POLL.mul_f64(i as f64 / n as f64);
                tokio::time::sleep(offset).await;
                let mut tick = tokio::time::interval(POLL);
                let mut mark = String::new();
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        _ = stopped.changed() => return,
                    }
                    counts.polls.fetch_add(1, Ordering::Relaxed);
                    let answer = client.get(&live).header("cookie", &cookie).send().await;
                    let now = match answer {
                        Ok(r) if r.status().is_success() => {
                            r.json::<serde_json::Value>().await.ok()
                        }
                        failed => {
                            counts.failed("live", &failed);
                            continue;
                        }
                    };
                    let Some(now) = now.and_then(|v| v["mark"].as_str().map(str::to_owned)) else {
                        counts.errors.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    if now == mark {
                        continue;
                    }
                    mark = now;
                    let started = Instant::now();
                    let answer = client.get(&page).header("cookie", &cookie).send().await;
                    let fetched = match answer {
                        Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
                        failed => {
                            counts.failed("page", &failed);
                            continue;
                        }
                    };
                    if fetched {
                        counts.refreshes.fetch_add(1, Ordering::Relaxed);
                        counts
                            .refresh_micros
                            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                    } else {
                        counts.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        eprintln!("[boards] {n} boards open; polling the idle server for {IDLE:?}");
        // The first poll of each board fetches its page: let those pass.
        tokio::time::sleep(POLL * 2).await;
        let before = match server {
            Some(s) => s.cpu_time().await,
            None => None,
        };
        let started = Instant::now();
        tokio::time::sleep(IDLE).await;
        let after = match server {
            Some(s) => s.cpu_time().await,
            None => None,
        };
        let idle_server_cpu_pct = match (before, after) {
            (Some(a), Some(b)) => {
                Some(b.saturating_sub(a).as_secs_f64() / started.elapsed().as_secs_f64() * 100.0)
            }
            _ => None,
        };
        Ok(Boards {
            n,
            counts,
            stop,
            tasks,
            idle_server_cpu_pct,
        })
    }

    /// Stops the boards; what they did.
    pub(super) async fn close(mut self) -> BoardsSummary {
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
        let refreshes = self.counts.refreshes.load(Ordering::Relaxed);
        BoardsSummary {
            boards: self.n,
            idle_server_cpu_pct: self.idle_server_cpu_pct,
            idle_cpu_pct_per_board: self.idle_server_cpu_pct.map(|c| c / self.n as f64),
            polls: self.counts.polls.load(Ordering::Relaxed),
            refreshes,
            refresh_ms_mean: (refreshes > 0).then(|| {
                self.counts.refresh_micros.load(Ordering::Relaxed) as f64
                    / refreshes as f64
                    / 1000.0
            }),
            errors: self.counts.errors.load(Ordering::Relaxed),
            errors_by_cause: self.counts.why.lock().expect("not poisoned").clone(),
        }
    }
}

impl BoardsSummary {
    pub(super) fn render(&self) -> String {
        let pct = |v: Option<f64>| v.map_or("n/a".to_owned(), |v| format!("{v:.2}%"));
        format!(
            "boards: {} open; idle server CPU {} ({} a board); during the run {} polls, {} pages \
             fetched again (mean {}), {} errors {:?}\n",
            self.boards,
            pct(self.idle_server_cpu_pct),
            pct(self.idle_cpu_pct_per_board),
            self.polls,
            self.refreshes,
            self.refresh_ms_mean
                .map_or("n/a".to_owned(), |m| format!("{m:.1} ms")),
            self.errors,
            self.errors_by_cause
        )
    }
}
