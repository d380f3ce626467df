//! The OpenAPI document: served without a key, every documented operation
//! routed, and the live server checked against it by a fuzzer nobody here
//! wrote, Schemathesis, with every check: no 5xx, no answer that breaks its
//! own schema (or its documented statuses, content types and headers), no
//! request that hangs, every request the document allows accepted and
//! every one it forbids refused.
//!
//! The Schemathesis run needs `TASKQ_TEST_SCHEMATHESIS` naming its `st`
//! command (`.ci/run` installs one); it is skipped with a note otherwise.

use std::collections::{BTreeMap, BTreeSet};

use crate::common::*;
use reqwest::Method;

const SCHEMATHESIS_ENV: &str = "TASKQ_TEST_SCHEMATHESIS";
/// The member and team the fuzzer's path parameters name.
const MEMBER: &str = "member@example.com";
const TEAM: &str = "core";

async fn document(srv: &TestServer) -> Value {
    let response = reqwest::get(format!("{}/openapi.json", srv.base_url))
        .await
        .expect("GET /openapi.json");
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"].to_str().unwrap();
    assert_eq!(content_type, "application/json");
    response.json().await.expect("the document is JSON")
}

/// `(method, path template)` of every documented operation.
fn operations(document: &Value) -> Vec<(Method, String)> {
    let mut out = Vec::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("a path item").keys() {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            out.push((method, path.clone()));
        }
    }
    out
}

backend_tests!(
    the_document_is_served_without_a_key_and_every_operation_is_routed,
    |srv| async move {
        let doc = document(&srv).await;
        assert_eq!(doc["openapi"], "3.1.0");
        assert_eq!(
            doc["components"]["securitySchemes"]["ApiKey"],
            json!({"type": "apiKey", "in": "header", "name": "X-Api-Key"})
        );
        let org = srv.create_org("pro").await;
        let task = srv.new_task(&org.owner_key, "routed").await;
        let auth = format!("Bearer {}", srv.admin_token);
        let operations = operations(&doc);
        assert!(operations.len() >= 40, "{} operations", operations.len());
        for (method, template) in operations {
            // Placeholders that no resource has: what matters is that the
            // router hands the request to the route, not the fallback.
            let path = template
                .replace("{org_id}", &org.org_id)
                .replace("{email}", "nobody@example.com")
                .replace("{name}", "no-such-team")
                .replace("{key_id}", &task);
            if template == "/events" {
                // An event stream does not end: its answer's head is enough.
                let response = srv.try_open_events(&org.owner_key, "", None).await;
                assert_eq!(response.status(), StatusCode::OK, "GET /events");
                continue;
            }
            let body = matches!(method, Method::POST | Method::PUT | Method::PATCH)
                .then(|| "{}".to_owned());
            let (status, text) = srv
                .raw(
                    method.clone(),
                    &path,
                    &[("x-api-key", &org.owner_key), ("authorization", &auth)],
                    body,
                )
                .await;
            let fallback = json!({"error": "not found"}).to_string();
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            assert!(
                !(status == StatusCode::NOT_FOUND && text == fallback),
                "{method} {template} is documented but not routed"
            );
            assert!(
                !status.is_server_error(),
                "{method} {path}: {status} {text}"
            );
        }
        // And the other way: a route that is not documented is not served.
        let (status, text) = srv.raw(Method::GET, "/openapi.yaml", &[], None).await;
        assert_eq!(
            (status, text.as_str()),
            (StatusCode::NOT_FOUND, r#"{"error":"not found"}"#)
        );
    }
);

/// The Schemathesis options of every run: bounded examples, a fixed seed
/// (a failure reproduces), a request timeout (a hang fails the run), the
/// checks of the pass condition.
fn schemathesis(
    st: &str,
    config: &std::path::Path,
    srv: &TestServer,
    key: &str,
    har: &std::path::Path,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(st);
    command
        .arg("--config-file")
        .arg(config)
        .arg("run")
        .arg(format!("{}/openapi.json", srv.base_url))
        .args(["--header", &format!("X-Api-Key: {key}")])
        .args([
            "--header",
            &format!("Authorization: Bearer {}", srv.admin_token),
        ])
        // Every check: besides the answers' conformance, that a request the
        // document allows is accepted and one it forbids is refused.
        .args(["--checks", "all"])
        .args([
            "--max-examples",
            "30",
            "--seed",
            "20261123",
            // One worker: with two, a run once failed inside Schemathesis
            // itself (CPython 3.11's parser: "AST constructor recursion
            // depth mismatch"), which says nothing about the server.
            "--workers",
            "1",
        ])
        .args(["--request-timeout", "10", "--suppress-health-check", "all"])
        .args(["--output-truncate", "false", "--report", "har"])
        .arg("--report-har-path")
        .arg(har)
        // Colour codes would only clutter the log.
        .env("NO_COLOR", "1")
        // Generated long polls wait at most a second (see the hooks file).
        .env(
            "SCHEMATHESIS_HOOKS",
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/openapi/hooks.py"),
        );
    // Schemathesis keeps a cache next to where it runs: not in the checkout.
    if let Some(dir) = har.parent() {
        command.current_dir(dir);
    }
    command
}

/// Requests by operation (method and matched template) and status,
/// from the run's HAR log.
fn tally(har: &std::path::Path, doc: &Value) -> BTreeMap<String, BTreeMap<u16, usize>> {
    let har: Value =
        serde_json::from_slice(&std::fs::read(har).expect("the HAR report")).expect("HAR is JSON");
    let templates: Vec<(Method, String)> = operations(doc);
    let matches = |template: &str, path: &str| {
        let t: Vec<&str> = template.split('/').collect();
        let p: Vec<&str> = path.split('/').collect();
        t.len() == p.len() && t.iter().zip(&p).all(|(t, p)| t.starts_with('{') || t == p)
    };
    let mut out: BTreeMap<String, BTreeMap<u16, usize>> = BTreeMap::new();
    for entry in har["log"]["entries"].as_array().expect("entries") {
        let method = entry["request"]["method"].as_str().unwrap();
        let url = entry["request"]["url"].as_str().unwrap();
        let path = url
            .split_once("://")
            .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
            .unwrap_or("/");
        let path = path.split('?').next().unwrap();
        // A literal segment beats a parameter (`/tasks/get` vs `/teams/{name}`).
        let operation = templates
            .iter()
            .filter(|(m, t)| m.as_str() == method && matches(t, path))
            .min_by_key(|(_, t)| t.matches('{').count())
            .map(|(m, t)| format!("{m} {t}"))
            .unwrap_or_else(|| format!("{method} (undocumented) {path}"));
        let status = entry["response"]["status"].as_u64().unwrap() as u16;
        *out.entry(operation).or_default().entry(status).or_default() += 1;
    }
    out
}

async fn run(mut command: tokio::process::Command, what: &str) -> String {
    let output = command
        .output()
        .await
        .unwrap_or_else(|e| panic!("running Schemathesis ({what}): {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    eprintln!("---- Schemathesis, {what}:\n{stdout}");
    assert!(
        output.status.success(),
        "Schemathesis found failures ({what}, {}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

backend_tests!(
    schemathesis_finds_no_failure_on_any_route,
    needs(
        "schemathesis",
        "needs TASKQ_TEST_SCHEMATHESIS (Schemathesis's st)"
    ),
    |mut srv| async move {
        let st = need(SCHEMATHESIS_ENV);
        // The fuzzer signs in with generated tokens: counted as guesses,
        // they would soon have its address refused every operator route.
        srv.set_env("TASKQ_OPERATOR_WRONG_TOKENS", Some("0"));
        // Generated webhooks point at loopback (see the hooks file).
        srv.set_env("TASKQ_WEBHOOKS_ALLOW_PRIVATE", Some("1"));
        srv.restart().await;
        let doc = document(&srv).await;
        let total = operations(&doc).len();

        // A paid org (teams), with its limits lifted so that the fuzzer is not
        // answered 429 throughout, a second member, a tag, a team and tasks.
        let org = srv.create_org("pro").await;
        let key = &org.owner_key;
        srv.add_member(&org, MEMBER, "user").await;
        srv.set_limits(&org, json!({ "webhooks": null })).await;
        srv.create_tags(key, json!([{ "name": "backend" }])).await;
        srv.create_team(key, json!({ "name": TEAM, "tags": ["backend"] }))
            .await;
        let results = srv
            .create_tasks(
                key,
                json!([
                    { "ref": "a", "title": "first", "tags": ["backend"] },
                    { "title": "second", "blocked_by": ["ref:a"], "priority": 1 },
                    { "title": "third", "metadata": { "k": "v" } },
                ]),
            )
            .await;
        assert_eq!(results.len(), 3);
        srv.claim(key, json!({})).await.expect("a task to claim");
        // The operator routes act on a sandbox org: a patch that suspends it
        // or drops its tier must not change what the member routes answer.
        let sandbox = srv.create_org("pro").await;
        srv.add_member(&sandbox, MEMBER, "user").await;
        // The team an identity-provider sync names (see the hooks file).
        srv.create_team(&sandbox.owner_key, json!({ "name": TEAM }))
            .await;

        let dir = tempfile::tempdir().expect("a report directory");
        let config = |key_id: &str| {
            let path = dir.path().join(format!("schemathesis-{key_id}.toml"));
            // Path parameters name resources that exist, so that the routes'
            // logic runs rather than their 404s. Teams are left to the
            // fuzzer: it deletes the ones it names, and finds the ones it
            // creates through the document's links.
            let toml = format!(
                "[parameters]\n\
             \"path.org_id\" = \"{}\"\n\
             \"path.email\" = \"{MEMBER}\"\n\
             \"path.key_id\" = \"{key_id}\"\n",
                sandbox.org_id
            );
            std::fs::write(&path, toml).expect("write the configuration");
            path
        };

        // Every route but the one that revokes keys, with the owner's key: a
        // key the run revoked would leave the rest of it answering 401. And
        // but the event stream, whose answer never ends (tests/events.rs
        // checks its refusals), and the org's deletion, after which the
        // sandbox's routes answer 404 (its own run comes last).
        let har = dir.path().join("main.har");
        let mut main = schemathesis(&st, &config("none"), &srv, key, &har);
        main.args([
            "--exclude-path",
            "/keys/{key_id}",
            "--exclude-path",
            "/events",
            "--exclude-operation-id",
            "delete_org",
        ]);
        let stdout = run(main, "every route but DELETE /keys/{key_id}").await;
        // Every operation but the excluded ones and the document's own
        // (Schemathesis does not test the schema it loaded).
        assert!(
            stdout.contains(&format!("Tested: {}", total - 4)),
            "{stdout}"
        );
        let main_tally = tally(&har, &doc);

        // The key still works: the run exercised the API with it to the end.
        let (status, me) = srv.get(key, "/me").await;
        assert_eq!(status, StatusCode::OK, "{me}");

        // Revoking a key: a throwaway key of the same member, revoking itself.
        let (throwaway_id, throwaway) = srv.new_key(key, "throwaway").await;
        let har = dir.path().join("revoke.har");
        let mut revoke = schemathesis(&st, &config(&throwaway_id), &srv, &throwaway, &har);
        revoke.args(["--include-path", "/keys/{key_id}"]);
        run(revoke, "DELETE /keys/{key_id}").await;
        let revoke_tally = tally(&har, &doc);
        let (status, _) = srv.get(&throwaway, "/me").await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "the throwaway key was revoked"
        );

        // Deleting the sandbox org, last: nothing after needs it.
        let har = dir.path().join("delete.har");
        let mut delete = schemathesis(&st, &config("none"), &srv, key, &har);
        delete.args(["--include-operation-id", "delete_org"]);
        run(delete, "DELETE /admin/orgs/{org_id}").await;
        let delete_tally = tally(&har, &doc);

        let mut requests = 0;
        let mut answered_2xx = BTreeSet::new();
        eprintln!("requests by operation and status:");
        for (operation, statuses) in main_tally.iter().chain(&revoke_tally).chain(&delete_tally) {
            eprintln!("  {operation}: {statuses:?}");
            requests += statuses.values().sum::<usize>();
            if statuses.keys().any(|s| (200..300).contains(s)) {
                answered_2xx.insert(operation.clone());
            }
            assert!(
                statuses.keys().all(|s| *s < 500),
                "{operation}: {statuses:?}"
            );
        }
        eprintln!(
            "{requests} requests; {} of {total} operations answered 2xx at least once",
            answered_2xx.len()
        );
        // The fuzzer reached the routes' logic, not only their validation.
        assert!(
            answered_2xx.len() * 3 >= total * 2,
            "only {answered_2xx:?} answered 2xx"
        );
    }
);
