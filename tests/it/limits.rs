//! Per-minute rate limits: token buckets per org for reads and writes, their
//! 429 answers, operator overrides, what is not limited, restarts, and a
//! load test with concurrent clients.

use crate::common::limits::*;
use crate::common::*;
use reqwest::Method;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Dev tier: 30 writes and 120 reads a minute.
const DEV_WRITES: usize = 30;
const DEV_READS: usize = 120;

backend_tests!(
    dev_write_burst_then_429_with_retry_after,
    |srv| async move {
        let org = create_limited_org(&srv, "dev").await;
        let key = org.owner_key.clone();

        let burst = until_refused(&srv, &key, &Call::create_one(), 100).await;
        assert_burst(&burst, DEV_WRITES);
        assert_rate_limited(&burst.refused, "write", 30, "dev");

        // The refused create wrote nothing; reads have their own bucket.
        assert_eq!(srv.list_all(&key, "").await.len(), burst.passed);
    }
);

backend_tests!(dev_read_burst_then_429, |srv| async move {
    let org = create_limited_org(&srv, "dev").await;
    let key = org.owner_key.clone();

    let burst = until_refused(&srv, &key, &Call::get("/tasks"), 400).await;
    assert_burst(&burst, DEV_READS);
    assert_rate_limited(&burst.refused, "read", 120, "dev");

    // Writes have their own bucket.
    let created = Call::create_one().ok(&srv, &key).await;
    assert_eq!(created["created"], 1, "{created}");
});

/// Key-authenticated routes as (method, path, body).
type Route = (Method, String, Option<Value>);

/// The write routes, acting on `task_id` and `key_id`.
fn write_routes(task_id: &str, key_id: &str) -> Vec<Route> {
    vec![
        (
            Method::POST,
            "/tasks".into(),
            Some(json!({ "tasks": [{ "title": "one more" }] })),
        ),
        (
            Method::POST,
            "/tasks/update".into(),
            Some(json!({ "updates": [{ "task_id": task_id, "title": "renamed" }] })),
        ),
        (Method::POST, "/tasks/claim".into(), Some(json!({}))),
        (
            Method::POST,
            "/keys".into(),
            Some(json!({ "name": "extra" })),
        ),
        (Method::DELETE, format!("/keys/{key_id}"), None),
        (
            Method::PATCH,
            "/me".into(),
            Some(json!({ "profile_tags": [] })),
        ),
        (
            Method::POST,
            "/tags".into(),
            Some(json!({ "tags": [{ "name": "urgent" }] })),
        ),
        (
            Method::POST,
            "/feedback".into(),
            Some(json!({ "message": "the limits page is clear" })),
        ),
    ]
}

/// The read routes, reading `task_id`.
fn read_routes(task_id: &str) -> Vec<Route> {
    let mut routes: Vec<Route> = [
        "/tasks", "/me", "/keys", "/members", "/tags", "/quota", "/teams",
    ]
    .into_iter()
    .map(|p| (Method::GET, p.to_string(), None))
    .collect();
    routes.push((
        Method::POST,
        "/tasks/get".into(),
        Some(json!({ "task_ids": [task_id] })),
    ));
    routes
}

/// An org with both limits lifted, one task and a second key of the owner;
/// returns (org, task_id, key_id of the second key).
async fn org_with_a_task_and_a_key(srv: &TestServer) -> (Org, String, String) {
    let org = create_org_with_limits(
        srv,
        "dev",
        json!({ "writes_per_minute": null, "reads_per_minute": null }),
    )
    .await;
    let task_id = srv.new_task(&org.owner_key, "the task").await;
    let (key_id, _) = srv.new_key(&org.owner_key, "second").await;
    (org, task_id, key_id)
}

backend_tests!(every_route_is_a_read_or_a_write, |srv| async move {
    // Writes limited to one a minute, reads unlimited.
    let (org, task_id, key_id) = org_with_a_task_and_a_key(&srv).await;
    let key = org.owner_key.clone();
    srv.set_limits(&org, json!({ "writes_per_minute": 1 }))
        .await;
    let burst = until_refused(&srv, &key, &Call::create_one(), 50).await;
    assert_rate_limited(&burst.refused, "write", 1, "dev");
    for (method, path, body) in write_routes(&task_id, &key_id) {
        let reply = send(&srv, method.clone(), &key, &path, body.as_ref()).await;
        assert_eq!(
            reply.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{method} {path} is a write: {}",
            reply.body
        );
        assert_rate_limited(&reply, "write", 1, "dev");
    }
    for (method, path, body) in read_routes(&task_id) {
        let reply = send(&srv, method.clone(), &key, &path, body.as_ref()).await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "{method} {path} is a read: {}",
            reply.body
        );
    }
    // The refused writes did nothing.
    let task = srv.get_task(&key, &task_id).await;
    assert_eq!(task["title"], "the task", "{task}");
    assert_eq!(task["status"], "pending", "the refused claim took it");
    let (status, keys) = srv.get(&key, "/keys").await;
    assert_eq!(status, StatusCode::OK, "{keys}");
    let keys = keys["keys"].as_array().unwrap().clone();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.iter().all(|k| k["active"] == true), "{keys:?}");
    assert_eq!(srv.list_tags(&key).await, Vec::<Value>::new());
    assert_eq!(srv.list_all(&key, "").await.len(), 1 + burst.passed);

    // Reads limited to one a minute, writes unlimited.
    let (org, task_id, key_id) = org_with_a_task_and_a_key(&srv).await;
    let key = org.owner_key.clone();
    srv.set_limits(&org, json!({ "reads_per_minute": 1 })).await;
    let burst = until_refused(&srv, &key, &Call::get("/tasks"), 50).await;
    assert_rate_limited(&burst.refused, "read", 1, "dev");
    for (method, path, body) in read_routes(&task_id) {
        let reply = send(&srv, method.clone(), &key, &path, body.as_ref()).await;
        assert_eq!(
            reply.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{method} {path} is a read: {}",
            reply.body
        );
        assert_rate_limited(&reply, "read", 1, "dev");
    }
    for (method, path, body) in write_routes(&task_id, &key_id) {
        let reply = send(&srv, method.clone(), &key, &path, body.as_ref()).await;
        assert!(
            reply.status.is_success(),
            "{method} {path} is a write: {} {}",
            reply.status,
            reply.body
        );
    }
});

backend_tests!(a_batch_create_counts_one_write, |srv| async move {
    let org = create_limited_org(&srv, "dev").await;
    let key = org.owner_key.clone();

    // 25 tasks a call: were each task a write, the first call would not fit.
    let burst = until_refused(&srv, &key, &Call::create_many(25), 100).await;
    assert_burst(&burst, DEV_WRITES);
    assert_rate_limited(&burst.refused, "write", 30, "dev");
    assert_eq!(
        srv.list_all(&key, "").await.len(),
        25 * burst.passed,
        "the refused batch wrote nothing"
    );
});

backend_tests!(free_tier_has_its_own_numbers, |srv| async move {
    let org = create_limited_org(&srv, "free").await;
    let key = org.owner_key.clone();

    let writes = until_refused(&srv, &key, &Call::create_one(), 100).await;
    assert_burst(&writes, 10);
    assert_rate_limited(&writes.refused, "write", 10, "free");

    let reads = until_refused(&srv, &key, &Call::get("/tasks"), 200).await;
    assert_burst(&reads, 30);
    assert_rate_limited(&reads.refused, "read", 30, "free");
});

backend_tests!(operator_overrides_change_the_numbers, |srv| async move {
    let org = create_limited_org(&srv, "dev").await;
    let key = org.owner_key.clone();
    srv.set_limits(
        &org,
        json!({ "writes_per_minute": 4, "reads_per_minute": 2 }),
    )
    .await;
    let limits = effective_limits(&srv, &org).await;
    assert_eq!(limits["writes_per_minute"], 4, "{limits}");
    assert_eq!(limits["reads_per_minute"], 2, "{limits}");
    assert_eq!(
        limits["requests_per_month"], 100_000,
        "omitted keys keep the tier's value: {limits}"
    );
    assert_eq!(limits["tasks_per_month"], 1000, "{limits}");

    let writes = until_refused(&srv, &key, &Call::create_one(), 100).await;
    assert_burst(&writes, 4);
    assert_rate_limited(&writes.refused, "write", 4, "dev");
    let reads = until_refused(&srv, &key, &Call::get("/tasks"), 100).await;
    assert_burst(&reads, 2);
    assert_rate_limited(&reads.refused, "read", 2, "dev");

    // null lifts a limit, even for an empty bucket.
    srv.set_limits(&org, json!({ "writes_per_minute": null }))
        .await;
    let limits = effective_limits(&srv, &org).await;
    assert!(limits["writes_per_minute"].is_null(), "{limits}");
    assert_eq!(
        limits["reads_per_minute"], 2,
        "an override stays until changed: {limits}"
    );
    let create = Call::create_one();
    for _ in 0..DEV_WRITES + 10 {
        create.ok(&srv, &key).await;
    }
    let reply = send(&srv, Method::GET, &key, "/tasks", None).await;
    assert_rate_limited(&reply, "read", 2, "dev");

    srv.set_limits(&org, json!({ "reads_per_minute": null }))
        .await;
    let list = Call::get("/tasks?limit=1");
    for _ in 0..DEV_READS + 10 {
        list.ok(&srv, &key).await;
    }
    assert_eq!(
        srv.list_all(&key, "").await.len(),
        writes.passed + DEV_WRITES + 10
    );
});

backend_tests!(
    requests_that_fail_validation_still_count,
    |srv| async move {
        let org = create_org_with_limits(&srv, "dev", json!({ "writes_per_minute": 3 })).await;
        let key = org.owner_key.clone();
        for _ in 0..3 {
            let (status, body) = srv
                .post(&key, "/tasks", json!({ "tasks": [{ "priority": 9 }] }))
                .await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        }
        let reply = Call::create_one().send(&srv, &key).await;
        assert_rate_limited(&reply, "write", 3, "dev");
    }
);

backend_tests!(limits_are_pooled_per_org, |srv| async move {
    let limits = json!({ "writes_per_minute": 3, "reads_per_minute": 5 });
    let a = create_org_with_limits(&srv, "dev", limits.clone()).await;
    let b = create_org_with_limits(&srv, "dev", limits).await;
    let untouched = create_limited_org(&srv, "dev").await;
    let colleague = srv.add_member(&a, "colleague@example.com", "user").await;

    let writes = until_refused(&srv, &a.owner_key, &Call::create_one(), 50).await;
    assert_burst(&writes, 3);
    let reads = until_refused(&srv, &a.owner_key, &Call::get("/tasks"), 50).await;
    assert_burst(&reads, 5);

    // Another key of the same org shares the buckets.
    let reply = Call::create_one().send(&srv, &colleague).await;
    assert_rate_limited(&reply, "write", 3, "dev");
    let reply = Call::get("/me").send(&srv, &colleague).await;
    assert_rate_limited(&reply, "read", 5, "dev");

    // Other orgs keep their full buckets.
    let burst = until_refused(&srv, &b.owner_key, &Call::create_one(), 50).await;
    assert_burst(&burst, 3);
    let burst = until_refused(&srv, &b.owner_key, &Call::get("/tasks"), 50).await;
    assert_burst(&burst, 5);
    for _ in 0..DEV_WRITES {
        Call::create_one().ok(&srv, &untouched.owner_key).await;
    }
    assert_eq!(
        srv.list_all(&untouched.owner_key, "").await.len(),
        DEV_WRITES
    );
});

backend_tests!(admin_routes_and_healthz_are_not_limited, |srv| async move {
    let org = create_org_with_limits(
        &srv,
        "dev",
        json!({ "writes_per_minute": 3, "reads_per_minute": 3 }),
    )
    .await;
    let org_path = format!("/admin/orgs/{}", org.org_id);

    // Operator and health calls before any key is used take no tokens.
    for _ in 0..20 {
        let (status, body) = srv.admin(Method::GET, &org_path, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let (status, body) = srv.raw(Method::GET, "/healthz", &[], None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let member = srv.add_member(&org, "member@example.com", "user").await;
    let writes = until_refused(&srv, &org.owner_key, &Call::create_one(), 50).await;
    assert_burst(&writes, 3);
    let reads = until_refused(&srv, &org.owner_key, &Call::get("/tasks"), 50).await;
    assert_burst(&reads, 3);

    // With both buckets empty, the operator and the health check still work.
    for _ in 0..20 {
        let (status, body) = srv.admin(Method::GET, &org_path, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let (status, body) = srv.raw(Method::GET, "/healthz", &[], None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, body) = srv
        .admin(
            Method::POST,
            &format!("{org_path}/members/member@example.com/keys"),
            Some(json!({ "key_name": "fresh" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "key reset: {body}");
    let fresh = str_field(&body, "api_key");
    srv.add_member(&org, "late@example.com", "user").await;

    // The org's keys, old and new, are still limited.
    for key in [&member, &fresh] {
        let reply = Call::create_one().send(&srv, key).await;
        assert_rate_limited(&reply, "write", 3, "dev");
    }
});

backend_tests!(
    write_bucket_survives_a_crash_restart,
    |mut srv| async move {
        let org = create_org_with_limits(&srv, "dev", json!({ "writes_per_minute": 3 })).await;
        let key = org.owner_key.clone();
        let burst = until_refused(&srv, &key, &Call::create_one(), 50).await;
        assert_burst(&burst, 3);
        assert_rate_limited(&burst.refused, "write", 3, "dev");

        srv.kill9().await;
        srv.start_again().await;

        let reply = Call::create_one().send(&srv, &key).await;
        assert_rate_limited(&reply, "write", 3, "dev");
        assert_eq!(srv.list_all(&key, "").await.len(), burst.passed);
    }
);

#[cfg(feature = "test-hooks")]
backend_tests!(a_minute_later_the_buckets_are_full, |srv| async move {
    let org = create_limited_org(&srv, "dev").await;
    let key = org.owner_key.clone();

    let writes = until_refused(&srv, &key, &Call::create_one(), 100).await;
    assert_burst(&writes, DEV_WRITES);
    let reads = until_refused(&srv, &key, &Call::get("/tasks?limit=1"), 400).await;
    assert_burst(&reads, DEV_READS);

    advance_clock(&srv, 60).await;
    let writes = until_refused(&srv, &key, &Call::create_one(), 100).await;
    assert_burst(&writes, DEV_WRITES);
    assert_rate_limited(&writes.refused, "write", 30, "dev");
    let reads = until_refused(&srv, &key, &Call::get("/tasks?limit=1"), 400).await;
    assert_burst(&reads, DEV_READS);
    assert_rate_limited(&reads.refused, "read", 120, "dev");
});

#[cfg(feature = "test-hooks")]
backend_tests!(retry_after_is_when_a_retry_passes, |srv| async move {
    let org = create_org_with_limits(
        &srv,
        "dev",
        json!({ "writes_per_minute": 3, "reads_per_minute": 2 }),
    )
    .await;
    let key = org.owner_key.clone();
    let burst = until_refused(&srv, &key, &Call::create_one(), 50).await;
    assert_burst(&burst, 3);
    let wait = assert_rate_limited(&burst.refused, "write", 3, "dev");

    // Refused requests take nothing from the bucket.
    for _ in 0..20 {
        let reply = Call::create_one().send(&srv, &key).await;
        assert_rate_limited(&reply, "write", 3, "dev");
    }
    advance_clock(&srv, wait as i64).await;
    Call::create_one().ok(&srv, &key).await;

    let burst = until_refused(&srv, &key, &Call::get("/me"), 50).await;
    assert_burst(&burst, 2);
    let wait = assert_rate_limited(&burst.refused, "read", 2, "dev");
    advance_clock(&srv, wait as i64).await;
    Call::get("/me").ok(&srv, &key).await;
});

// ------------------------------------------------------------- load test

const CLIENTS: usize = 32;
const HAMMER_FOR: Duration = Duration::from_secs(3);

#[derive(Default)]
struct Tally {
    statuses: BTreeMap<u16, usize>,
    wrong_bodies: Vec<String>,
}

backend_tests!(
    concurrent_writers_get_exactly_the_allowed_number,
    |srv| async move {
        let org = create_limited_org(&srv, "dev").await;
        let url = format!("{}/tasks", srv.base_url);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("http client");
        let barrier = Arc::new(tokio::sync::Barrier::new(CLIENTS + 1));
        let mut clients = tokio::task::JoinSet::new();
        for client in 0..CLIENTS {
            let http = http.clone();
            let url = url.clone();
            let key = org.owner_key.clone();
            let barrier = barrier.clone();
            clients.spawn(async move {
                let mut tally = Tally::default();
                let body = json!({ "tasks": [{ "title": format!("load from {client}") }] });
                barrier.wait().await;
                let deadline = Instant::now() + HAMMER_FOR;
                while Instant::now() < deadline {
                    let resp = http
                        .post(&url)
                        .header("x-api-key", &key)
                        .json(&body)
                        .send()
                        .await
                        .unwrap_or_else(|e| panic!("client {client}: transport error {e}"));
                    let status = resp.status();
                    let retry_after = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<u64>().ok());
                    // The client's timeout covers the body too.
                    let text = resp
                        .text()
                        .await
                        .unwrap_or_else(|e| panic!("client {client}: reading the body: {e}"));
                    *tally.statuses.entry(status.as_u16()).or_default() += 1;
                    if status == StatusCode::TOO_MANY_REQUESTS {
                        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                        if body != rate_limit_body("write", 30, "dev")
                            || !retry_after.is_some_and(|s| (1..=60).contains(&s))
                        {
                            tally
                                .wrong_bodies
                                .push(format!("Retry-After {retry_after:?}: {text}"));
                        }
                    }
                }
                tally
            });
        }
        let start = Instant::now();
        barrier.wait().await;
        let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
        let mut wrong_bodies = Vec::new();
        while let Some(joined) = clients.join_next().await {
            let tally = joined.expect("a client panicked");
            for (status, n) in tally.statuses {
                *statuses.entry(status).or_default() += n;
            }
            wrong_bodies.extend(tally.wrong_bodies);
        }
        let elapsed = start.elapsed().as_secs_f64();

        let created = statuses.get(&201).copied().unwrap_or(0);
        let refused = statuses.get(&429).copied().unwrap_or(0);
        assert_eq!(
            created + refused,
            statuses.values().sum::<usize>(),
            "only 201 and 429 expected: {statuses:?}"
        );
        assert!(
            wrong_bodies.is_empty(),
            "{} 429s with a wrong body or Retry-After, e.g. {:?}",
            wrong_bodies.len(),
            &wrong_bodies[..wrong_bodies.len().min(3)]
        );
        let allowed = DEV_WRITES as f64 + 0.5 * elapsed;
        assert!(
            (created as f64 - allowed).abs() <= 2.0,
            "{created} creates admitted in {elapsed:.2} s; the bucket allows {allowed:.1} (±2). {statuses:?}"
        );
        assert!(refused > 0, "nothing was refused: {statuses:?}");
        assert_eq!(
            srv.list_all(&org.owner_key, "").await.len(),
            created,
            "tasks written"
        );
    }
);

#[tokio::test]
async fn an_operator_can_make_new_orgs_start_without_rate_or_volume_limits() {
    let srv = TestServer::builder(Backend::Sqlite)
        .env("TASKQ_NEW_ORG_LIMITS", "unlimited")
        .start()
        .await;
    let org = create_limited_org(&srv, "dev").await;
    let limits = effective_limits(&srv, &org).await;
    for lifted in [
        "writes_per_minute",
        "reads_per_minute",
        "requests_per_month",
        "tasks_per_month",
    ] {
        assert!(limits[lifted].is_null(), "{lifted}: {limits}");
    }
    assert!(
        limits["tags"].is_number(),
        "the tier's counts stay: {limits}"
    );
    // Past the dev tier's 30 writes a minute, nothing is refused.
    for _ in 0..DEV_WRITES + 5 {
        let reply = Call::create_one().send(&srv, &org.owner_key).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.body);
    }
    // The operator's overrides still apply on top.
    srv.set_limits(&org, json!({ "writes_per_minute": 3 }))
        .await;
    assert_eq!(effective_limits(&srv, &org).await["writes_per_minute"], 3);
}

#[tokio::test]
async fn a_new_org_limits_setting_that_is_neither_is_refused_at_start() {
    let stderr = refused_at_start(&[("TASKQ_NEW_ORG_LIMITS", "none")]).await;
    assert!(
        stderr.contains("TASKQ_NEW_ORG_LIMITS") && stderr.contains("unlimited"),
        "{stderr}"
    );
}
