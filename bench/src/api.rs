//! The HTTP side of the bench: client settings, timing one request, short
//! error texts for the report, and an agent's view of the task routes
//! (create, claim, complete, search) with the bodies it sends and reads.

use std::error::Error as StdError;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hyper::body::Bytes;
use hyper::header::HeaderValue;
use hyper::Method;
use reqwest::{Client, StatusCode, Url};
use serde::{Deserialize, Serialize};

use super::conn::{Connection, Target};

/// Timeout of every HTTP request.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest error text kept per sample.
const ERROR_TEXT_MAX: usize = 300;
const CLAIM_BODY: &str = r#"{"lease_seconds":300,"include_context":false}"#;
const TASK_DESCRIPTION: &str = "Synthetic task written by taskq-bench. Claim it, do nothing, \
                                and complete it with a short note and a tiny output object.";

pub(super) fn http_client(max_idle: usize) -> anyhow::Result<Client> {
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
pub(super) async fn exchange(
    request: reqwest::RequestBuilder,
    expect: StatusCode,
) -> Result<(Vec<u8>, Duration), String> {
    let started = Instant::now();
    let response = request.send().await.map_err(|e| error_chain(&e))?;
    let status = response.status();
    let body = response.bytes().await.map_err(|e| error_chain(&e))?;
    let (body, latency) = expected(status, body, expect, started.elapsed())?;
    Ok((body.to_vec(), latency))
}

/// An answer's body and latency if its status is `expect`, else a short
/// description of it for the report.
pub(super) fn expected(
    status: StatusCode,
    body: Bytes,
    expect: StatusCode,
    latency: Duration,
) -> Result<(Bytes, Duration), String> {
    if status == expect {
        Ok((body, latency))
    } else {
        let text = String::from_utf8_lossy(&body);
        Err(truncate(&format!(
            "HTTP {}: {}",
            status.as_u16(),
            text.trim()
        )))
    }
}

pub(super) fn error_chain(error: &dyn StdError) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    truncate(&text)
}

pub(super) fn truncate(text: &str) -> String {
    match text.char_indices().nth(ERROR_TEXT_MAX) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_owned(),
    }
}

pub(super) fn endpoint(base: &str, path: &str) -> anyhow::Result<Url> {
    Url::parse(&format!("{base}{path}")).with_context(|| format!("invalid URL {base}{path}"))
}

/// The task routes an agent calls.
#[derive(Clone)]
pub(super) struct Routes {
    base: Url,
    tasks: Target,
    claim: Target,
    update: Target,
    full_page: Target,
    search: Target,
}

impl Routes {
    pub(super) fn new(base: &str) -> anyhow::Result<Self> {
        let target = |path: &str| Target::new(endpoint(base, path)?);
        Ok(Routes {
            base: Url::parse(base).with_context(|| format!("invalid URL {base}"))?,
            tasks: target("/tasks")?,
            claim: target("/tasks/claim")?,
            update: target("/tasks/update")?,
            full_page: target("/tasks?full=true&limit=200")?,
            search: target("/tasks/search")?,
        })
    }
}

/// The largest content a task may carry: a title, a description, and
/// metadata and output of 64 KiB each as compact JSON.
const BIG_TITLE_CHARS: usize = 1_000;
const BIG_DESCRIPTION_CHARS: usize = 65_536;
/// `{"b":"…"}` is 8 bytes around its string.
const BIG_OBJECT_CHARS: usize = 65_536 - 8;
/// Big tasks per create: a request body stays under 2 MiB.
pub(super) const BIG_BATCH: u64 = 10;

/// An agent's view of the task API: its connection, key and routes.
pub(super) struct AgentApi {
    connection: Connection,
    key: HeaderValue,
    routes: Routes,
}

impl AgentApi {
    /// An agent with a connection of its own.
    pub(super) fn new(routes: &Routes, key: &str) -> anyhow::Result<Self> {
        Ok(AgentApi {
            connection: Connection::new(&routes.base)?,
            key: HeaderValue::from_str(key).context("invalid API key")?,
            routes: routes.clone(),
        })
    }

    /// The same connection and routes with another key.
    pub(super) fn with_key(&self, key: &str) -> anyhow::Result<Self> {
        Ok(AgentApi {
            connection: self.connection.clone(),
            key: HeaderValue::from_str(key).context("invalid API key")?,
            routes: self.routes.clone(),
        })
    }

    /// POSTs a JSON body to `target`; see [`Connection::send`].
    async fn post(
        &self,
        target: &Target,
        body: impl Into<Bytes>,
        expect: StatusCode,
    ) -> Result<(Bytes, Duration), String> {
        self.connection
            .send(Method::POST, target, &self.key, Some(body.into()), expect)
            .await
    }

    /// `POST /tasks/claim` with `body`, answered `200`.
    pub(super) async fn claim_with(&self, body: &'static str) -> Result<(Bytes, Duration), String> {
        self.post(&self.routes.claim, body, StatusCode::OK).await
    }

    /// Creates `count` tasks; `seq` numbers the first one.
    pub(super) async fn create(&self, seq: u64, count: u64) -> Result<Duration, String> {
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
        let (_, latency) = self
            .post(&self.routes.tasks, body, StatusCode::CREATED)
            .await?;
        Ok(latency)
    }

    /// Creates `count` small tasks that wait a year before they may be
    /// claimed.
    pub(super) async fn create_waiting(&self, seq: u64, count: u64) -> Result<Duration, String> {
        let tasks: Vec<serde_json::Value> = (seq..seq + count)
            .map(|n| serde_json::json!({"title": format!("waiting task {n}"), "delay_seconds": YEAR_SECONDS}))
            .collect();
        let body = serde_json::to_vec(&serde_json::json!({ "tasks": tasks }))
            .map_err(|e| e.to_string())?;
        let (_, latency) = self
            .post(&self.routes.tasks, body, StatusCode::CREATED)
            .await?;
        Ok(latency)
    }

    /// Creates `count` tasks with the largest allowed content, and gives
    /// each the largest allowed output.
    pub(super) async fn create_big(&self, seq: u64, count: u64) -> Result<Duration, String> {
        let filler = |c: char, n: usize| -> String { std::iter::repeat_n(c, n).collect() };
        let tasks: Vec<serde_json::Value> = (seq..seq + count)
            .map(|n| {
                let title = format!("big task {n} ");
                serde_json::json!({
                    "title": format!("{title}{}", filler('t', BIG_TITLE_CHARS - title.len())),
                    "description": filler('d', BIG_DESCRIPTION_CHARS),
                    "metadata": { "b": filler('m', BIG_OBJECT_CHARS) },
                })
            })
            .collect();
        let body = serde_json::to_vec(&serde_json::json!({ "tasks": tasks }))
            .map_err(|e| e.to_string())?;
        let (created, mut latency) = self
            .post(&self.routes.tasks, body, StatusCode::CREATED)
            .await?;
        let created: serde_json::Value =
            serde_json::from_slice(&created).map_err(|e| e.to_string())?;
        let output = filler('o', BIG_OBJECT_CHARS);
        let updates: Vec<serde_json::Value> = created["results"]
            .as_array()
            .map(|r| r.iter().map(|t| serde_json::json!({ "task_id": t["task_id"], "output": { "b": output } })).collect())
            .unwrap_or_default();
        let body = serde_json::to_vec(&serde_json::json!({ "updates": updates }))
            .map_err(|e| e.to_string())?;
        let (_, updated) = self.post(&self.routes.update, body, StatusCode::OK).await?;
        latency += updated;
        Ok(latency)
    }

    /// One page of the full listing, from `cursor`; answers the next cursor
    /// and the page's size in bytes.
    pub(super) async fn full_page(
        &self,
        cursor: Option<&str>,
    ) -> Result<(Option<String>, usize, Duration), String> {
        let page = match cursor {
            Some(cursor) => {
                let mut url = self.routes.full_page.url().clone();
                url.query_pairs_mut().append_pair("cursor", cursor);
                Target::new(url).map_err(|e| e.to_string())?
            }
            None => self.routes.full_page.clone(),
        };
        let (body, latency) = self
            .connection
            .send(Method::GET, &page, &self.key, None, StatusCode::OK)
            .await?;
        let page: Page = serde_json::from_slice(&body).map_err(|e| truncate(&e.to_string()))?;
        Ok((page.next_cursor, body.len(), latency))
    }

    /// Creates one task per `(title, description)`; answers their ids, in
    /// the same order.
    pub(super) async fn create_described(
        &self,
        tasks: &[(String, String)],
    ) -> Result<(Vec<String>, Duration), String> {
        let tasks: Vec<DescribedTask<'_>> = tasks
            .iter()
            .map(|(title, description)| DescribedTask { title, description })
            .collect();
        let body =
            serde_json::to_vec(&DescribedBody { tasks: &tasks }).map_err(|e| e.to_string())?;
        let (body, latency) = self
            .post(&self.routes.tasks, body, StatusCode::CREATED)
            .await?;
        let created: Created = serde_json::from_slice(&body).map_err(|e| {
            truncate(&format!(
                "unexpected create response ({e}): {}",
                lossy(&body)
            ))
        })?;
        if created.results.len() != tasks.len() {
            return Err(format!(
                "{} tasks created for {} sent",
                created.results.len(),
                tasks.len()
            ));
        }
        let ids = created.results.into_iter().map(|r| r.task_id).collect();
        Ok((ids, latency))
    }

    /// `POST /tasks/search`: the ids of the tasks recalled, best first.
    pub(super) async fn search(
        &self,
        query: &str,
        limit: u8,
    ) -> Result<(Vec<String>, Duration), String> {
        let body = serde_json::to_vec(&SearchBody { query, limit }).map_err(|e| e.to_string())?;
        let (body, latency) = self.post(&self.routes.search, body, StatusCode::OK).await?;
        // Any other answer (search not configured, say) is an error here.
        let found: SearchResults = serde_json::from_slice(&body).map_err(|e| {
            truncate(&format!(
                "unexpected search response ({e}): {}",
                lossy(&body)
            ))
        })?;
        let ids = found.results.into_iter().map(|r| r.task_id).collect();
        Ok((ids, latency))
    }

    /// Claims the next task; `None` when the queue is empty.
    pub(super) async fn claim(&self) -> Result<(Option<Claimed>, Duration), String> {
        let (body, latency) = self.claim_with(CLAIM_BODY).await?;
        let claimed = serde_json::from_slice(&body).map_err(|e| {
            truncate(&format!(
                "unexpected claim response ({e}): {}",
                lossy(&body)
            ))
        })?;
        Ok((claimed, latency))
    }

    /// Claims up to `count` tasks with one request (`count` in the body).
    pub(super) async fn claim_batch(&self, count: u32) -> Result<(Vec<Claimed>, Duration), String> {
        let body = format!(r#"{{"lease_seconds":300,"include_context":false,"count":{count}}}"#);
        let (body, latency) = self.post(&self.routes.claim, body, StatusCode::OK).await?;
        let claimed: ClaimedBatch = serde_json::from_slice(&body).map_err(|e| {
            truncate(&format!(
                "unexpected batch claim response ({e}): {}",
                lossy(&body)
            ))
        })?;
        Ok((claimed.tasks, latency))
    }

    /// Completes claimed tasks with one update request.
    pub(super) async fn complete(&self, tasks: &[Claimed]) -> Result<Duration, String> {
        let body = serde_json::to_vec(&UpdateBody {
            updates: tasks
                .iter()
                .map(|task| Completion {
                    task_id: &task.task_id,
                    status: "completed",
                    note: "done",
                    output: CompletionOutput { ok: true },
                    lease_id: task.lease_id.as_deref(),
                })
                .collect(),
        })
        .map_err(|e| e.to_string())?;
        let (_, latency) = self.post(&self.routes.update, body, StatusCode::OK).await?;
        Ok(latency)
    }
}

pub(super) fn lossy(body: &[u8]) -> String {
    String::from_utf8_lossy(body).into_owned()
}

#[derive(Serialize)]
struct CreateBody {
    tasks: Vec<NewTask>,
}

/// How long a waiting task of `--waiting` waits: longer than any run.
const YEAR_SECONDS: u32 = 31_536_000;

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

#[derive(Serialize)]
struct DescribedBody<'a> {
    tasks: &'a [DescribedTask<'a>],
}

#[derive(Serialize)]
struct DescribedTask<'a> {
    title: &'a str,
    description: &'a str,
}

#[derive(Deserialize)]
struct Created {
    results: Vec<CreatedTask>,
}

#[derive(Deserialize)]
struct CreatedTask {
    task_id: String,
}

#[derive(Serialize)]
struct SearchBody<'a> {
    query: &'a str,
    limit: u8,
}

#[derive(Deserialize)]
struct SearchResults {
    results: Vec<SearchHit>,
}

#[derive(Deserialize)]
struct SearchHit {
    task_id: String,
}

#[derive(Deserialize)]
struct Page {
    next_cursor: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct Claimed {
    task_id: String,
    #[serde(default)]
    lease_id: Option<String>,
}

impl Claimed {
    pub(super) fn new(task_id: String, lease_id: Option<String>) -> Self {
        Self { task_id, lease_id }
    }
}

#[derive(Serialize)]
struct UpdateBody<'a> {
    updates: Vec<Completion<'a>>,
}

#[derive(Deserialize)]
struct ClaimedBatch {
    tasks: Vec<Claimed>,
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
