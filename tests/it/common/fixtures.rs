//! What tests build and check with: orgs (limits lifted), members, keys,
//! tasks, tags, teams and identity-provider sync through the API, and free
//! helpers that read and assert on JSON answers, make unique names, and
//! poll until something holds.

use std::future::Future;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use reqwest::Method;

use super::{json, StatusCode, TestServer, Value};

pub struct Org {
    pub org_id: String,
    pub owner_key: String,
    pub owner_email: String,
    pub owner_key_name: String,
}

impl TestServer {
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

    /// Creates `n` tasks, 25 a call; their ids.
    pub async fn create_many(&self, key: &str, n: usize) -> std::collections::HashSet<String> {
        let mut ids = std::collections::HashSet::new();
        for start in (0..n).step_by(25) {
            let items: Vec<Value> = (start..n.min(start + 25))
                .map(|i| json!({ "title": format!("task {i}") }))
                .collect();
            for result in self.create_tasks(key, json!(items)).await {
                ids.insert(str_field(&result, "task_id"));
            }
        }
        ids
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
}

/// POSTs a create of over 2 MiB to `url` through `http` and asserts the
/// refusal: 413, a JSON error, and `Connection: close`.
pub async fn assert_oversized_refused(http: &reqwest::Client, url: &str, key: &str) {
    let huge = format!(
        r#"{{"tasks": [{{"title": "{}"}}]}}"#,
        "x".repeat(3 * 1024 * 1024)
    );
    let answer = http
        .post(url)
        .header("x-api-key", key)
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap_or_else(|e| panic!("the oversized request failed: {e}"));
    assert_eq!(answer.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        answer.headers().get("connection").map(|v| v.as_bytes()),
        Some(&b"close"[..])
    );
    let body: Value = answer.json().await.expect("a JSON error");
    assert!(body["error"].is_string(), "{body}");
}

/// `n` long-poll claims (`wait_seconds` 30) sent at once to `base_url`
/// through `http`, each resolving to the id of the task it claimed.
pub fn long_polls(
    http: &reqwest::Client,
    base_url: &str,
    key: &str,
    n: usize,
) -> Vec<tokio::task::JoinHandle<String>> {
    (0..n)
        .map(|_| {
            let claim = http
                .post(format!("{base_url}/tasks/claim"))
                .header("x-api-key", key)
                .json(&json!({ "wait_seconds": 30 }))
                .send();
            tokio::spawn(async move {
                let answer = claim.await.expect("a long poll is answered");
                assert_eq!(answer.status(), StatusCode::OK);
                let task: Value = answer.json().await.expect("a JSON answer");
                str_field(&task, "task_id")
            })
        })
        .collect()
}

/// The ids the long polls of [`long_polls`] claimed, once all answered.
pub async fn claimed(
    polls: Vec<tokio::task::JoinHandle<String>>,
) -> std::collections::HashSet<String> {
    let mut ids = std::collections::HashSet::new();
    for poll in polls {
        ids.insert(poll.await.expect("a long poll's task"));
    }
    ids
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

/// `POST /admin/test/clock` `{advance_seconds}` (cargo feature `test-hooks`);
/// returns the server's new `now`.
pub async fn advance_clock(srv: &TestServer, seconds: i64) -> DateTime<Utc> {
    let (status, body) = srv
        .admin(
            Method::POST,
            "/admin/test/clock",
            Some(json!({ "advance_seconds": seconds })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "advancing the clock: {body}");
    ts(&body, "now")
}

/// Whether every node a `GET /admin/cluster` answer lists has been live
/// for the heartbeats after which orgs move to it (three, and one more):
/// an org placed sooner may be handed to its chosen node a moment later.
pub fn cluster_settled(view: &Value) -> bool {
    let lived = |node: &Value| {
        let at = |field: &str| DateTime::parse_from_rfc3339(node[field].as_str().unwrap_or(""));
        match (at("started_at"), at("last_seen")) {
            (Ok(started), Ok(seen)) => seen - started >= chrono::Duration::seconds(4),
            _ => false,
        }
    };
    view["nodes"]
        .as_array()
        .is_some_and(|nodes| nodes.iter().all(lived))
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
