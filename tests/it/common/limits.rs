//! Helpers for the limits, quota, feedback, strikes and races tests, which
//! reach them as `common::limits`.
//!
//! What it adds to the harness: orgs that keep their tier's limits (the
//! harness's `create_org` lifts them), requests whose `Retry-After` header
//! can be read, bursts repeated until the first 429, the test clock, a key
//! into the operator's feedback org, and a stand-in moderation endpoint.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Datelike, TimeZone, Utc};
use reqwest::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

// ------------------------------------------------------------------ orgs

/// Creates a managed org of `tier` through the operator API, keeping the
/// tier's rate and volume limits (unlike `TestServer::create_org`).
pub async fn create_limited_org(srv: &TestServer, tier: &str) -> Org {
    let n = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let (status, org) = srv
        .admin(
            Method::POST,
            "/admin/orgs",
            Some(json!({
                "name": format!("limited-{n}"),
                "tier": tier,
                "encryption": "managed",
                "owner_email": format!("owner-{n}@example.com"),
            })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "POST /admin/orgs: {org}");
    Org {
        org_id: str_field(&org, "org_id"),
        owner_key: str_field(&org["owner"], "api_key"),
        owner_email: str_field(&org["owner"], "email"),
        owner_key_name: str_field(&org["owner"], "key_name"),
    }
}

/// `create_limited_org` followed by `PATCH /admin/orgs/{id}` `{limits}`.
pub async fn create_org_with_limits(srv: &TestServer, tier: &str, limits: Value) -> Org {
    let org = create_limited_org(srv, tier).await;
    srv.set_limits(&org, limits).await;
    org
}

/// The effective limits of an org, from `GET /admin/orgs/{id}`.
pub async fn effective_limits(srv: &TestServer, org: &Org) -> Value {
    let (status, body) = srv
        .admin(Method::GET, &format!("/admin/orgs/{}", org.org_id), None)
        .await;
    assert_eq!(status, StatusCode::OK, "GET /admin/orgs: {body}");
    assert!(body["limits"].is_object(), "no limits object: {body}");
    body["limits"].clone()
}

// ------------------------------------------------------------- requests

/// A response with the one header these tests read.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub retry_after: Option<String>,
    pub body: Value,
}

/// Sends one key-authenticated request and keeps its `Retry-After` header.
/// The server's address is read at every call (it changes on restart).
pub async fn send(
    srv: &TestServer,
    method: Method,
    key: &str,
    path: &str,
    body: Option<&Value>,
) -> Reply {
    taskq::install_crypto_provider();
    let http = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("http client");
    let mut req = http
        .request(method.clone(), format!("{}{}", srv.base_url, path))
        .header("x-api-key", key);
    if let Some(body) = body {
        req = req.json(body);
    }
    let resp = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}\nserver stderr:\n{}", srv.server_log()));
    reply_of(resp).await
}

async fn reply_of(resp: reqwest::Response) -> Reply {
    let status = resp.status();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap_or("<not text>").to_string());
    let text = resp.text().await.expect("read response body");
    let body = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|_| Value::String(format!("<non-JSON> {text}")))
    };
    Reply {
        status,
        retry_after,
        body,
    }
}

/// One request, as repeated by `until_refused`.
#[derive(Clone)]
pub struct Call {
    pub method: Method,
    pub path: String,
    pub body: Option<Value>,
    /// The status every admitted call answers.
    pub ok: StatusCode,
}

impl Call {
    pub fn get(path: &str) -> Call {
        Call {
            method: Method::GET,
            path: path.to_string(),
            body: None,
            ok: StatusCode::OK,
        }
    }

    /// POST /tasks creating one task: a write.
    pub fn create_one() -> Call {
        Call::create_many(1)
    }

    /// POST /tasks creating `n` tasks in one batch.
    pub fn create_many(n: usize) -> Call {
        let tasks: Vec<Value> = (0..n)
            .map(|i| json!({ "title": format!("limited work {i}") }))
            .collect();
        Call {
            method: Method::POST,
            path: "/tasks".to_string(),
            body: Some(json!({ "tasks": tasks })),
            ok: StatusCode::CREATED,
        }
    }

    pub async fn send(&self, srv: &TestServer, key: &str) -> Reply {
        send(
            srv,
            self.method.clone(),
            key,
            &self.path,
            self.body.as_ref(),
        )
        .await
    }

    /// Sends the call once, expecting it to be admitted.
    pub async fn ok(&self, srv: &TestServer, key: &str) -> Value {
        let reply = self.send(srv, key).await;
        assert_eq!(
            reply.status, self.ok,
            "{} {} should be admitted: {}",
            self.method, self.path, reply.body
        );
        reply.body
    }
}

/// How a burst of one repeated request ended.
#[derive(Debug)]
pub struct Burst {
    /// Requests admitted before the first 429.
    pub passed: usize,
    /// The first 429.
    pub refused: Reply,
    /// From before the first request to after the 429.
    pub elapsed: Duration,
}

/// Repeats `call` until the first 429 (failing after `max` admitted calls).
/// Every admitted call must answer `call.ok`.
pub async fn until_refused(srv: &TestServer, key: &str, call: &Call, max: usize) -> Burst {
    let start = Instant::now();
    for passed in 0..=max {
        let reply = call.send(srv, key).await;
        if reply.status == StatusCode::TOO_MANY_REQUESTS {
            return Burst {
                passed,
                refused: reply,
                elapsed: start.elapsed(),
            };
        }
        assert_eq!(
            reply.status, call.ok,
            "{} {} (call {}): {}",
            call.method, call.path, passed, reply.body
        );
    }
    panic!(
        "{} {} was admitted {} times without a 429",
        call.method,
        call.path,
        max + 1
    );
}

/// Asserts that a burst on a full bucket of `per_minute` tokens admitted the
/// whole bucket, plus at most what refilled (`per_minute`/60 a second) while
/// the burst ran.
pub fn assert_burst(burst: &Burst, per_minute: usize) {
    let refill = (burst.elapsed.as_secs_f64() * per_minute as f64 / 60.0).floor() as usize;
    assert!(
        burst.passed >= per_minute && burst.passed <= per_minute + refill,
        "a full bucket of {per_minute} admitted {} requests in {:?} (at most {refill} refilled)",
        burst.passed,
        burst.elapsed
    );
}

/// The exact per-minute 429 body.
pub fn rate_limit_body(kind: &str, limit: u64, tier: &str) -> Value {
    json!({
        "error": "rate limit exceeded",
        "limit_type": kind,
        "limit": limit,
        "window_seconds": 60,
        "tier": tier,
    })
}

/// Asserts a per-minute 429 with the exact body and a `Retry-After` of whole
/// seconds (at least 1, at most the window); returns it.
pub fn assert_rate_limited(reply: &Reply, kind: &str, limit: u64, tier: &str) -> u64 {
    assert_eq!(
        reply.status,
        StatusCode::TOO_MANY_REQUESTS,
        "expected a {kind} rate limit: {}",
        reply.body
    );
    assert_eq!(reply.body, rate_limit_body(kind, limit, tier));
    retry_after_secs(reply)
}

/// The `Retry-After` header as whole seconds in 1..=60.
pub fn retry_after_secs(reply: &Reply) -> u64 {
    let header = reply
        .retry_after
        .as_deref()
        .unwrap_or_else(|| panic!("429 without a Retry-After header: {}", reply.body));
    let secs: u64 = header
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("Retry-After {header:?} is not whole seconds"));
    assert!(
        (1..=60).contains(&secs),
        "Retry-After {secs} is outside 1..=60 for a one-minute window"
    );
    secs
}

/// Asserts a 429 whose body, apart from its `resets` timestamp, is
/// `expected`, and whose `resets` is `resets`.
pub fn assert_monthly_429(reply: &Reply, expected: Value, resets: DateTime<Utc>) {
    assert_eq!(
        reply.status,
        StatusCode::TOO_MANY_REQUESTS,
        "expected {expected}: {}",
        reply.body
    );
    assert_eq!(ts(&reply.body, "resets"), resets, "{}", reply.body);
    let mut rest = reply.body.clone();
    rest.as_object_mut()
        .expect("429 body is an object")
        .remove("resets");
    assert_eq!(rest, expected, "429 body: {}", reply.body);
}

// ----------------------------------------------------------------- time

/// 00:00 UTC on the first day of the month after `now`'s.
pub fn first_of_next_month(now: DateTime<Utc>) -> DateTime<Utc> {
    let (year, month) = if now.month() == 12 {
        (now.year() + 1, 1)
    } else {
        (now.year(), now.month() + 1)
    };
    Utc.with_ymd_and_hms(year, month, 1, 0, 0, 0)
        .single()
        .expect("a valid date")
}

// ------------------------------------------------------------- feedback

/// A reader's key into the operator's feedback org.
pub struct FeedbackInbox {
    pub org_id: String,
    pub key: String,
}

/// Looks the feedback org up (`GET /admin/feedback`) and adds a member to it.
pub async fn feedback_inbox(srv: &TestServer) -> FeedbackInbox {
    let (status, body) = srv.admin(Method::GET, "/admin/feedback", None).await;
    assert_eq!(status, StatusCode::OK, "GET /admin/feedback: {body}");
    let org_id = str_field(&body, "org_id");
    let email = format!("{}@operator.test", unique("reader"));
    let (status, member) = srv
        .admin(
            Method::POST,
            &format!("/admin/orgs/{org_id}/members"),
            Some(json!({ "email": email, "role": "admin" })),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "joining the feedback org: {member}"
    );
    FeedbackInbox {
        org_id,
        key: str_field(&member, "api_key"),
    }
}

/// POST /feedback.
pub async fn send_feedback(srv: &TestServer, key: &str, body: Value) -> (StatusCode, Value) {
    srv.post(key, "/feedback", body).await
}

/// POST /feedback expecting 201 `{task_id, created_at}`; returns the task id.
pub async fn feedback_ok(srv: &TestServer, key: &str, body: Value) -> String {
    let (status, resp) = send_feedback(srv, key, body.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "POST /feedback {body}: {resp}");
    let id = str_field(&resp, "task_id");
    assert!(is_canonical_uuid(&id), "{resp}");
    ts(&resp, "created_at");
    id
}

/// POST /feedback expecting the content filter's 400.
pub async fn feedback_rejected(srv: &TestServer, key: &str, message: &str) {
    let (status, body) = send_feedback(srv, key, json!({ "message": message })).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "{message:?} should be rejected: {body}"
    );
    assert_eq!(
        body,
        json!({ "error": "feedback rejected by the content filter" })
    );
}

/// A message the built-in filter rejects.
pub const ABUSE: &str = "whoever wrote this is a fuckwit";

/// Asserts that a key is refused as invalid (a blocked member's keys).
pub async fn assert_key_dead(srv: &TestServer, key: &str) {
    let (status, body) = srv.get(key, "/tasks").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "key still works: {body}");
    assert_eq!(body, json!({ "error": "invalid api key" }));
}

/// Asserts that a key still works.
pub async fn assert_key_works(srv: &TestServer, key: &str) {
    let (status, body) = srv.get(key, "/tasks").await;
    assert_eq!(status, StatusCode::OK, "key refused: {body}");
}

// ------------------------------------------------ stand-in moderation API

/// A tiny OpenAI-style moderation endpoint on 127.0.0.1: `POST
/// /moderations` `{"input": text}` answers `{"results": [{"flagged": ..}]}`,
/// flagged when the text contains `flagme`; a text containing `explode`
/// gets a 500 instead.
pub struct Moderation {
    /// Base URL, for `TASKQ_FEEDBACK_FILTER`.
    pub url: String,
    seen: Arc<Mutex<Vec<(String, Value)>>>,
}

impl Moderation {
    pub async fn start() -> Moderation {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind moderation stand-in");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let log = log.clone();
                tokio::spawn(async move {
                    let _ = answer_moderation(stream, log).await;
                });
            }
        });
        Moderation { url, seen }
    }

    /// Every request so far: (request line, JSON body).
    pub fn requests(&self) -> Vec<(String, Value)> {
        self.seen.lock().unwrap().clone()
    }
}

/// A port nothing listens on.
pub async fn closed_port_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut chunk = [0u8; 8192];
    let n = stream.read(&mut chunk).await?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n > 0)
}

/// Decodes a complete chunked body, or None when more bytes are needed.
fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = find(data, b"\r\n")?;
        let size_text = std::str::from_utf8(&data[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        if data.len() < size + 2 {
            return None;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

async fn answer_moderation(
    mut stream: TcpStream,
    seen: Arc<Mutex<Vec<(String, Value)>>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        if !read_more(&mut stream, &mut buf).await? {
            return Ok(());
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let request_line = head.lines().next().unwrap_or_default().to_string();
    let header = |name: &str| {
        head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    let body = if let Some(len) = header("content-length") {
        let len: usize = len.parse().unwrap_or(0);
        while buf.len() < head_end + len {
            if !read_more(&mut stream, &mut buf).await? {
                break;
            }
        }
        buf[head_end..(head_end + len).min(buf.len())].to_vec()
    } else if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            if let Some(body) = dechunk(&buf[head_end..]) {
                break body;
            }
            if !read_more(&mut stream, &mut buf).await? {
                break Vec::new();
            }
        }
    } else {
        Vec::new()
    };
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    seen.lock()
        .unwrap()
        .push((request_line.clone(), json.clone()));

    let input = json["input"].as_str().unwrap_or_default().to_string();
    let (code, reason, answer) = if !request_line.starts_with("POST /moderations ") {
        (404, "Not Found", json!({ "error": "no such route" }))
    } else if input.contains("explode") {
        (500, "Internal Server Error", json!({ "error": "boom" }))
    } else {
        let flagged = input.contains("flagme");
        (
            200,
            "OK",
            json!({
                "id": "modr-test",
                "model": "omni-moderation-latest",
                "results": [{
                    "flagged": flagged,
                    "categories": { "harassment": flagged },
                    "category_scores": { "harassment": if flagged { 0.97 } else { 0.01 } },
                }],
            }),
        )
    };
    let text = answer.to_string();
    let response = format!(
        "HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
