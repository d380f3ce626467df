//! Malformed requests on every route: a table of broken bodies, paths,
//! queries and headers per route, sent with the caller's credentials.
//!
//! A client that sends garbage must hear a clear refusal and nothing may
//! happen: every answer is a 4xx (never a 5xx, never a dropped connection)
//! with `content-type: application/json` and a JSON body holding an `error`
//! string, and afterwards the org's tasks, tags, teams, members and keys
//! (and the row counts of every table holding orgs, members, keys, tasks,
//! events, tags, teams and strikes) are what they were before.
//!
//! The bodies include: not JSON, truncated JSON, arrays, strings, numbers,
//! `null` and empty bodies where an object is required, wrong field types,
//! numbers beyond every integer type (`1e400`, `18446744073709551616`),
//! 10,000 levels of nesting, unknown fields, empty and very long strings,
//! invalid UUIDs, invalid UTF-8, a byte-order mark, and non-JSON content
//! types; the paths carry `%ff`, NUL and overlong segments, the queries bad
//! numbers, booleans, statuses, cursors and parameters.
//!
//! One deviation from the JSON error body is pinned by an ignored test at
//! the end of this file (the main tests still require a 4xx there): a
//! request line over 64 KiB, which hyper answers itself before any handler.

use std::collections::BTreeMap;

use crate::common::*;
use reqwest::Method;

/// `backend_tests!` for a test that pins down a known deviation of the
/// server: ignored (with the reason) until the server is fixed; run it with
/// `cargo test -- --ignored`.
macro_rules! ignored_backend_tests {
    ($name:ident, $reason:literal, |$srv:ident| $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = $reason]
            async fn sqlite() {
                let $srv = TestServer::start(Backend::Sqlite).await;
                $body.await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = $reason]
            async fn postgres() {
                let $srv = TestServer::start(Backend::Postgres).await;
                $body.await
            }
        }
    };
}

/// A string value that each route's sample body carries in one field where
/// every replacement below is invalid.
const MARK: &str = "\"MARK\"";

#[derive(Clone, Copy)]
enum Who {
    /// The org owner's `X-Api-Key`.
    Owner,
    /// The operator token.
    Operator,
    /// No credentials of its own (the case brings its own headers).
    Nobody,
}

struct Case {
    label: String,
    who: Who,
    method: Method,
    path: String,
    content_type: Option<String>,
    body: Option<Vec<u8>>,
    headers: Vec<(&'static str, Vec<u8>)>,
    /// Only a 4xx is required, not a JSON error body: a known deviation
    /// with a test of its own.
    status_only: bool,
}

impl Case {
    fn new(label: impl Into<String>, who: Who, method: Method, path: impl Into<String>) -> Case {
        Case {
            label: label.into(),
            who,
            method,
            path: path.into(),
            content_type: None,
            body: None,
            headers: Vec::new(),
            status_only: false,
        }
    }

    fn status_only(mut self) -> Case {
        self.status_only = true;
        self
    }

    fn json(mut self, body: impl Into<Vec<u8>>) -> Case {
        self.content_type = Some("application/json".into());
        self.body = Some(body.into());
        self
    }

    fn typed(mut self, content_type: &str, body: impl Into<Vec<u8>>) -> Case {
        self.content_type = Some(content_type.into());
        self.body = Some(body.into());
        self
    }

    fn header(mut self, name: &'static str, value: &[u8]) -> Case {
        self.headers.push((name, value.to_vec()));
        self
    }
}

fn nested_arrays(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

fn nested_objects(depth: usize) -> String {
    format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth))
}

fn replace_bytes(text: &str, from: &str, to: &[u8]) -> Vec<u8> {
    let at = text
        .find(from)
        .unwrap_or_else(|| panic!("{from} not in {text}"));
    let mut out = text.as_bytes()[..at].to_vec();
    out.extend_from_slice(to);
    out.extend_from_slice(&text.as_bytes()[at + from.len()..]);
    out
}

/// The malformed variants of a route whose sample body is `sample` (JSON
/// text holding `MARK` once). `optional_body`: the route reads an absent
/// body (`null`, empty) as `{}`, which is valid there.
fn body_cases(
    who: Who,
    method: Method,
    path: &str,
    sample: &str,
    optional_body: bool,
) -> Vec<Case> {
    let route = format!("{method} {path}");
    let case = |label: &str| Case::new(format!("{route}: {label}"), who, method.clone(), path);
    let mut cases = vec![
        case("not JSON").json("not json"),
        case("truncated JSON").json(&sample[..sample.len() / 2]),
        case("a JSON array").json("[]"),
        case("the body inside an array").json(format!("[{sample}]")),
        case("a string").json("\"text\""),
        case("a number").json("42"),
        case("a boolean").json("true"),
        case("1e400").json("1e400"),
        case("2^64").json("18446744073709551616"),
        case("10k nested arrays").json(nested_arrays(10_000)),
        case("10k nested objects").json(nested_objects(10_000)),
        case("an unknown field").json(sample.replacen('{', "{\"zzz_unknown\":1,", 1)),
        case("a byte-order mark").json(format!("\u{feff}{sample}")),
        case("invalid UTF-8").json(replace_bytes(sample, "MARK", b"\xff\xfe\xfd")),
        case("truncated UTF-8").json(replace_bytes(sample, "MARK", b"ok\xc3")),
        case("text/plain").typed("text/plain", "hello"),
        case("a form").typed("application/x-www-form-urlencoded", "title=x&priority=1"),
        case("multipart").typed(
            "multipart/form-data; boundary=XyZ",
            "--XyZ\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nx\r\n--XyZ--\r\n",
        ),
    ];
    if !optional_body {
        cases.push(case("null").json("null"));
        cases.push(case("an empty body").json(""));
        cases.push(case("no content type, no body"));
    }
    for (label, value) in [
        ("an empty string", "\"\"".to_string()),
        ("a blank string", "\"   \"".to_string()),
        (
            "a 100k-character string",
            format!("\"{}\"", "x".repeat(100_000)),
        ),
        ("a number", "5".to_string()),
        ("a negative number", "-1".to_string()),
        ("a fraction", "2.5".to_string()),
        ("2^64", "18446744073709551616".to_string()),
        ("1e400", "1e400".to_string()),
        ("-1e400", "-1e400".to_string()),
        ("an object", "{}".to_string()),
        ("an array of numbers", "[1]".to_string()),
        ("10k nested arrays", nested_arrays(10_000)),
        ("an invalid escape", "\"\\x41\"".to_string()),
        ("a lone surrogate", "\"\\ud800\"".to_string()),
    ] {
        let label = format!("field: {label}");
        cases.push(case(&label).json(replace_bytes(sample, MARK, value.as_bytes())));
    }
    cases
}

/// Body cases for a route given as extra bodies (JSON text).
fn extra_cases(who: Who, method: Method, path: &str, bodies: &[String]) -> Vec<Case> {
    bodies
        .iter()
        .map(|b| {
            let label = if b.len() > 120 {
                format!("{}...", &b[..120])
            } else {
                b.clone()
            };
            Case::new(
                format!("{method} {path}: {label}"),
                who,
                method.clone(),
                path,
            )
            .json(b.clone())
        })
        .collect()
}

/// The org every test breaks against: tags, a team with a member, a
/// pending task and a completed one.
struct Fixture {
    org: Org,
    member_email: String,
    member_key: String,
    member_key_id: String,
    team: String,
    pending: String,
    done: String,
}

async fn fixture(srv: &TestServer) -> Fixture {
    let org = srv.create_org("dev").await;
    let key = org.owner_key.clone();
    srv.create_tags(
        &key,
        json!([
            { "name": "alpha" },
            { "name": "locked", "strict": true, "description": "admins only" },
        ]),
    )
    .await;
    let member_email = "member@example.com".to_string();
    let member_key = srv.add_member(&org, &member_email, "user").await;
    let (status, keys) = srv.get(&member_key, "/keys").await;
    assert_eq!(status, StatusCode::OK, "{keys}");
    let member_key_id = str_field(&keys["keys"][0], "key_id");
    let team = "crew".to_string();
    srv.create_team(&key, json!({ "name": team, "tags": ["alpha"] }))
        .await;
    srv.add_to_team(&key, &team, &member_email).await;
    let results = srv
        .create_tasks(
            &key,
            json!([
                { "title": "waiting", "tags": ["alpha"], "metadata": { "m": 1 } },
                { "title": "finished", "assignee": member_email },
            ]),
        )
        .await;
    let [pending, done] = [0, 1].map(|i| str_field(&results[i], "task_id"));
    srv.update_ok(
        &key,
        json!({ "task_id": done, "status": "completed", "note": "n", "output": { "o": 1 } }),
    )
    .await;
    Fixture {
        org,
        member_email,
        member_key,
        member_key_id,
        team,
        pending,
        done,
    }
}

/// Rows in every table that holds something a request could write
/// (usage counters aside).
async fn row_counts(srv: &TestServer) -> BTreeMap<&'static str, i64> {
    const TABLES: [&str; 10] = [
        "orgs",
        "members",
        "api_keys",
        "tasks",
        "task_events",
        "tags",
        "teams",
        "team_members",
        "strikes",
        "blocked_members",
    ];
    let mut counts = BTreeMap::new();
    let mut db = srv.open_db().await;
    for table in TABLES {
        let sql = format!("SELECT count(*) FROM {table}");
        let (n,): (i64,) = match &mut db {
            Db::Sqlite(conn) => sqlx::query_as(&sql).fetch_one(conn).await,
            Db::Postgres(conn) => sqlx::query_as(&sql).fetch_one(conn).await,
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
        counts.insert(table, n);
    }
    counts
}

/// What the org's keys and the operator read about the org.
async fn snapshot(srv: &TestServer, f: &Fixture) -> Value {
    let key = &f.org.owner_key;
    let mut state = json!({
        "tasks": srv.list_all(key, "full=true").await,
        "pending": srv.get_task(key, &f.pending).await,
        "done": srv.get_task(key, &f.done).await,
        "rows": row_counts(srv).await,
    });
    for (name, key, path) in [
        ("tags", key, "/tags".to_string()),
        ("teams", key, "/teams".to_string()),
        ("team", key, format!("/teams/{}", f.team)),
        ("members", key, "/members".to_string()),
        ("owner_keys", key, "/keys".to_string()),
        ("member_keys", &f.member_key, "/keys".to_string()),
        ("me", key, "/me".to_string()),
        ("member_me", &f.member_key, "/me".to_string()),
        ("quota", key, "/quota".to_string()),
    ] {
        let (status, body) = srv.get(key, &path).await;
        assert_eq!(status, StatusCode::OK, "GET {path}: {body}");
        state[name] = body;
    }
    let (status, org) = srv
        .admin(Method::GET, &format!("/admin/orgs/{}", f.org.org_id), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{org}");
    state["org"] = org;
    state
}

/// An `error` string, or on `/mcp` a JSON-RPC error object's message.
fn has_error_message(body: &Value) -> bool {
    let message = if body["jsonrpc"] == "2.0" {
        &body["error"]["message"]
    } else {
        &body["error"]
    };
    message.as_str().is_some_and(|e| !e.trim().is_empty())
}

/// An answer: status, content type and body text.
type Answer = (StatusCode, Option<String>, String);

/// The credential header a case carries, if any.
fn credentials(srv: &TestServer, f: &Fixture, who: Who) -> Option<(&'static str, String)> {
    match who {
        Who::Owner => Some(("x-api-key", f.org.owner_key.clone())),
        Who::Operator => Some(("authorization", format!("Bearer {}", srv.admin_token))),
        Who::Nobody => None,
    }
}

/// Sends a case through an HTTP client.
async fn send(
    http: &reqwest::Client,
    srv: &TestServer,
    f: &Fixture,
    case: &Case,
) -> Result<Answer, String> {
    let mut req = http.request(
        case.method.clone(),
        format!("{}{}", srv.base_url, case.path),
    );
    if let Some((name, value)) = credentials(srv, f, case.who) {
        req = req.header(name, value);
    }
    if let Some(ct) = &case.content_type {
        req = req.header("content-type", ct);
    }
    for (name, value) in &case.headers {
        let value = reqwest::header::HeaderValue::from_bytes(value).expect("a header value");
        req = req.header(*name, value);
    }
    if let Some(body) = &case.body {
        req = req.body(body.clone());
    }
    let resp = req.send().await.map_err(|e| format!("no answer ({e})"))?;
    let status = resp.status();
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let text = resp
        .text()
        .await
        .map_err(|e| format!("{status}, body cut off ({e})"))?;
    Ok((status, content_type, text))
}

/// Sends a case over a bare TCP connection, for request lines too long for
/// an HTTP client to build. The request asks the server to close the
/// connection, so the answer ends where the stream does.
async fn send_over_tcp(srv: &TestServer, f: &Fixture, case: &Case) -> Result<Answer, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let addr = srv
        .base_url
        .strip_prefix("http://")
        .expect("a plain HTTP server");
    let mut request = format!(
        "{} {} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n",
        case.method, case.path
    )
    .into_bytes();
    if let Some((name, value)) = credentials(srv, f, case.who) {
        request.extend(format!("{name}: {value}\r\n").into_bytes());
    }
    if let Some(ct) = &case.content_type {
        request.extend(format!("content-type: {ct}\r\n").into_bytes());
    }
    let body = case.body.clone().unwrap_or_default();
    request.extend(format!("content-length: {}\r\n\r\n", body.len()).into_bytes());
    request.extend(body);

    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .write_all(&request)
        .await
        .map_err(|e| format!("send: {e}"))?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .await
        .map_err(|e| format!("no answer ({e})"))?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no answer (the connection closed after {answer:?})"))?;
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse::<u16>().ok())
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or_else(|| format!("not an HTTP answer: {head:?}"))?;
    let content_type = lines.find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-type")
            .then(|| value.trim().to_string())
    });
    Ok((status, content_type, body.to_string()))
}

/// What is wrong with an answer to a malformed request, if anything.
fn judge(case: &Case, (status, content_type, text): &Answer) -> Option<String> {
    let shown: String = text.chars().take(300).collect();
    if !status.is_client_error() {
        Some(format!("{status} {shown}"))
    } else if case.status_only {
        None
    } else if !content_type
        .as_deref()
        .is_some_and(|ct| ct.starts_with("application/json"))
    {
        Some(format!(
            "{status} with content-type {content_type:?}: {shown}"
        ))
    } else if !serde_json::from_str::<Value>(text).is_ok_and(|b| has_error_message(&b)) {
        Some(format!("{status} without an `error` string: {shown}"))
    } else {
        None
    }
}

/// Sends every case; returns one line per case answered wrongly.
async fn refusals(srv: &TestServer, f: &Fixture, cases: Vec<Case>) -> Vec<String> {
    taskq::install_crypto_provider();
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .expect("http client");
    let mut wrong = Vec::new();
    for case in &cases {
        let answer = if case.path.len() > 60_000 {
            send_over_tcp(srv, f, case).await
        } else {
            send(&http, srv, f, case).await
        };
        let problem = match answer {
            Ok(answer) => judge(case, &answer),
            Err(e) => Some(e),
        };
        if let Some(problem) = problem {
            let line = format!("{}: {problem}", case.label);
            wrong.push(line.chars().take(500).collect());
        }
    }
    eprintln!("{} malformed requests sent", cases.len());
    wrong
}

/// Sends the cases and checks the answers and that nothing changed.
async fn assert_refused_without_effect(srv: &TestServer, f: &Fixture, cases: Vec<Case>) {
    let before = snapshot(srv, f).await;
    let wrong = refusals(srv, f, cases).await;
    assert!(
        wrong.is_empty(),
        "{} malformed requests answered wrongly:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    let after = snapshot(srv, f).await;
    assert_eq!(after, before, "a malformed request changed something");
}

fn s(v: Value) -> String {
    v.to_string()
}

backend_tests!(
    malformed_task_requests_are_refused_with_json_and_write_nothing,
    |srv| async move {
        let f = fixture(&srv).await;
        let t = f.pending.as_str();
        let o = Who::Owner;
        let mut cases = Vec::new();

        cases.extend(body_cases(
            o,
            Method::POST,
            "/tasks",
            r#"{"tasks": [{"title": "MARK", "priority": 2}]}"#,
            false,
        ));
        let item = |extra: Value| {
            let mut item = json!({ "title": "x" });
            for (k, v) in extra.as_object().unwrap() {
                item[k] = v.clone();
            }
            s(json!({ "tasks": [item] }))
        };
        let mut bodies = vec![
            s(json!({ "tasks": {} })),
            s(json!({ "tasks": "x" })),
            s(json!({ "tasks": [] })),
            s(json!({ "tasks": vec![json!({ "title": "x" }); 26] })),
            s(json!({ "tasks": [{}] })),
            s(json!({ "tasks": [null] })),
            s(json!({ "tasks": [5] })),
            s(json!({ "tasks": [[]] })),
            s(json!({})),
        ];
        for extra in [
            json!({ "priority": 0 }),
            json!({ "priority": 6 }),
            json!({ "priority": "2" }),
            json!({ "priority": 2.5 }),
            json!({ "priority": -1 }),
            json!({ "task_id": "not-a-uuid" }),
            json!({ "task_id": "" }),
            json!({ "task_id": uuid::Uuid::new_v4().to_string().to_uppercase() }),
            json!({ "task_id": uuid::Uuid::new_v4().simple().to_string() }),
            json!({ "task_id": 5 }),
            json!({ "task_id": t }),
            json!({ "parent_task_id": "nope" }),
            json!({ "parent_task_id": new_uuid() }),
            json!({ "blocked_by": "x" }),
            json!({ "blocked_by": ["nope"] }),
            json!({ "blocked_by": [5] }),
            json!({ "blocked_by": ["ref:missing"] }),
            json!({ "tags": "alpha" }),
            json!({ "tags": [5] }),
            json!({ "tags": ["not-in-vocabulary"] }),
            json!({ "metadata": "x" }),
            json!({ "metadata": [1] }),
            json!({ "metadata": { "__service_enc__": {} } }),
            json!({ "description": 5 }),
            json!({ "assignee": 5 }),
            json!({ "assignee": "nobody@example.com" }),
            json!({ "ref": 5 }),
            json!({ "title": 5 }),
            json!({ "title": null }),
            json!({ "title": "t".repeat(1_001) }),
            json!({ "zzz_unknown": 1 }),
        ] {
            bodies.push(item(extra));
        }
        // 1e400 and 2^64 in a number field, as text.
        bodies.push(r#"{"tasks": [{"title": "x", "priority": 1e400}]}"#.into());
        bodies.push(r#"{"tasks": [{"title": "x", "priority": 18446744073709551616}]}"#.into());
        cases.extend(extra_cases(o, Method::POST, "/tasks", &bodies));

        cases.extend(body_cases(
            o,
            Method::POST,
            "/tasks/update",
            &format!(r#"{{"updates": [{{"task_id": "{t}", "title": "MARK"}}]}}"#),
            false,
        ));
        let update = |extra: Value| {
            let mut item = json!({ "task_id": t });
            for (k, v) in extra.as_object().unwrap() {
                item[k] = v.clone();
            }
            s(json!({ "updates": [item] }))
        };
        let mut bodies = vec![
            s(json!({ "updates": [] })),
            s(json!({ "updates": vec![json!({ "task_id": t, "priority": 2 }); 26] })),
            s(json!({ "updates": {} })),
            s(json!({ "updates": [{ "title": "no id" }] })),
            s(json!({ "updates": [{ "task_id": "nope", "title": "x" }] })),
            s(json!({ "updates": [{ "task_id": 5, "title": "x" }] })),
            s(json!({ "updates": [null] })),
            s(json!({})),
            // A valid item before an invalid one: validated upfront, neither applies.
            s(json!({ "updates": [
                { "task_id": t, "title": "renamed" },
                { "task_id": t, "priority": 9 },
            ] })),
        ];
        for extra in [
            json!({ "status": "bogus" }),
            json!({ "status": 5 }),
            json!({ "status": "completed", "assignee": f.member_email }),
            json!({ "status": "completed", "note": "" }),
            json!({ "priority": 0 }),
            json!({ "priority": "1" }),
            json!({ "output": "str" }),
            json!({ "output": [1] }),
            json!({ "metadata": "str" }),
            json!({ "metadata": [1] }),
            json!({ "metadata": { "__service_enc__": {} } }),
            json!({ "note": 5 }),
            json!({ "tags": "alpha" }),
            json!({ "tags": ["not-in-vocabulary"] }),
            json!({ "blocked_by": "x" }),
            json!({ "blocked_by": ["nope"] }),
            json!({ "lease_id": "nope" }),
            json!({ "assignee": 5 }),
            json!({ "description": 5 }),
            json!({ "agent_id": 5 }),
            json!({ "title": "" }),
            json!({ "zzz_unknown": 1 }),
        ] {
            bodies.push(update(extra));
        }
        bodies.push(format!(
            r#"{{"updates": [{{"task_id": "{t}", "priority": 18446744073709551616}}]}}"#
        ));
        cases.extend(extra_cases(o, Method::POST, "/tasks/update", &bodies));

        cases.extend(body_cases(
            o,
            Method::POST,
            "/tasks/get",
            r#"{"task_ids": ["MARK"]}"#,
            false,
        ));
        let bodies = vec![
            s(json!({ "task_ids": "x" })),
            s(json!({ "task_ids": [] })),
            s(json!({ "task_ids": vec![t; 26] })),
            s(json!({ "task_ids": [t.replace('-', "")] })),
            s(json!({ "task_ids": [null] })),
            s(json!({ "ids": [t] })),
            s(json!({})),
        ];
        cases.extend(extra_cases(o, Method::POST, "/tasks/get", &bodies));

        cases.extend(body_cases(
            o,
            Method::POST,
            "/tasks/claim",
            r#"{"include_context": "MARK"}"#,
            true,
        ));
        let mut bodies: Vec<String> = [
            json!({ "lease_seconds": 0 }),
            json!({ "lease_seconds": -1 }),
            json!({ "lease_seconds": 259_201 }),
            json!({ "lease_seconds": "60" }),
            json!({ "lease_seconds": 1.5 }),
            json!({ "tags": "alpha" }),
            json!({ "tags": [5] }),
            json!({ "tags": {} }),
            json!({ "include_context": "yes" }),
            json!({ "zzz_unknown": 1 }),
        ]
        .into_iter()
        .map(s)
        .collect();
        bodies.push(r#"{"lease_seconds": 18446744073709551616}"#.into());
        bodies.push(r#"{"lease_seconds": 1e400}"#.into());
        cases.extend(extra_cases(o, Method::POST, "/tasks/claim", &bodies));

        assert_refused_without_effect(&srv, &f, cases).await;
    }
);

backend_tests!(
    malformed_tag_member_team_key_and_feedback_requests_are_refused_with_json_and_write_nothing,
    |srv| async move {
        let f = fixture(&srv).await;
        let o = Who::Owner;
        let mut cases = Vec::new();

        cases.extend(body_cases(
            o,
            Method::POST,
            "/tags",
            r#"{"tags": [{"name": "MARK"}]}"#,
            false,
        ));
        let bodies: Vec<String> = [
            json!({ "tags": {} }),
            json!({ "tags": [] }),
            json!({ "tags": (0..26).map(|i| json!({ "name": format!("t{i}") })).collect::<Vec<_>>() }),
            json!({ "tags": [{ "name": "n", "strict": "yes" }] }),
            json!({ "tags": [{ "name": "n", "strict": true }] }),
            json!({ "tags": [{ "name": "n", "description": "d".repeat(201) }] }),
            json!({ "tags": [{ "name": "n" }, { "name": "n" }] }),
            json!({ "tags": [{ "name": "n", "default": 1 }] }),
            json!({ "tags": [{ "name": "alpha" }] }),
            json!({ "tags": [{ "name": "bell\u{7}" }] }),
            json!({ "tags": [{}] }),
            json!({ "tags": [{ "name": "n", "zzz_unknown": 1 }] }),
        ]
        .into_iter()
        .map(s)
        .collect();
        cases.extend(extra_cases(o, Method::POST, "/tags", &bodies));

        cases.extend(body_cases(
            o,
            Method::POST,
            "/tags/update",
            r#"{"tags": [{"name": "MARK", "default": true}]}"#,
            false,
        ));
        let bodies: Vec<String> = [
            json!({ "tags": [{ "name": "alpha", "strict": "yes" }] }),
            json!({ "tags": [{ "name": "alpha", "strict": true }] }),
            json!({ "tags": [{ "name": "alpha", "description": "d".repeat(201) }] }),
            json!({ "tags": [{ "name": "alpha", "default": "no" }] }),
            json!({ "tags": [{ "name": "no-such-tag", "default": true }] }),
            json!({ "tags": [{ "default": true }] }),
            json!({ "tags": [] }),
            json!({ "tags": [{ "name": "alpha", "zzz_unknown": 1 }] }),
        ]
        .into_iter()
        .map(s)
        .collect();
        cases.extend(extra_cases(o, Method::POST, "/tags/update", &bodies));

        cases.extend(body_cases(
            o,
            Method::POST,
            "/tags/delete",
            r#"{"names": ["MARK"]}"#,
            false,
        ));
        let bodies: Vec<String> = [
            json!({ "names": "alpha" }),
            json!({ "names": [] }),
            json!({ "names": vec!["alpha"; 26] }),
            json!({ "names": ["alpha", "no-such-tag"] }),
            json!({ "tags": ["alpha"] }),
        ]
        .into_iter()
        .map(s)
        .collect();
        cases.extend(extra_cases(o, Method::POST, "/tags/delete", &bodies));

        let member = format!("/members/{}", f.member_email);
        cases.extend(body_cases(
            o,
            Method::PATCH,
            &member,
            r#"{"role": "MARK"}"#,
            false,
        ));
        let bodies: Vec<String> = [
            json!({}),
            json!({ "role": "emperor" }),
            json!({ "profile_tags": "alpha" }),
            json!({ "profile_tags": ["no-such-tag"] }),
            json!({ "profile_tags": [5] }),
            json!({ "seated": "yes" }),
            json!({ "seated": true }),
            json!({ "email": "new@example.com" }),
        ]
        .into_iter()
        .map(s)
        .collect();
        cases.extend(extra_cases(o, Method::PATCH, &member, &bodies));
        cases.extend(extra_cases(
            o,
            Method::PATCH,
            "/members/nobody@example.com",
            &[s(json!({ "role": "admin" }))],
        ));

        cases.extend(body_cases(
            o,
            Method::PATCH,
            "/me",
            r#"{"profile_tags": ["MARK"]}"#,
            false,
        ));
        let bodies: Vec<String> = [
            json!({ "profile_tags": "alpha" }),
            json!({ "profile_tags": [5] }),
            json!({ "role": "admin" }),
        ]
        .into_iter()
        .map(s)
        .collect();
        cases.extend(extra_cases(o, Method::PATCH, "/me", &bodies));

        cases.extend(body_cases(
            o,
            Method::POST,
            "/teams",
            r#"{"name": "MARK"}"#,
            false,
        ));
        let bodies: Vec<String> = [
            json!({ "name": "n".repeat(33) }),
            json!({ "name": "a#b" }),
            json!({ "name": "crew" }),
            json!({ "name": "n", "tags": "alpha" }),
            json!({ "name": "n", "tags": ["no-such-tag"] }),
            json!({ "name": "n", "idp_only": "no" }),
            json!({ "name": "n", "description": "d".repeat(201) }),
            json!({ "tags": ["alpha"] }),
        ]
        .into_iter()
        .map(s)
        .collect();
        cases.extend(extra_cases(o, Method::POST, "/teams", &bodies));

        let team = format!("/teams/{}", f.team);
        cases.extend(body_cases(
            o,
            Method::PATCH,
            &team,
            r#"{"idp_only": "MARK"}"#,
            false,
        ));
        let bodies: Vec<String> = [
            json!({ "tags": "alpha" }),
            json!({ "tags": ["no-such-tag"] }),
            json!({ "description": 5 }),
            json!({ "description": "d".repeat(201) }),
            json!({ "idp_only": true }),
            json!({ "name": "renamed" }),
        ]
        .into_iter()
        .map(s)
        .collect();
        cases.extend(extra_cases(o, Method::PATCH, &team, &bodies));

        let team_members = format!("/teams/{}/members", f.team);
        cases.extend(body_cases(
            o,
            Method::POST,
            &team_members,
            r#"{"email": "MARK"}"#,
            false,
        ));
        let bodies: Vec<String> = [
            json!({}),
            json!({ "email": "not-an-email" }),
            json!({ "email": "nobody@example.com" }),
            json!({ "emails": [f.org.owner_email] }),
        ]
        .into_iter()
        .map(s)
        .collect();
        cases.extend(extra_cases(o, Method::POST, &team_members, &bodies));

        cases.extend(body_cases(
            o,
            Method::POST,
            "/keys",
            r#"{"name": "MARK"}"#,
            false,
        ));
        let bodies: Vec<String> = [
            json!({}),
            json!({ "name": "k".repeat(201) }),
            json!({ "name": "bell\u{7}" }),
            json!({ "name": "k", "zzz_unknown": 1 }),
        ]
        .into_iter()
        .map(s)
        .collect();
        cases.extend(extra_cases(o, Method::POST, "/keys", &bodies));

        cases.extend(body_cases(
            o,
            Method::POST,
            "/feedback",
            r#"{"message": "MARK", "type": "bug"}"#,
            false,
        ));
        let bodies: Vec<String> = [
            json!({}),
            json!({ "message": "m".repeat(4_097) }),
            json!({ "message": format!("{}\nrest", "m".repeat(257)) }),
            json!({ "message": "hello", "type": "rant" }),
            json!({ "message": "hello", "type": 5 }),
        ]
        .into_iter()
        .map(s)
        .collect();
        cases.extend(extra_cases(o, Method::POST, "/feedback", &bodies));

        assert_refused_without_effect(&srv, &f, cases).await;
    }
);

backend_tests!(
    malformed_paths_queries_and_headers_are_refused_with_json_and_write_nothing,
    |srv| async move {
        let f = fixture(&srv).await;
        let o = Who::Owner;
        let long = "a".repeat(10_000);
        let mut cases = Vec::new();

        let key_routes: Vec<(Method, String, Option<Value>)> = vec![
            (Method::GET, "/teams/%ff%fe".into(), None),
            (Method::GET, format!("/teams/{long}"), None),
            (Method::GET, "/teams/%00".into(), None),
            (
                Method::PATCH,
                "/teams/%ff".into(),
                Some(json!({ "description": "x" })),
            ),
            (
                Method::PATCH,
                format!("/teams/{long}"),
                Some(json!({ "description": "x" })),
            ),
            (Method::DELETE, "/teams/%ff".into(), None),
            (Method::DELETE, format!("/teams/{long}"), None),
            (
                Method::POST,
                "/teams/%ff/members".into(),
                Some(json!({ "email": f.member_email })),
            ),
            (
                Method::POST,
                format!("/teams/{long}/members"),
                Some(json!({ "email": f.member_email })),
            ),
            (
                Method::DELETE,
                format!("/teams/{}/members/%ff", f.team),
                None,
            ),
            (
                Method::DELETE,
                format!("/teams/{}/members/%c3%28", f.team),
                None,
            ),
            (
                Method::DELETE,
                format!("/teams/{}/members/{long}", f.team),
                None,
            ),
            (
                Method::DELETE,
                format!("/teams/%ff/members/{}", f.member_email),
                None,
            ),
            (
                Method::PATCH,
                "/members/%ff%fe".into(),
                Some(json!({ "role": "admin" })),
            ),
            (
                Method::PATCH,
                format!("/members/{long}"),
                Some(json!({ "role": "admin" })),
            ),
            (
                Method::PATCH,
                "/members/%00".into(),
                Some(json!({ "role": "admin" })),
            ),
            (Method::DELETE, "/keys/%ff".into(), None),
            (Method::DELETE, "/keys/not-a-uuid".into(), None),
            (Method::DELETE, format!("/keys/{long}"), None),
            (Method::DELETE, format!("/keys/{}x", f.member_key_id), None),
            (Method::DELETE, format!("/keys/{}", new_uuid()), None),
            (Method::GET, "/tasks/%ff".into(), None),
            (Method::GET, "/%ff".into(), None),
            (Method::GET, format!("/{long}"), None),
            (Method::POST, "/tasks/%ff".into(), Some(json!({}))),
            (Method::DELETE, "/tasks".into(), None),
            (Method::PUT, "/tags".into(), Some(json!({ "tags": [] }))),
        ];
        for (method, path, body) in key_routes {
            let mut case = Case::new(format!("{method} {path}"), o, method, path);
            if let Some(body) = body {
                case = case.json(body.to_string());
            }
            cases.push(case);
        }

        for query in [
            "limit=abc",
            "limit=0",
            "limit=201",
            "limit=-1",
            "limit=2.5",
            "limit=18446744073709551616",
            "limit=1e400",
            "limit=",
            "limit=%ff",
            "limit=%zz",
            "limit=1&limit=2",
            "priority_max=0",
            "priority_max=6",
            "priority_max=x",
            "priority_max=18446744073709551616",
            "full=maybe",
            "full=%ff",
            "status=bogus",
            "status=%ff%fe",
            "status=pending,bogus",
            "cursor=garbage",
            "cursor=%ff%fe",
            "cursor=",
            "parent_task_id=not-a-uuid",
            "parent_task_id=%ff",
            "zzz_unknown=1",
            "%ff=1",
        ] {
            cases.push(Case::new(
                format!("GET /tasks?{query}"),
                o,
                Method::GET,
                format!("/tasks?{query}"),
            ));
        }
        // Beyond 64 KiB the request line itself is refused (see
        // `an_overlong_uri_is_refused_with_a_json_error`).
        cases.extend(overlong_uri_cases().into_iter().map(Case::status_only));
        let long_cursor = format!("/tasks?cursor={long}");
        cases.push(Case::new(
            "GET /tasks?cursor=<10k>",
            o,
            Method::GET,
            long_cursor,
        ));

        // A cursor replayed with other filters.
        let (status, page) = srv.get(&f.org.owner_key, "/tasks?limit=1").await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let cursor = encode_query(&str_field(&page, "next_cursor"));
        cases.push(Case::new(
            "GET /tasks with another query's cursor",
            o,
            Method::GET,
            format!("/tasks?limit=1&status=pending&cursor={cursor}"),
        ));

        // Header values that are not text: no key, no token.
        cases.push(
            Case::new(
                "X-Api-Key of non-ASCII bytes",
                Who::Nobody,
                Method::GET,
                "/tasks",
            )
            .header("x-api-key", b"\xff\xfe"),
        );
        for token in [&b"Bearer \xff\xfe"[..], b"Basic YWRtaW4=", b"Bearer"] {
            cases.push(
                Case::new(
                    format!("authorization {:?}", String::from_utf8_lossy(token)),
                    Who::Nobody,
                    Method::GET,
                    format!("/admin/orgs/{}", f.org.org_id),
                )
                .header("authorization", token),
            );
        }

        assert_refused_without_effect(&srv, &f, cases).await;
    }
);

backend_tests!(
    malformed_operator_requests_are_refused_with_json_and_write_nothing,
    |srv| async move {
        let f = fixture(&srv).await;
        // Enrolled, so that a sync body is read rather than refused outright.
        srv.idp_enroll(&f.org, true).await;
        let op = Who::Operator;
        let org = format!("/admin/orgs/{}", f.org.org_id);
        let mut cases = Vec::new();

        cases.extend(body_cases(
            op,
            Method::POST,
            "/admin/orgs",
            r#"{"name": "n", "owner_email": "o@x.example", "tier": "MARK"}"#,
            false,
        ));
        let bodies: Vec<String> = [
            json!({ "name": "n" }),
            json!({ "owner_email": "o@x.example" }),
            json!({ "name": "", "owner_email": "o@x.example" }),
            json!({ "name": "n".repeat(201), "owner_email": "o@x.example" }),
            json!({ "name": 5, "owner_email": "o@x.example" }),
            json!({ "name": "n", "owner_email": "not-an-email" }),
            json!({ "name": "n", "owner_email": 5 }),
            json!({ "name": "n", "owner_email": "o@x.example", "encryption": "rot13" }),
            json!({ "name": "n", "owner_email": "o@x.example", "seats": "5" }),
            json!({ "name": "n", "owner_email": "o@x.example", "seats": -1 }),
            json!({ "name": "n", "owner_email": "o@x.example", "seats": 2.5 }),
        ]
        .into_iter()
        .map(s)
        .collect();
        cases.extend(extra_cases(op, Method::POST, "/admin/orgs", &bodies));
        cases.extend(extra_cases(
            op,
            Method::POST,
            "/admin/orgs",
            &[
                r#"{"name": "n", "owner_email": "o@x.example", "seats": 18446744073709551616}"#
                    .to_string(),
            ],
        ));

        cases.extend(body_cases(
            op,
            Method::PATCH,
            &org,
            r#"{"tier": "MARK"}"#,
            false,
        ));
        let bodies: Vec<String> = [
            json!({ "tier": "platinum" }),
            json!({ "seats": "5" }),
            json!({ "seats": -1 }),
            json!({ "suspended": "yes" }),
            json!({ "limits": [] }),
            json!({ "limits": "none" }),
            json!({ "limits": { "tags": "x" } }),
            json!({ "limits": { "tags": -1 } }),
            json!({ "limits": { "bogus": 1 } }),
            json!({ "name": "renamed" }),
        ]
        .into_iter()
        .map(s)
        .collect();
        cases.extend(extra_cases(op, Method::PATCH, &org, &bodies));
        cases.extend(extra_cases(
            op,
            Method::PATCH,
            &org,
            &[
                r#"{"seats": 18446744073709551616}"#.to_string(),
                r#"{"limits": {"tasks_per_month": 18446744073709551616}}"#.to_string(),
                r#"{"limits": {"tasks_per_month": 1e400}}"#.to_string(),
            ],
        ));

        let members = format!("{org}/members");
        cases.extend(body_cases(
            op,
            Method::POST,
            &members,
            r#"{"email": "z@x.example", "role": "MARK"}"#,
            false,
        ));
        let bodies: Vec<String> = [
            json!({ "role": "user" }),
            json!({ "email": "not-an-email", "role": "user" }),
            json!({ "email": 5, "role": "user" }),
            json!({ "email": "", "role": "user" }),
            json!({ "email": "z@x.example", "role": "user", "key_name": "" }),
            json!({ "email": "z@x.example", "role": "user", "key_name": "k".repeat(201) }),
            json!({ "email": f.member_email, "role": "user" }),
        ]
        .into_iter()
        .map(s)
        .collect();
        cases.extend(extra_cases(op, Method::POST, &members, &bodies));

        let reset = format!("{org}/members/{}/keys", f.member_email);
        cases.extend(body_cases(
            op,
            Method::POST,
            &reset,
            r#"{"key_name": "MARK"}"#,
            true,
        ));
        cases.extend(extra_cases(
            op,
            Method::POST,
            &format!("{org}/members/nobody@example.com/keys"),
            &[s(json!({}))],
        ));

        let idp = format!("{org}/idp");
        cases.extend(body_cases(
            op,
            Method::POST,
            &idp,
            r#"{"enrolled": "MARK"}"#,
            false,
        ));
        cases.extend(extra_cases(op, Method::POST, &idp, &[s(json!({}))]));

        let sync = format!("{org}/idp/sync");
        cases.extend(body_cases(
            op,
            Method::POST,
            &sync,
            &format!(r#"{{"teams": {{"{}": "MARK"}}}}"#, f.team),
            false,
        ));
        let bodies: Vec<String> = [
            json!({}),
            json!({ "teams": [] }),
            json!({ "teams": { "no-such-team": [f.member_email] } }),
            json!({ "teams": { f.team.clone(): ["not-an-email"] } }),
        ]
        .into_iter()
        .map(s)
        .collect();
        cases.extend(extra_cases(op, Method::POST, &sync, &bodies));

        cases.extend(body_cases(
            op,
            Method::POST,
            "/admin/members/unblock",
            r#"{"email": "MARK"}"#,
            false,
        ));

        let long = "a".repeat(10_000);
        for (method, path, body) in [
            (Method::GET, "/admin/orgs/%ff".to_string(), None),
            (Method::GET, "/admin/orgs/not-a-uuid".to_string(), None),
            (Method::GET, format!("/admin/orgs/{}", new_uuid()), None),
            (Method::GET, format!("/admin/orgs/{long}"), None),
            (
                Method::PATCH,
                "/admin/orgs/not-a-uuid".to_string(),
                Some(json!({ "tier": "pro" })),
            ),
            (
                Method::PATCH,
                format!("/admin/orgs/{}", new_uuid()),
                Some(json!({ "tier": "pro" })),
            ),
            (
                Method::POST,
                "/admin/orgs/%ff/members".to_string(),
                Some(json!({ "email": "z@x.example", "role": "user" })),
            ),
            (
                Method::POST,
                format!("{org}/members/%ff/keys"),
                Some(json!({})),
            ),
            (
                Method::POST,
                format!("{org}/members/{long}/keys"),
                Some(json!({})),
            ),
            (
                Method::POST,
                "/admin/orgs/%ff/idp".to_string(),
                Some(json!({ "enrolled": false })),
            ),
            (Method::PUT, org.clone(), None),
        ] {
            let mut case = Case::new(format!("{method} {path}"), op, method, path);
            if let Some(body) = body {
                case = case.json(body.to_string());
            }
            cases.push(case);
        }

        assert_refused_without_effect(&srv, &f, cases).await;
    }
);

/// Requests whose request line is over 64 KiB.
fn overlong_uri_cases() -> Vec<Case> {
    let long = "a".repeat(70_000);
    vec![
        Case::new(
            "GET /teams/<70k>",
            Who::Owner,
            Method::GET,
            format!("/teams/{long}"),
        ),
        Case::new(
            "GET /tasks?cursor=<70k>",
            Who::Owner,
            Method::GET,
            format!("/tasks?cursor={long}"),
        ),
        Case::new(
            "PATCH /members/<70k>",
            Who::Owner,
            Method::PATCH,
            format!("/members/{long}@example.com"),
        )
        .json(r#"{"role": "admin"}"#),
    ]
}

/// Requests that MCP's transport at `POST /mcp` must refuse. A tool's own
/// failures are JSON-RPC results (status 200, `isError: true`), so only
/// requests that are not a usable JSON-RPC message are here.
fn mcp_cases() -> Vec<Case> {
    let call = r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "create_tasks", "arguments": {"tasks": [{"title": "MARK"}]}}}"#;
    let case = |label: &str| {
        Case::new(
            format!("POST /mcp: {label}"),
            Who::Owner,
            Method::POST,
            "/mcp",
        )
        .header("accept", b"application/json, text/event-stream")
        .header("mcp-protocol-version", b"2025-06-18")
    };
    vec![
        case("not JSON").json("not json"),
        case("truncated JSON").json(&call[..call.len() / 2]),
        case("a JSON array").json("[]"),
        case("a string").json("\"text\""),
        case("a number").json("42"),
        case("a boolean").json("true"),
        case("null").json("null"),
        case("an empty body").json(""),
        case("1e400").json("1e400"),
        case("2^64").json("18446744073709551616"),
        case("10k nested arrays").json(nested_arrays(10_000)),
        case("10k nested objects").json(nested_objects(10_000)),
        case("invalid UTF-8").json(replace_bytes(call, "MARK", b"\xff\xfe\xfd")),
        case("truncated UTF-8").json(replace_bytes(call, "MARK", b"ok\xc3")),
        case("a byte-order mark").json(format!("\u{feff}{call}")),
        case("an empty object").json("{}"),
        case("no method").json(r#"{"jsonrpc": "2.0", "id": 1}"#),
        case("params a string")
            .json(r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": "x"}"#),
        case("text/plain").typed("text/plain", call),
        case("a form").typed("application/x-www-form-urlencoded", "title=x"),
        Case::new(
            "POST /mcp without an Accept header",
            Who::Owner,
            Method::POST,
            "/mcp",
        )
        .json(r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#),
        Case::new("GET /mcp", Who::Owner, Method::GET, "/mcp"),
        Case::new("DELETE /mcp", Who::Owner, Method::DELETE, "/mcp"),
    ]
}

backend_tests!(
    malformed_mcp_requests_are_refused_and_write_nothing,
    |srv| async move {
        let f = fixture(&srv).await;
        // The JSON error bodies are pinned by `malformed_mcp_requests_answer_json_errors`.
        let cases = mcp_cases().into_iter().map(Case::status_only).collect();
        assert_refused_without_effect(&srv, &f, cases).await;
    }
);

backend_tests!(
    malformed_mcp_requests_answer_json_errors,
    |srv| async move {
        let f = fixture(&srv).await;
        assert_refused_without_effect(&srv, &f, mcp_cases()).await;
    }
);

ignored_backend_tests!(
    an_overlong_uri_is_refused_with_a_json_error,
    "limitation: hyper, the HTTP/1 parser under axum, answers a request line over 64 KiB itself (414, empty body) before any handler runs",
    |srv| async move {
        let f = fixture(&srv).await;
        assert_refused_without_effect(&srv, &f, overlong_uri_cases()).await;
    }
);

backend_tests!(invalid_utf8_in_a_query_value_is_refused, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = org.owner_key.as_str();
    srv.create_tags(key, json!([{ "name": "\u{fffd}" }])).await;
    let id = srv
        .create_task(key, json!({ "title": "tagged", "tags": ["\u{fffd}"] }))
        .await;
    // The tag's own spelling finds the task...
    let (status, body) = srv.get(key, "/tasks?tags=%EF%BF%BD").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["tasks"][0]["task_id"], id.as_str(), "{body}");
    // ...but bytes that are not UTF-8 are no spelling of anything.
    for query in ["tags=%ff", "tags=%ff%fe", "assignee=%ff"] {
        let (status, text) = srv
            .raw(
                Method::GET,
                &format!("/tasks?{query}"),
                &[("x-api-key", key)],
                None,
            )
            .await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "GET /tasks?{query} was read as another value: {text}"
        );
        let body: Value = serde_json::from_str(&text).expect("a JSON error");
        assert!(body["error"].is_string(), "{text}");
    }
});
