//! `--boards N`: what open boards cost the claim path. N board sessions
//! (signed in through `POST /board/login` with the agents' keys in turn,
//! as the members beside them would; the server keeps at most 32 sessions
//! of one key, and a key holds at most 10 streams) each do what the
//! board's script does: load the board (`GET /board/tasks`, the first 200
//! tasks), follow the org's event stream (`GET /board/events`, from the
//! page's `data-since`), gather the events of 200 ms, and then fetch the
//! cards of the tasks that changed (`GET /board/cards`, up to 25, with the
//! page's filters and end), keeping count of the cards on the page; more
//! tasks than that, or a page that fell below its least (`data-min`),
//! fetch the page again, at most once a second.
//! A stream that ends is opened again after 3 s with `Last-Event-ID`, as
//! `EventSource` does. They run from the create phase's end to the
//! cycles' end. Before the cycles they stay open on an idle server for a
//! few seconds, which gives what an open board costs the server when
//! nothing changes.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _};
use serde::Serialize;
use taskq_process::ServerProcess;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How long the script gathers events before it redraws.
const GATHER: Duration = Duration::from_millis(200);
/// The least time between two fetches of the whole page.
const REFRESH_GAP: Duration = Duration::from_secs(1);
/// The most cards one redraw asks for; more fetch the page whole.
const MAX_CARDS: usize = 25;
/// How long `EventSource` waits before it opens an ended stream again.
const RECONNECT: Duration = Duration::from_secs(3);
/// How long the boards stay open on an idle server before the cycles.
const IDLE: Duration = Duration::from_secs(6);

#[derive(Default)]
struct Counts {
    /// Events received over the streams.
    events: AtomicU64,
    /// Redraws from `GET /board/cards`, and the cards they asked for.
    card_fetches: AtomicU64,
    cards: AtomicU64,
    card_micros: AtomicU64,
    /// Pages fetched whole.
    refreshes: AtomicU64,
    refresh_micros: AtomicU64,
    /// Streams opened again after they ended.
    reconnects: AtomicU64,
    errors: AtomicU64,
    /// Failures by what failed and its status (or `transport`).
    why: Mutex<BTreeMap<String, u64>>,
}

impl Counts {
    fn failed(&self, what: &str, status: Option<u16>) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let why = match status {
            Some(s) => format!("{what} {s}"),
            None => format!("{what} transport"),
        };
        *self
            .why
            .lock()
            .expect("not poisoned")
            .entry(why)
            .or_default() += 1;
    }
}

/// The open boards, following their streams until stopped.
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
    /// Server CPU while the boards stayed open on an idle server, in % of
    /// a core.
    pub idle_server_cpu_pct: Option<f64>,
    /// The same, per open board.
    pub idle_cpu_pct_per_board: Option<f64>,
    /// Events the boards received over their streams.
    pub events: u64,
    /// Redraws of the cards that changed (`GET /board/cards`).
    pub card_fetches: u64,
    pub cards_asked: u64,
    pub card_fetch_ms_mean: Option<f64>,
    /// Pages fetched whole (not the whole list, or a burst of too many
    /// tasks).
    pub refreshes: u64,
    pub refresh_ms_mean: Option<f64>,
    /// Streams that ended and were opened again.
    pub reconnects: u64,
    pub errors: u64,
    /// Failures by request and status.
    pub errors_by_cause: BTreeMap<String, u64>,
}

/// What a board's page says of how it stays current.
struct Page {
    since: String,
    /// The page is the whole list: its cards are redrawn.
    cards: bool,
    /// Its filters (and end), as the query of its cards.
    filters: String,
    /// Below this many cards it is fetched again.
    min: usize,
    /// The tasks whose cards it shows.
    shown: HashSet<String>,
}

/// The tasks of the cards in `html`.
fn card_ids(html: &str) -> HashSet<String> {
    html.split(r#"<li class="card" data-task=""#)
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

/// The value of attribute `name` of the first element carrying it.
fn attribute(html: &str, name: &str) -> Option<String> {
    let start = html.find(&format!(" {name}=\""))? + name.len() + 3;
    let end = start + html[start..].find('"')?;
    // The server escapes `&` in attributes; the filters' query holds some.
    Some(html[start..end].replace("&amp;", "&").replace("&#38;", "&"))
}

impl Page {
    fn parse(html: &str) -> Option<Page> {
        Some(Page {
            since: attribute(html, "data-since")?,
            cards: attribute(html, "data-live")? == "cards",
            filters: attribute(html, "data-filters").unwrap_or_default(),
            min: attribute(html, "data-min")
                .and_then(|m| m.parse().ok())
                .unwrap_or(0),
            shown: card_ids(html),
        })
    }
}

/// One event's id and task id, from an SSE block (`None`: a comment).
fn event(block: &str) -> Option<(Option<String>, String)> {
    let mut id = None;
    let mut data = None;
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("id:") {
            id = Some(v.trim().to_owned());
        } else if let Some(v) = line.strip_prefix("data:") {
            data = Some(v.trim().to_owned());
        }
    }
    let data: serde_json::Value = serde_json::from_str(&data?).ok()?;
    Some((id, data["data"]["task_id"].as_str()?.to_owned()))
}

/// One open board.
struct Board {
    client: reqwest::Client,
    base: String,
    cookie: String,
    counts: Arc<Counts>,
}

impl Board {
    async fn get(&self, path: &str, what: &str) -> Option<String> {
        let answer = self
            .client
            .get(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .send()
            .await;
        match answer {
            Ok(r) if r.status().is_success() => match r.text().await {
                Ok(text) => Some(text),
                Err(_) => {
                    self.counts.failed(what, None);
                    None
                }
            },
            Ok(r) => {
                self.counts.failed(what, Some(r.status().as_u16()));
                None
            }
            Err(_) => {
                self.counts.failed(what, None);
                None
            }
        }
    }

    /// The page again, as the script swaps in its `#live` part.
    async fn refresh(&self) -> Option<Page> {
        let started = Instant::now();
        let html = self.get("/board/tasks", "page").await?;
        self.counts.refreshes.fetch_add(1, Ordering::Relaxed);
        self.counts
            .refresh_micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        Page::parse(&html)
    }

    /// The cards of `ids`, moved onto or off the page; whether the page
    /// is still full enough.
    async fn redraw(&self, page: &mut Page, ids: &BTreeSet<String>) -> bool {
        let started = Instant::now();
        let list: Vec<&str> = ids.iter().map(String::as_str).collect();
        let path = format!("/board/cards?{}task_id={}", page.filters, list.join(","));
        if let Some(html) = self.get(&path, "cards").await {
            let kept = card_ids(&html);
            for id in ids {
                if kept.contains(id) {
                    page.shown.insert(id.clone());
                } else {
                    page.shown.remove(id);
                }
            }
            self.counts.card_fetches.fetch_add(1, Ordering::Relaxed);
            self.counts
                .cards
                .fetch_add(ids.len() as u64, Ordering::Relaxed);
            self.counts
                .card_micros
                .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        }
        page.shown.len() >= page.min
    }

    /// Loads the page, then follows its stream until `stopped`.
    async fn run(self, mut stopped: watch::Receiver<bool>) {
        let Some(mut page) = self.refresh().await else {
            return;
        };
        let mut last_id: Option<String> = None;
        let mut last_refresh = Instant::now();
        loop {
            let mut request = self
                .client
                .get(format!("{}/board/events?since={}", self.base, page.since))
                .header("cookie", &self.cookie)
                .header("accept", "text/event-stream");
            if let Some(id) = &last_id {
                request = request.header("last-event-id", id);
            }
            let mut stream = match request.send().await {
                Ok(r) if r.status().is_success() => Some(r),
                Ok(r) => {
                    self.counts.failed("events", Some(r.status().as_u16()));
                    None
                }
                Err(_) => {
                    self.counts.failed("events", None);
                    None
                }
            };
            let mut buffer = String::new();
            let mut changed = BTreeSet::new();
            let mut stale = false;
            let mut due: Option<tokio::time::Instant> = None;
            while let Some(response) = stream.as_mut() {
                let wait = due.unwrap_or_else(|| tokio::time::Instant::now() + IDLE * 100);
                tokio::select! {
                    chunk = response.chunk() => {
                        let Ok(Some(bytes)) = chunk else {
                            stream = None;
                            continue;
                        };
                        buffer.push_str(&String::from_utf8_lossy(&bytes));
                        while let Some(end) = buffer.find("\n\n") {
                            let block: String = buffer.drain(..end + 2).collect();
                            if let Some((id, task)) = event(&block) {
                                self.counts.events.fetch_add(1, Ordering::Relaxed);
                                last_id = id.or(last_id);
                                changed.insert(task);
                                due.get_or_insert_with(|| tokio::time::Instant::now() + GATHER);
                            }
                        }
                    }
                    () = tokio::time::sleep_until(wait), if due.is_some() => {
                        let whole = stale || !page.cards || changed.len() > MAX_CARDS;
                        if whole && last_refresh.elapsed() < REFRESH_GAP {
                            due = Some((last_refresh + REFRESH_GAP).into());
                            continue;
                        }
                        due = None;
                        if whole {
                            last_refresh = Instant::now();
                            stale = false;
                            if let Some(fresh) = self.refresh().await {
                                page = fresh;
                            }
                        } else if !self.redraw(&mut page, &changed).await {
                            stale = true;
                            due = Some(tokio::time::Instant::now() + GATHER);
                        }
                        changed.clear();
                    }
                    _ = stopped.changed() => return,
                }
            }
            tokio::select! {
                () = tokio::time::sleep(RECONNECT) => {}
                _ = stopped.changed() => return,
            }
            self.counts.reconnects.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Boards {
    /// Signs `n` boards in and opens them; measures them on the idle server
    /// first.
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
        for cookie in cookies {
            let board = Board {
                client: client.clone(),
                base: base.to_owned(),
                cookie,
                counts: counts.clone(),
            };
            tasks.spawn(board.run(stopped.clone()));
        }
        eprintln!("[boards] {n} boards open; on the idle server for {IDLE:?}");
        // Each board loads its page first: let those pass.
        tokio::time::sleep(Duration::from_secs(2)).await;
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
        let c = &self.counts;
        let mean = |micros: &AtomicU64, n: u64| {
            (n > 0).then(|| micros.load(Ordering::Relaxed) as f64 / n as f64 / 1000.0)
        };
        let refreshes = c.refreshes.load(Ordering::Relaxed);
        let card_fetches = c.card_fetches.load(Ordering::Relaxed);
        BoardsSummary {
            boards: self.n,
            idle_server_cpu_pct: self.idle_server_cpu_pct,
            idle_cpu_pct_per_board: self.idle_server_cpu_pct.map(|c| c / self.n as f64),
            events: c.events.load(Ordering::Relaxed),
            card_fetches,
            cards_asked: c.cards.load(Ordering::Relaxed),
            card_fetch_ms_mean: mean(&c.card_micros, card_fetches),
            refreshes,
            refresh_ms_mean: mean(&c.refresh_micros, refreshes),
            reconnects: c.reconnects.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            errors_by_cause: c.why.lock().expect("not poisoned").clone(),
        }
    }
}

impl BoardsSummary {
    pub(super) fn render(&self) -> String {
        let pct = |v: Option<f64>| v.map_or("n/a".to_owned(), |v| format!("{v:.2}%"));
        let ms = |v: Option<f64>| v.map_or("n/a".to_owned(), |m| format!("{m:.1} ms"));
        format!(
            "boards: {} open; idle server CPU {} ({} a board); during the run {} events \
             received, {} card redraws ({} cards, mean {}), {} pages fetched whole (mean {}), \
             {} streams reopened, {} errors {:?}\n",
            self.boards,
            pct(self.idle_server_cpu_pct),
            pct(self.idle_cpu_pct_per_board),
            self.events,
            self.card_fetches,
            self.cards_asked,
            ms(self.card_fetch_ms_mean),
            self.refreshes,
            ms(self.refresh_ms_mean),
            self.reconnects,
            self.errors,
            self.errors_by_cause
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_says_how_it_stays_current() {
        let html = r#"<body data-since="42"><section id="live" data-live="cards" data-filters="status=pending&#38;tags=a&#38;">"#;
        let page = Page::parse(html).unwrap();
        assert_eq!(page.since, "42");
        assert!(page.cards);
        assert_eq!(page.filters, "status=pending&tags=a&");
        let page = Page::parse(r#"<body data-since="0"><section data-live="page">"#).unwrap();
        assert!(!page.cards);
        assert_eq!(page.min, 0);
        let html = r#"<body data-since="1"><section data-live="cards" data-min="100"><ul>
            <li class="card" data-task="t1" data-status="pending"></li>
            <li class="card" data-task="t2" data-status="pending"></li></ul>"#;
        let page = Page::parse(html).unwrap();
        assert_eq!(page.min, 100);
        assert_eq!(
            page.shown,
            HashSet::from(["t1".to_owned(), "t2".to_owned()])
        );
        assert!(Page::parse("<body>").is_none());
    }

    #[test]
    fn events_are_read_from_their_blocks_and_comments_passed_over() {
        let block = "id: 7\nevent: task.claimed\ndata: {\"type\":\"task.claimed\",\"data\":{\"task_id\":\"t1\"}}\n\n";
        assert_eq!(event(block), Some((Some("7".into()), "t1".into())));
        assert_eq!(event(": keep-alive\n\n"), None);
    }
}
