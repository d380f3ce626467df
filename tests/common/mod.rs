//! Black-box harness: starts the real `taskq` binary against a fresh database
//! and talks to it over HTTP.
//!
//! Every test file does `#[macro_use] mod common;` and `use common::*;`, then
//! writes its tests with `backend_tests!`, which runs each body on SQLite and,
//! when `TASKQ_TEST_POSTGRES_URL` is set, on PostgreSQL.
#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use reqwest::Method;
use sqlx::Connection;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub use reqwest::StatusCode;
pub use serde_json::{json, Value};

/// Environment variable naming a PostgreSQL server (any database on it) that
/// the PostgreSQL variants of the tests may create databases on.
pub const POSTGRES_ENV: &str = "TASKQ_TEST_POSTGRES_URL";

const READY_PREFIX: &str = "taskq listening on ";
const START_TIMEOUT: Duration = Duration::from_secs(30);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs one async test body on every backend:
///
/// - `backend_tests!(name, |srv| async move { ... })` starts a default server;
/// - `backend_tests!(name, |mut srv| async move { ... })` when the body restarts it;
/// - `backend_tests!(name, |backend: Backend| async move { ... })` hands the
///   body a `Backend` so that it can start the server itself (builder options).
///
/// Generates `name::sqlite` and `name::postgres`; the latter returns early
/// with a note when `TASKQ_TEST_POSTGRES_URL` is unset.
macro_rules! backend_tests {
    ($name:ident, |$backend:ident: Backend| $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let $backend = crate::common::Backend::Sqlite;
                $body.await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if !crate::common::Backend::Postgres.is_configured() {
                    eprintln!(
                        "note: {} is unset; skipping the PostgreSQL variant",
                        crate::common::POSTGRES_ENV
                    );
                    return;
                }
                let $backend = crate::common::Backend::Postgres;
                $body.await
            }
        }
    };
    ($name:ident, |mut $srv:ident| $body:expr) => {
        backend_tests!($name, |__backend: Backend| async move {
            #[allow(unused_mut)]
            let mut $srv = crate::common::TestServer::start(__backend).await;
            $body.await
        });
    };
    ($name:ident, |$srv:ident| $body:expr) => {
        backend_tests!($name, |__backend: Backend| async move {
            let $srv = crate::common::TestServer::start(__backend).await;
            $body.await
        });
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn is_configured(self) -> bool {
        match self {
            Backend::Sqlite => true,
            Backend::Postgres => std::env::var(POSTGRES_ENV).is_ok_and(|v| !v.is_empty()),
        }
    }
}

pub struct Builder {
    backend: Backend,
    idle_secs: Option<u64>,
    env: Vec<(String, String)>,
}

impl Builder {
    /// Sets `TASKQ_ORG_IDLE_SECS` for the server.
    pub fn idle_secs(mut self, secs: u64) -> Self {
        self.idle_secs = Some(secs);
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    pub async fn start(self) -> TestServer {
        let dir = tempfile::Builder::new()
            .prefix("taskq-test-")
            .tempdir()
            .expect("create tempdir");
        let (database_url, pg_cleanup) = match self.backend {
            Backend::Sqlite => (
                format!("sqlite://{}", dir.path().join("taskq.db").display()),
                None,
            ),
            Backend::Postgres => {
                let admin_url = std::env::var(POSTGRES_ENV).expect("TASKQ_TEST_POSTGRES_URL");
                let db_name = format!("taskq_t_{}", uuid::Uuid::new_v4().simple());
                let mut conn = sqlx::PgConnection::connect(&admin_url)
                    .await
                    .unwrap_or_else(|e| panic!("connect to {admin_url}: {e}"));
                sqlx::query(&format!("CREATE DATABASE {db_name}"))
                    .execute(&mut conn)
                    .await
                    .expect("create test database");
                let _ = conn.close().await;
                (
                    url_with_database(&admin_url, &db_name),
                    Some(PgCleanup { admin_url, db_name }),
                )
            }
        };
        let mut env = self.env;
        if let Some(secs) = self.idle_secs {
            env.push(("TASKQ_ORG_IDLE_SECS".into(), secs.to_string()));
        }
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .expect("http client");
        let mut srv = TestServer {
            backend: self.backend,
            base_url: String::new(),
            admin_token: format!("admin-{}", uuid::Uuid::new_v4().simple()),
            database_url,
            dir,
            env,
            child: None,
            http,
            pg_cleanup,
        };
        srv.spawn().await;
        srv
    }
}

struct PgCleanup {
    admin_url: String,
    db_name: String,
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
    child: Option<Child>,
    http: reqwest::Client,
    pg_cleanup: Option<PgCleanup>,
}

pub struct Org {
    pub org_id: String,
    pub owner_key: String,
    pub owner_email: String,
    pub owner_key_name: String,
}

impl TestServer {
    pub fn builder(backend: Backend) -> Builder {
        Builder {
            backend,
            idle_secs: None,
            env: Vec::new(),
        }
    }

    pub async fn start(backend: Backend) -> TestServer {
        Self::builder(backend).start().await
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

    fn log_tail(&self) -> String {
        let log = self.server_log();
        let start = log.len().saturating_sub(8000);
        let start = (start..log.len())
            .find(|i| log.is_char_boundary(*i))
            .unwrap_or(0);
        log[start..].to_string()
    }

    async fn spawn(&mut self) {
        assert!(self.child.is_none(), "server already running");
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.stderr_path())
            .expect("open stderr log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_taskq"));
        cmd.arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--database-url")
            .arg(&self.database_url)
            .current_dir(self.dir.path())
            .env("TASKQ_ADMIN_TOKEN", &self.admin_token)
            .env("TASKQ_EMBEDDINGS", "none")
            .env("RUST_LOG", "info")
            .env_remove("TASKQ_MASTER_KEY")
            .env_remove("TASKQ_LISTEN")
            .env_remove("TASKQ_DATABASE_URL")
            .env_remove("TASKQ_LLM_URL")
            .env_remove("TASKQ_ORG_IDLE_SECS")
            .env_remove("TASKQ_LOG_FORMAT")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn taskq binary");
        let stdout = child.stdout.take().expect("child stdout");
        let mut lines = BufReader::new(stdout).lines();

        let ready = tokio::time::timeout(START_TIMEOUT, async {
            loop {
                match lines.next_line().await {
                    Ok(Some(line)) => {
                        if let Some(rest) = line.trim().strip_prefix(READY_PREFIX) {
                            return Ok(rest.trim().to_string());
                        }
                    }
                    Ok(None) => return Err("stdout closed before the readiness line".to_string()),
                    Err(e) => return Err(format!("reading stdout: {e}")),
                }
            }
        })
        .await;
        let url = match ready {
            Ok(Ok(url)) => url,
            Ok(Err(why)) => {
                let status = child.wait().await.ok();
                panic!(
                    "taskq did not start ({why}; exit status {status:?}). stderr:\n{}",
                    self.log_tail()
                );
            }
            Err(_) => {
                let _ = child.kill().await;
                panic!(
                    "taskq printed no readiness line within {START_TIMEOUT:?}. stderr:\n{}",
                    self.log_tail()
                );
            }
        };
        // Keep draining stdout so that the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        self.base_url = url.trim_end_matches('/').to_string();
        self.child = Some(child);
    }

    /// Sends SIGTERM without waiting (the server may still be finishing requests).
    pub fn signal_term(&self) {
        let pid = self
            .child
            .as_ref()
            .and_then(|c| c.id())
            .expect("server is not running");
        let sent = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM {pid} failed");
    }

    /// Waits (up to 30 s) for the server process to exit.
    pub async fn wait_exit(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("server is not running");
        match tokio::time::timeout(Duration::from_secs(30), child.wait()).await {
            Ok(status) => status.expect("wait for taskq"),
            Err(_) => {
                let _ = child.kill().await;
                panic!(
                    "taskq did not exit within 30 s of SIGTERM. stderr:\n{}",
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
    pub async fn kill9(&mut self) {
        let mut child = self.child.take().expect("server is not running");
        child.kill().await.expect("kill -9 taskq");
    }

    /// Starts the server again after `kill9` or `stop`.
    pub async fn start_again(&mut self) {
        self.spawn().await;
    }

    // ---------------------------------------------------------------- HTTP

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url, path)
    }

    /// POST with `X-Api-Key`; transport errors are returned, not panicked on.
    pub async fn try_post(
        &self,
        key: &str,
        path: &str,
        body: Value,
    ) -> Result<(StatusCode, Value), reqwest::Error> {
        let resp = self
            .http
            .post(self.url(path))
            .header("x-api-key", key)
            .json(&body)
            .send()
            .await?;
        let status = resp.status();
        let text = resp.text().await?;
        Ok((status, parse_body(&text)))
    }

    /// Sends a request and returns status and raw body text.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<String>,
    ) -> (StatusCode, String) {
        let mut req = self.http.request(method.clone(), self.url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(body);
        }
        let resp = req.send().await.unwrap_or_else(|e| {
            panic!("{method} {path}: {e}\nserver stderr:\n{}", self.log_tail())
        });
        let status = resp.status();
        let text = resp.text().await.expect("read response body");
        (status, text)
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> (StatusCode, Value) {
        let (status, text) = self
            .raw(method, path, headers, body.map(|b| b.to_string()))
            .await;
        (status, parse_body(&text))
    }

    /// Key-authenticated calls (`X-Api-Key`).
    pub async fn get(&self, key: &str, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, &[("x-api-key", key)], None)
            .await
    }

    pub async fn post(&self, key: &str, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, &[("x-api-key", key)], Some(&body))
            .await
    }

    pub async fn patch(&self, key: &str, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::PATCH, path, &[("x-api-key", key)], Some(&body))
            .await
    }

    pub async fn delete(&self, key: &str, path: &str) -> (StatusCode, Value) {
        self.call(Method::DELETE, path, &[("x-api-key", key)], None)
            .await
    }

    /// POST with a raw (possibly malformed) body.
    pub async fn post_raw(&self, key: &str, path: &str, body: &str) -> (StatusCode, String) {
        self.raw(
            Method::POST,
            path,
            &[("x-api-key", key)],
            Some(body.to_string()),
        )
        .await
    }

    /// Operator calls (`Authorization: Bearer <admin token>`).
    pub async fn admin(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let auth = format!("Bearer {}", self.admin_token);
        self.call(method, path, &[("authorization", &auth)], body.as_ref())
            .await
    }

    /// Creates an org (managed encryption) with every rate and volume limit
    /// lifted, so that tests never trip over the tier's per-minute limits.
    pub async fn create_org(&self, tier: &str) -> Org {
        self.create_org_with(json!({ "tier": tier, "encryption": "managed" }))
            .await
    }

    /// Like `create_org`, with extra fields in the POST /admin/orgs body.
    pub async fn create_org_with(&self, extra: Value) -> Org {
        let n = uuid::Uuid::new_v4().simple().to_string();
        let mut body = json!({
            "name": format!("org-{}", &n[..8]),
            "owner_email": format!("owner-{}@example.com", &n[..8]),
        });
        for (k, v) in extra.as_object().expect("extra must be an object") {
            body[k] = v.clone();
        }
        let (status, org) = self.admin(Method::POST, "/admin/orgs", Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "POST /admin/orgs: {org}");
        let org = Org {
            org_id: str_field(&org, "org_id"),
            owner_key: str_field(&org["owner"], "api_key"),
            owner_email: str_field(&org["owner"], "email"),
            owner_key_name: str_field(&org["owner"], "key_name"),
        };
        let (status, body) = self
            .admin(
                Method::PATCH,
                &format!("/admin/orgs/{}", org.org_id),
                Some(json!({ "limits": {
                    "writes_per_minute": null,
                    "reads_per_minute": null,
                    "requests_per_month": null,
                    "tasks_per_month": null,
                }})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "lifting limits: {body}");
        org
    }

    /// Adds a member and returns its first API key (key name = the email).
    pub async fn add_member(&self, org: &Org, email: &str, role: &str) -> String {
        let (status, body) = self
            .admin(
                Method::POST,
                &format!("/admin/orgs/{}/members", org.org_id),
                Some(json!({ "email": email, "role": role })),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "add member {email}: {body}");
        str_field(&body, "api_key")
    }

    /// Adds a member whose first key carries `key_name`.
    pub async fn add_member_named(
        &self,
        org: &Org,
        email: &str,
        role: &str,
        key_name: &str,
    ) -> String {
        let (status, body) = self
            .admin(
                Method::POST,
                &format!("/admin/orgs/{}/members", org.org_id),
                Some(json!({ "email": email, "role": role, "key_name": key_name })),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "add member {email}: {body}");
        assert_eq!(body["key_name"], key_name, "{body}");
        str_field(&body, "api_key")
    }

    /// POST /keys for the caller's member; returns (key_id, api_key).
    pub async fn new_key(&self, key: &str, name: &str) -> (String, String) {
        let (status, body) = self.post(key, "/keys", json!({ "name": name })).await;
        assert_eq!(status, StatusCode::CREATED, "POST /keys: {body}");
        (str_field(&body, "key_id"), str_field(&body, "api_key"))
    }

    // --------------------------------------------------------------- tasks

    /// POST /tasks expecting 201; returns the result items.
    pub async fn create_tasks(&self, key: &str, items: Value) -> Vec<Value> {
        let n = items.as_array().map(|a| a.len()).unwrap_or(0);
        let (status, body) = self.post(key, "/tasks", json!({ "tasks": items })).await;
        assert_eq!(status, StatusCode::CREATED, "POST /tasks: {body}");
        assert_eq!(body["created"], n, "{body}");
        let results = body["results"].as_array().expect("results array").clone();
        assert_eq!(results.len(), n, "{body}");
        results
    }

    /// Creates one task from `item` and returns its id.
    pub async fn create_task(&self, key: &str, item: Value) -> String {
        let results = self.create_tasks(key, json!([item])).await;
        str_field(&results[0], "task_id")
    }

    /// Creates one task with just a title.
    pub async fn new_task(&self, key: &str, title: &str) -> String {
        self.create_task(key, json!({ "title": title })).await
    }

    /// POST /tasks/get for one id; asserts it was found. Includes history.
    pub async fn get_task(&self, key: &str, id: &str) -> Value {
        let (status, body) = self
            .post(key, "/tasks/get", json!({ "task_ids": [id] }))
            .await;
        assert_eq!(status, StatusCode::OK, "POST /tasks/get {id}: {body}");
        assert_eq!(body["count"], 1, "task {id} not found: {body}");
        body["tasks"][0].clone()
    }

    /// POST /tasks/get for one id; returns whether it exists.
    pub async fn task_exists(&self, key: &str, id: &str) -> bool {
        let (status, body) = self
            .post(key, "/tasks/get", json!({ "task_ids": [id] }))
            .await;
        assert_eq!(status, StatusCode::OK, "POST /tasks/get {id}: {body}");
        body["count"] == 1
    }

    pub async fn status_of(&self, key: &str, id: &str) -> String {
        str_field(&self.get_task(key, id).await, "status")
    }

    pub async fn update(&self, key: &str, updates: Value) -> (StatusCode, Value) {
        self.post(key, "/tasks/update", json!({ "updates": updates }))
            .await
    }

    /// One update item expected to apply (200); returns its result item.
    pub async fn update_ok(&self, key: &str, item: Value) -> Value {
        let (status, body) = self.update(key, json!([item])).await;
        assert_eq!(status, StatusCode::OK, "update {item}: {body}");
        assert_eq!(body["updated"], 1, "{body}");
        body["results"][0].clone()
    }

    /// One update item expected to fail per item (207); returns its error.
    pub async fn update_item_error(&self, key: &str, item: Value) -> String {
        let (status, body) = self.update(key, json!([item])).await;
        assert_eq!(status, StatusCode::MULTI_STATUS, "update {item}: {body}");
        assert_eq!(body["partial"], true, "{body}");
        assert_eq!(body["updated"], 0, "{body}");
        str_field(&body["results"][0], "error")
    }

    /// GET /tasks following `next_cursor` to the end; `query` has no `?`.
    pub async fn list_all(&self, key: &str, query: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..1000 {
            let mut path = format!("/tasks?limit=200&{query}");
            if let Some(c) = &cursor {
                path.push_str("&cursor=");
                path.push_str(&encode_query(c));
            }
            let (status, body) = self.get(key, &path).await;
            assert_eq!(status, StatusCode::OK, "GET {path}: {body}");
            out.extend(
                body["tasks"]
                    .as_array()
                    .expect("tasks array")
                    .iter()
                    .cloned(),
            );
            match body["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => return out,
            }
        }
        panic!("GET /tasks did not end after 1000 pages");
    }

    pub async fn list_ids(&self, key: &str, query: &str) -> Vec<String> {
        self.list_all(key, query)
            .await
            .iter()
            .map(|t| str_field(t, "task_id"))
            .collect()
    }

    /// POST /tasks/claim expecting 200; None when the queue is empty.
    pub async fn claim(&self, key: &str, body: Value) -> Option<Value> {
        let (status, body) = self.post(key, "/tasks/claim", body).await;
        assert_eq!(status, StatusCode::OK, "claim: {body}");
        if body.is_null() {
            None
        } else {
            Some(body)
        }
    }

    // -------------------------------------------------- org administration

    /// Creates a managed org of `tier` with `seats` seats, limits lifted as
    /// in `create_org`.
    pub async fn create_org_seats(&self, tier: &str, seats: i64) -> Org {
        self.create_org_with(json!({ "tier": tier, "encryption": "managed", "seats": seats }))
            .await
    }

    /// `PATCH /admin/orgs/{id}` `{"limits": limits}`, expecting 200.
    pub async fn set_limits(&self, org: &Org, limits: Value) {
        let (status, body) = self
            .admin(
                Method::PATCH,
                &format!("/admin/orgs/{}", org.org_id),
                Some(json!({ "limits": limits })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "PATCH limits: {body}");
    }

    /// Any method with `X-Api-Key` and a raw (possibly malformed) JSON body.
    pub async fn send_raw(
        &self,
        method: Method,
        key: &str,
        path: &str,
        body: &str,
    ) -> (StatusCode, String) {
        self.raw(method, path, &[("x-api-key", key)], Some(body.to_string()))
            .await
    }

    /// POST /tags expecting 201; returns the created tag objects.
    pub async fn create_tags(&self, key: &str, items: Value) -> Vec<Value> {
        let n = items.as_array().map(|a| a.len()).unwrap_or(0);
        let (status, body) = self.post(key, "/tags", json!({ "tags": items })).await;
        assert_eq!(status, StatusCode::CREATED, "POST /tags: {body}");
        assert_eq!(body["created"], n, "{body}");
        body["tags"].as_array().expect("tags array").clone()
    }

    /// GET /tags expecting 200; returns the tag objects.
    pub async fn list_tags(&self, key: &str) -> Vec<Value> {
        let (status, body) = self.get(key, "/tags").await;
        assert_eq!(status, StatusCode::OK, "GET /tags: {body}");
        body.as_array()
            .unwrap_or_else(|| panic!("GET /tags is not an array: {body}"))
            .clone()
    }

    /// GET /members expecting 200; returns the member objects.
    pub async fn list_members(&self, key: &str) -> Vec<Value> {
        let (status, body) = self.get(key, "/members").await;
        assert_eq!(status, StatusCode::OK, "GET /members: {body}");
        body.as_array()
            .unwrap_or_else(|| panic!("GET /members is not an array: {body}"))
            .clone()
    }

    /// One member's object from GET /members.
    pub async fn member(&self, key: &str, email: &str) -> Value {
        self.list_members(key)
            .await
            .into_iter()
            .find(|m| m["email"] == email)
            .unwrap_or_else(|| panic!("{email} is not listed by GET /members"))
    }

    /// PATCH /members/{email} expecting 200; returns the member object.
    pub async fn patch_member(&self, key: &str, email: &str, body: Value) -> Value {
        let (status, resp) = self
            .patch(key, &format!("/members/{email}"), body.clone())
            .await;
        assert_eq!(
            status,
            StatusCode::OK,
            "PATCH /members/{email} {body}: {resp}"
        );
        resp
    }

    /// POST /teams expecting 201; returns the team object.
    pub async fn create_team(&self, key: &str, body: Value) -> Value {
        let (status, resp) = self.post(key, "/teams", body.clone()).await;
        assert_eq!(status, StatusCode::CREATED, "POST /teams {body}: {resp}");
        resp
    }

    /// GET /teams/{name} expecting 200; returns the team with its members.
    pub async fn get_team(&self, key: &str, name: &str) -> Value {
        let (status, body) = self.get(key, &format!("/teams/{name}")).await;
        assert_eq!(status, StatusCode::OK, "GET /teams/{name}: {body}");
        body
    }

    /// POST /teams/{team}/members expecting 201; returns the membership.
    pub async fn add_to_team(&self, key: &str, team: &str, email: &str) -> Value {
        let (status, body) = self
            .post(
                key,
                &format!("/teams/{team}/members"),
                json!({ "email": email }),
            )
            .await;
        assert_eq!(
            status,
            StatusCode::CREATED,
            "POST /teams/{team}/members {email}: {body}"
        );
        body
    }

    /// `POST /admin/orgs/{id}/idp` expecting 200 `{enrolled}`.
    pub async fn idp_enroll(&self, org: &Org, enrolled: bool) {
        let (status, body) = self
            .admin(
                Method::POST,
                &format!("/admin/orgs/{}/idp", org.org_id),
                Some(json!({ "enrolled": enrolled })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "idp enrolled={enrolled}: {body}");
        assert_eq!(body, json!({ "enrolled": enrolled }));
    }

    /// `POST /admin/orgs/{id}/idp/sync` `{teams}`.
    pub async fn idp_sync(&self, org: &Org, teams: Value) -> (StatusCode, Value) {
        self.admin(
            Method::POST,
            &format!("/admin/orgs/{}/idp/sync", org.org_id),
            Some(json!({ "teams": teams })),
        )
        .await
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

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
        if let Some(pg) = self.pg_cleanup.take() {
            // Best effort; runs on its own thread because Drop is synchronous.
            let _ = std::thread::spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(async {
                    if let Ok(mut conn) = sqlx::PgConnection::connect(&pg.admin_url).await {
                        let _ = sqlx::query(&format!(
                            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                            pg.db_name
                        ))
                        .execute(&mut conn)
                        .await;
                    }
                });
            })
            .join();
        }
    }
}

pub enum Db {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

// ------------------------------------------------------------------ helpers

fn parse_body(text: &str) -> Value {
    if text.trim().is_empty() {
        return Value::Null;
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(format!("<non-JSON body> {text}")))
}

/// A string field of a JSON object, panicking with the object when absent.
pub fn str_field(v: &Value, key: &str) -> String {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("expected string field `{key}` in {v}"))
        .to_string()
}

/// Asserts that the body is a JSON error whose `error` mentions `field`.
pub fn assert_error_mentions(body: &Value, field: &str) {
    let error = body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("expected an `error` string in {body}"));
    assert!(
        error.to_lowercase().contains(&field.to_lowercase()),
        "error should name `{field}`: {body}"
    );
}

/// Asserts a 400 whose error names `field`.
pub fn assert_bad_request(status: StatusCode, body: &Value, field: &str) {
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "expected 400 naming `{field}`: {body}"
    );
    assert_error_mentions(body, field);
}

/// Asserts the status and that the body is a JSON error with a non-empty
/// `error` string.
pub fn assert_error(status: StatusCode, body: &Value, expected: StatusCode) {
    assert_eq!(status, expected, "expected {expected}: {body}");
    let error = body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("expected an `error` string in {body}"));
    assert!(!error.trim().is_empty(), "empty `error` in {body}");
}

/// The strings of a JSON array, sorted; a missing or null value reads as
/// empty.
pub fn sorted_strings(v: &Value) -> Vec<String> {
    if v.is_null() {
        return Vec::new();
    }
    let mut out: Vec<String> = v
        .as_array()
        .unwrap_or_else(|| panic!("expected an array of strings, got {v}"))
        .iter()
        .map(|s| {
            s.as_str()
                .unwrap_or_else(|| panic!("expected a string in {v}"))
                .to_string()
        })
        .collect();
    out.sort();
    out
}

/// Parses an RFC 3339 timestamp field.
pub fn ts(v: &Value, key: &str) -> DateTime<Utc> {
    let s = str_field(v, key);
    DateTime::parse_from_rfc3339(&s)
        .unwrap_or_else(|e| panic!("`{key}` = {s:?} is not RFC 3339: {e}"))
        .with_timezone(&Utc)
}

/// Canonical lowercase hyphenated UUID.
pub fn is_canonical_uuid(s: &str) -> bool {
    uuid::Uuid::parse_str(s).is_ok_and(|u| u.hyphenated().to_string() == s)
}

pub fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A short random string for unique titles, emails and names.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// Percent-encodes a query parameter value.
pub fn encode_query(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The `history` array of a task from a single-id get.
pub fn history(task: &Value) -> Vec<Value> {
    task["history"]
        .as_array()
        .unwrap_or_else(|| panic!("expected a history array in {task}"))
        .clone()
}

/// Ids of a list of tasks or result items.
pub fn ids(items: &[Value]) -> Vec<String> {
    items.iter().map(|t| str_field(t, "task_id")).collect()
}

/// Polls `check` until it returns `Some`, failing after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
