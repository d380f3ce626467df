//! `--boards N`: what open boards cost the claim path. N board sessions
//! (signed in through `POST /board/login` with the agents' keys in turn,
//! as the members beside them would; the server keeps at most 32 sessions
//! of one key) each do what the board's script does on the board of the
//! first 200 tasks (`GET /board/tasks`): hold the board's stream open
//! (`GET /board/live` as an event stream) and, on each `changed` event,
//! fetch the changed cards alone (`GET /board/cards`) when every one is a
//! card the page shows, else the page again, as often as the script's
//! allowance lets it (once every 5 s over time, two in a row after a quiet
//! spell), each after a random delay of up to a second and naming the
//! last notice heard, which lets the server share a read. With
//! `--boards-poll` they do what the script did before the stream: ask
//! `GET /board/live` for the org's change mark every second and fetch the
//! page again when it moved. They run from the create phase's end to the
//! cycles' end. Before the cycles they stay open on an idle server for a
//! few seconds, which gives what an open board costs the server when
//! nothing changes.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _};
use serde::Serialize;
use taskq_process::{sse, ServerProcess};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How often a board asks for the mark (the board script's period).
const POLL: Duration = Duration::from_secs(1);
/// How long the boards stay open on an idle server before the cycles.
const IDLE: Duration = Duration::from_secs(6);
/// The script's allowance of page fetches on the stream: one every
/// `REFETCH`, up to `REFETCH_BURST` saved.
const REFETCH: Duration = Duration::from_secs(5);
const REFETCH_BURST: f64 = 2.0;
/// The most the script waits, at random, before it fetches a page.
const JITTER: Duration = Duration::from_secs(1);

/// A random part of [`JITTER`], as the script's `Math.random()` gives.
fn jitter() -> Duration {
    use std::hash::BuildHasher as _;
    let bits = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    JITTER.mul_f64((bits >> 11) as f64 / (1u64 << 53) as f64)
}

#[derive(Default)]
struct Counts {
    polls: AtomicU64,
    changed_events: AtomicU64,
    card_fetches: AtomicU64,
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
    poll: bool,
    counts: Arc<Counts>,
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
    idle_server_cpu_pct: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub(super) struct BoardsSummary {
    pub boards: usize,
    /// `stream` (the board's stream) or `poll` (`--boards-poll`).
    pub mode: &'static str,
    /// Server CPU while the boards polled an idle server, in % of a core.
    pub idle_server_cpu_pct: Option<f64>,
    /// The same, per open board.
    pub idle_cpu_pct_per_board: Option<f64>,
    /// Marks asked for (`poll`).
    pub polls: u64,
    /// `changed` events received (`stream`).
    pub changed_events: u64,
    /// Changed cards fetched alone (`stream`).
    pub card_fetches: u64,
    /// Pages fetched again.
    pub refreshes: u64,
    /// Of those, the pages the server made from a list another board read
    /// for the same notice (`None` from a server that does not count them).
    pub pages_shared: Option<u64>,
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
        poll: bool,
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
            let board = Board {
                client: client.clone(),
                counts: counts.clone(),
                cookie,
                base: base.to_owned(),
            };
            let stopped = stopped.clone();
            // Spread the boards over the period, as real ones are.
            let offset = POLL.mul_f64(i as f64 / n as f64);
            tasks.spawn(async move {
                tokio::time::sleep(offset).await;
                if poll {
                    board.poll(stopped).await;
                } else {
                    board.stream(stopped).await;
                }
            });
        }
        let mode = if poll { "polling" } else { "on the stream" };
        eprintln!("[boards] {n} boards open, {mode}; on the idle server for {IDLE:?}");
        // Each board fetches its page first: let those pass.
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
            poll,
            counts,
            stop,
            tasks,
            idle_server_cpu_pct,
        })
    }

    /// Stops the boards; what they did (`pages_shared`: the server's count
    /// of shared pages, read as they stop).
    pub(super) async fn close(mut self, pages_shared: Option<u64>) -> BoardsSummary {
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
        let refreshes = self.counts.refreshes.load(Ordering::Relaxed);
        BoardsSummary {
            boards: self.n,
            mode: if self.poll { "poll" } else { "stream" },
            idle_server_cpu_pct: self.idle_server_cpu_pct,
            idle_cpu_pct_per_board: self.idle_server_cpu_pct.map(|c| c / self.n as f64),
            polls: self.counts.polls.load(Ordering::Relaxed),
            changed_events: self.counts.changed_events.load(Ordering::Relaxed),
            card_fetches: self.counts.card_fetches.load(Ordering::Relaxed),
            refreshes,
            pages_shared,
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
            "boards: {} open ({}); idle server CPU {} ({} a board); during the run {} polls, \
             {} changed events, {} card fetches, {} pages fetched again (mean {}; {} of them \
             shared), {} errors {:?}\n",
            self.boards,
            self.mode,
            pct(self.idle_server_cpu_pct),
            pct(self.idle_cpu_pct_per_board),
            self.polls,
            self.changed_events,
            self.card_fetches,
            self.refreshes,
            self.refresh_ms_mean
                .map_or("n/a".to_owned(), |m| format!("{m:.1} ms")),
            self.pages_shared
                .map_or("n/a".to_owned(), |n| n.to_string()),
            self.errors,
            self.errors_by_cause
        )
    }
}

/// One open board.
struct Board {
    client: reqwest::Client,
    counts: Arc<Counts>,
    cookie: String,
    base: String,
}

/// What a board page shows: its mark and its cards.
#[derive(Default)]
struct Shown {
    mark: String,
    cards: HashSet<String>,
}

/// The values of `attribute="…"` in markup, in order.
fn attributes<'a>(html: &'a str, attribute: &str) -> Vec<&'a str> {
    let pattern = format!("{attribute}=\"");
    html.match_indices(&pattern)
        .filter_map(|(at, _)| {
            let rest = &html[at + pattern.len()..];
            rest.find('"').map(|end| &rest[..end])
        })
        .collect()
}

impl Board {
    async fn get(&self, what: &str, url: &str) -> Option<String> {
        self.get_noticed(what, url, None).await
    }

    /// A GET that names the last notice heard (`X-Board-Mark`), as the
    /// script's fetches on the stream do.
    async fn get_noticed(&self, what: &str, url: &str, noticed: Option<&str>) -> Option<String> {
        let mut request = self.client.get(url).header("cookie", &self.cookie);
        if let Some(mark) = noticed {
            request = request.header("x-board-mark", mark);
        }
        let answer = request.send().await;
        match answer {
            Ok(r) if r.status().is_success() => match r.text().await {
                Ok(text) => Some(text),
                Err(_) => {
                    self.counts.errors.fetch_add(1, Ordering::Relaxed);
                    None
                }
            },
            failed => {
                self.counts.failed(what, &failed);
                None
            }
        }
    }

    /// The page, fetched again (for the notice of mark `noticed`, if
    /// any); what it shows.
    async fn page(&self, noticed: Option<&str>) -> Option<Shown> {
        let started = Instant::now();
        let page = self
            .get_noticed("page", &format!("{}/board/tasks", self.base), noticed)
            .await?;
        self.counts.refreshes.fetch_add(1, Ordering::Relaxed);
        self.counts
            .refresh_micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        Some(Shown {
            mark: (*attributes(&page, "data-mark").first()?).to_owned(),
            cards: attributes(&page, "data-task")
                .into_iter()
                .map(str::to_owned)
                .collect(),
        })
    }

    /// The board's script before the stream: the mark every second, and
    /// the page again when it moved.
    async fn poll(&self, mut stopped: watch::Receiver<bool>) {
        let live = format!("{}/board/live", self.base);
        let mut tick = tokio::time::interval(POLL);
        let mut mark = String::new();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stopped.changed() => return,
            }
            self.counts.polls.fetch_add(1, Ordering::Relaxed);
            let Some(now) = self.get("live", &live).await else {
                continue;
            };
            let now = serde_json::from_str::<serde_json::Value>(&now)
                .ok()
                .and_then(|v| v["mark"].as_str().map(str::to_owned));
            let Some(now) = now else {
                self.counts.errors.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            if now != mark {
                mark = now;
                self.page(None).await;
            }
        }
    }

    /// The board's script on the stream.
    async fn stream(&self, mut stopped: watch::Receiver<bool>) {
        let Some(mut shown) = self.page(None).await else {
            return;
        };
        let url = format!("{}/board/live?mark={}", self.base, shown.mark);
        let answer = self
            .client
            .get(&url)
            .header("cookie", &self.cookie)
            .header("accept", "text/event-stream")
            .send()
            .await;
        let mut body = match answer {
            Ok(r) if r.status().is_success() => r,
            failed => {
                self.counts.failed("stream", &failed);
                return;
            }
        };
        let mut parser = sse::Parser::default();
        let mut notices = Vec::new();
        let (mut allowance, mut counted) = (REFETCH_BURST, Instant::now());
        // When the page is to be fetched again, if it is.
        let mut refetch: Option<tokio::time::Instant> = None;
        let mut noticed = shown.mark.clone();
        loop {
            let at = refetch.unwrap_or_else(tokio::time::Instant::now);
            tokio::select! {
                _ = stopped.changed() => return,
                () = tokio::time::sleep_until(at), if refetch.is_some() => {
                    refetch = None;
                    allowance -= 1.0;
                    if let Some(fresh) = self.page(Some(&noticed)).await {
                        shown = fresh;
                    }
                    continue;
                }
                chunk = body.chunk() => match chunk {
                    Ok(Some(bytes)) => parser.feed(&bytes, |item| {
                        if let sse::Item::Event(e) = item {
                            notices.push(e.data);
                        }
                    }),
                    failed => {
                        self.counts.errors.fetch_add(1, Ordering::Relaxed);
                        *self.counts.why.lock().expect("not poisoned")
                            .entry(format!("stream ended ({})", failed.is_ok())).or_default() += 1;
                        return;
                    }
                },
            }
            for data in notices.drain(..) {
                let Ok(notice) = serde_json::from_str::<serde_json::Value>(&data) else {
                    self.counts.errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                self.counts.changed_events.fetch_add(1, Ordering::Relaxed);
                if let Some(mark) = notice["mark"].as_str() {
                    noticed = mark.to_owned();
                }
                let more = notice["more"].as_bool().unwrap_or(true);
                let ids: Vec<&str> = notice["tasks"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
                    .unwrap_or_default();
                if !more && ids.is_empty() {
                    continue;
                }
                if !more && refetch.is_none() && ids.iter().all(|id| shown.cards.contains(*id)) {
                    let url = format!("{}/board/cards?ids={}", self.base, ids.join(","));
                    if let Some(cards) = self.get("cards", &url).await {
                        self.counts.card_fetches.fetch_add(1, Ordering::Relaxed);
                        let kept: HashSet<&str> =
                            attributes(&cards, "data-task").into_iter().collect();
                        for id in ids.iter().filter(|id| !kept.contains(*id)) {
                            shown.cards.remove(*id);
                        }
                        continue;
                    }
                }
                if refetch.is_none() {
                    let now = Instant::now();
                    allowance = (allowance
                        + now.duration_since(counted).as_secs_f64() / REFETCH.as_secs_f64())
                    .min(REFETCH_BURST);
                    counted = now;
                    let wait = REFETCH.mul_f64((1.0 - allowance).max(0.0)) + jitter();
                    refetch = Some(tokio::time::Instant::now() + wait);
                }
            }
        }
    }
}
