//! Monthly allowances: the task quota, the request allowance, GET /quota,
//! their reset at the start of the next month, and restarts.

use crate::common::limits::*;
use crate::common::*;
use chrono::{DateTime, Utc};
use reqwest::Method;

/// GET /quota expecting 200.
async fn quota(srv: &TestServer, key: &str) -> Value {
    let reply = send(srv, Method::GET, key, "/quota", None).await;
    assert_eq!(reply.status, StatusCode::OK, "GET /quota: {}", reply.body);
    reply.body
}

/// Asserts GET /quota's fields; `resets_at` is compared as a time.
fn assert_quota(body: &Value, tier: &str, limit: Option<u64>, used: u64, resets_at: DateTime<Utc>) {
    assert_eq!(body["tier"], tier, "{body}");
    assert_eq!(body["limit"], json!(limit), "{body}");
    assert_eq!(body["used"], used, "{body}");
    assert_eq!(
        body["remaining"],
        json!(limit.map(|l| l.saturating_sub(used))),
        "{body}"
    );
    assert_eq!(ts(body, "resets_at"), resets_at, "{body}");
}

fn task_limit_body(limit: u64, tier: &str) -> Value {
    json!({ "error": "monthly task limit reached", "limit": limit, "tier": tier })
}

fn allowance_body(limit: u64, tier: &str) -> Value {
    json!({
        "error": "monthly request allowance reached",
        "limit_type": "monthly",
        "limit": limit,
        "tier": tier,
    })
}

backend_tests!(quota_reports_the_tiers_allowance, |srv| async move {
    let resets = first_of_next_month(Utc::now());
    for tier in ["free", "dev", "pro"] {
        let org = create_limited_org(&srv, tier).await;
        // Early access: 1,000 tasks a month on every tier.
        assert_quota(
            &quota(&srv, &org.owner_key).await,
            tier,
            Some(1000),
            0,
            resets,
        );
        srv.create_tasks(
            &org.owner_key,
            json!([{ "title": "one" }, { "title": "two" }]),
        )
        .await;
        assert_quota(
            &quota(&srv, &org.owner_key).await,
            tier,
            Some(1000),
            2,
            resets,
        );
    }
});

backend_tests!(monthly_task_quota_is_enforced, |srv| async move {
    let resets = first_of_next_month(Utc::now());
    let org = create_org_with_limits(&srv, "dev", json!({ "tasks_per_month": 5 })).await;
    let key = org.owner_key.clone();
    let member = srv.add_member(&org, "member@example.com", "user").await;
    assert_quota(&quota(&srv, &key).await, "dev", Some(5), 0, resets);

    srv.create_tasks(
        &key,
        json!([{ "title": "a" }, { "title": "b" }, { "title": "c" }]),
    )
    .await;
    assert_quota(&quota(&srv, &key).await, "dev", Some(5), 3, resets);

    // A batch that would exceed the quota writes nothing, not even what fits.
    let refused = Call::create_many(3).send(&srv, &key).await;
    assert_monthly_429(&refused, task_limit_body(5, "dev"), resets);
    assert_eq!(srv.list_all(&key, "").await.len(), 3);
    assert_quota(&quota(&srv, &key).await, "dev", Some(5), 3, resets);

    // The quota is the org's: another member's creates count against it.
    srv.create_tasks(&member, json!([{ "title": "d" }, { "title": "e" }]))
        .await;
    assert_quota(&quota(&srv, &member).await, "dev", Some(5), 5, resets);
    for k in [&key, &member] {
        let refused = Call::create_one().send(&srv, k).await;
        assert_monthly_429(&refused, task_limit_body(5, "dev"), resets);
    }
    let titles: Vec<String> = srv
        .list_all(&key, "")
        .await
        .iter()
        .map(|t| str_field(t, "title"))
        .collect();
    assert_eq!(titles.len(), 5, "{titles:?}");

    // Reads and updates of existing tasks are not creates.
    let id = srv.list_ids(&key, "").await[0].clone();
    srv.update_ok(&key, json!({ "task_id": id, "title": "renamed" }))
        .await;
    assert_quota(&quota(&srv, &key).await, "dev", Some(5), 5, resets);
    let other = create_org_with_limits(&srv, "dev", json!({ "tasks_per_month": 5 })).await;
    assert_quota(
        &quota(&srv, &other.owner_key).await,
        "dev",
        Some(5),
        0,
        resets,
    );
    srv.new_task(&other.owner_key, "another org's quota").await;
});

backend_tests!(monthly_request_allowance, |srv| async move {
    let resets = first_of_next_month(Utc::now());
    let org = create_org_with_limits(&srv, "dev", json!({ "requests_per_month": 10 })).await;
    let key = org.owner_key.clone();

    // A batch of 4 counts 4, every other request 1: 4 + 5 + 1 = 10.
    Call::create_many(4).ok(&srv, &key).await;
    for _ in 0..5 {
        Call::get("/tasks").ok(&srv, &key).await;
    }
    let body = Call::get("/quota").ok(&srv, &key).await;
    assert_quota(&body, "dev", Some(1000), 4, resets);

    // Reads and writes alike are refused now, and write nothing.
    let reply = Call::get("/tasks").send(&srv, &key).await;
    assert_monthly_429(&reply, allowance_body(10, "dev"), resets);
    let reply = Call::create_one().send(&srv, &key).await;
    assert_monthly_429(&reply, allowance_body(10, "dev"), resets);
    let reply = send(
        &srv,
        Method::POST,
        &key,
        "/keys",
        Some(&json!({ "name": "more" })),
    )
    .await;
    assert_monthly_429(&reply, allowance_body(10, "dev"), resets);

    // Lifting the allowance shows that nothing was written meanwhile.
    srv.set_limits(&org, json!({ "requests_per_month": null }))
        .await;
    assert_eq!(srv.list_all(&key, "").await.len(), 4);
    let (status, keys) = srv.get(&key, "/keys").await;
    assert_eq!(status, StatusCode::OK, "{keys}");
    assert_eq!(keys["keys"].as_array().unwrap().len(), 1, "{keys}");
});

backend_tests!(
    a_batch_that_does_not_fit_the_allowance_is_refused,
    |srv| async move {
        let resets = first_of_next_month(Utc::now());
        let org = create_org_with_limits(&srv, "dev", json!({ "requests_per_month": 10 })).await;
        let key = org.owner_key.clone();
        // A batch counts its items: 10 items use the whole allowance.
        Call::create_many(10).ok(&srv, &key).await;
        let reply = Call::get("/tasks").send(&srv, &key).await;
        assert_monthly_429(&reply, allowance_body(10, "dev"), resets);
    }
);

/// Stops the server (SIGKILL when `crash`, else SIGTERM) and starts it again
/// on the same database.
async fn restart(srv: &mut TestServer, crash: bool) {
    if crash {
        srv.kill9().await;
        srv.start_again().await;
    } else {
        srv.restart().await;
    }
}

/// Task and request usage is the same after every restart, each one right
/// after the requests it should remember.
async fn usage_survives_restarts(srv: &mut TestServer, crash: bool) {
    let resets = first_of_next_month(Utc::now());
    let org = create_org_with_limits(
        srv,
        "dev",
        json!({ "tasks_per_month": 5, "requests_per_month": 12 }),
    )
    .await;
    let key = org.owner_key.clone();

    Call::create_many(3).ok(srv, &key).await; // requests 3
    restart(srv, crash).await;
    assert_quota(&quota(srv, &key).await, "dev", Some(5), 3, resets); // 4

    Call::create_many(2).ok(srv, &key).await; // 6
    restart(srv, crash).await;
    assert_quota(&quota(srv, &key).await, "dev", Some(5), 5, resets); // 7
    for _ in 0..5 {
        Call::get("/tasks").ok(srv, &key).await; // 12
    }
    let reply = Call::get("/tasks").send(srv, &key).await;
    assert_monthly_429(&reply, allowance_body(12, "dev"), resets);

    restart(srv, crash).await;
    let reply = Call::get("/tasks").send(srv, &key).await;
    assert_monthly_429(&reply, allowance_body(12, "dev"), resets);
    srv.set_limits(&org, json!({ "requests_per_month": null }))
        .await;
    let refused = Call::create_one().send(srv, &key).await;
    assert_monthly_429(&refused, task_limit_body(5, "dev"), resets);
    assert_eq!(srv.list_all(&key, "").await.len(), 5);
}

backend_tests!(usage_survives_a_crash_restart, |mut srv| async move {
    usage_survives_restarts(&mut srv, true).await;
});

backend_tests!(usage_survives_a_graceful_restart, |mut srv| async move {
    usage_survives_restarts(&mut srv, false).await;
});

backend_tests!(null_task_limit_reads_as_unlimited, |srv| async move {
    let resets = first_of_next_month(Utc::now());
    let org = create_org_with_limits(&srv, "dev", json!({ "tasks_per_month": null })).await;
    let key = org.owner_key.clone();
    assert!(
        effective_limits(&srv, &org).await["tasks_per_month"].is_null(),
        "GET /admin/orgs shows the lifted limit"
    );
    let body = quota(&srv, &key).await;
    assert_quota(&body, "dev", None, 0, resets);
    assert!(
        body.get("limit").is_some() && body.get("remaining").is_some(),
        "limit and remaining are present as null: {body}"
    );

    for _ in 0..2 {
        let items: Vec<Value> = (0..25)
            .map(|i| json!({ "title": format!("t{i}") }))
            .collect();
        srv.create_tasks(&key, json!(items)).await;
    }
    assert_quota(&quota(&srv, &key).await, "dev", None, 50, resets);

    // Setting a limit below what was used leaves nothing remaining.
    srv.set_limits(&org, json!({ "tasks_per_month": 20 })).await;
    assert_quota(&quota(&srv, &key).await, "dev", Some(20), 50, resets);
    let refused = Call::create_one().send(&srv, &key).await;
    assert_monthly_429(&refused, task_limit_body(20, "dev"), resets);
});

#[cfg(feature = "test-hooks")]
backend_tests!(
    allowances_reset_on_the_first_of_the_month,
    |srv| async move {
        let org = create_org_with_limits(
            &srv,
            "dev",
            json!({ "tasks_per_month": 3, "requests_per_month": 8 }),
        )
        .await;
        let key = org.owner_key.clone();
        let now = advance_clock(&srv, 1).await;
        let resets = first_of_next_month(now);

        Call::create_many(3).ok(&srv, &key).await; // requests 3, tasks 3
        let refused = Call::create_one().send(&srv, &key).await;
        assert_monthly_429(&refused, task_limit_body(3, "dev"), resets);
        assert_quota(&quota(&srv, &key).await, "dev", Some(3), 3, resets); // 4
        for _ in 0..4 {
            Call::get("/tasks").ok(&srv, &key).await; // 8
        }
        let reply = Call::get("/tasks").send(&srv, &key).await;
        assert_monthly_429(&reply, allowance_body(8, "dev"), resets);

        // An hour before the boundary nothing has changed.
        let before = ((resets - now).num_seconds() - 3600).max(1);
        let now = advance_clock(&srv, before).await;
        assert!(now < resets, "{now} is already past {resets}");
        let reply = Call::get("/tasks").send(&srv, &key).await;
        assert_monthly_429(&reply, allowance_body(8, "dev"), resets);

        // Just past it, both allowances start again.
        let now = advance_clock(&srv, 3600 + 60).await;
        assert!(now > resets, "{now} is not past {resets}");
        let next = first_of_next_month(now);
        assert_quota(&quota(&srv, &key).await, "dev", Some(3), 0, next);
        srv.create_tasks(
            &key,
            json!([{ "title": "x" }, { "title": "y" }, { "title": "z" }]),
        )
        .await;
        assert_eq!(srv.list_all(&key, "").await.len(), 6);
        for _ in 0..3 {
            Call::get("/tasks?limit=1").ok(&srv, &key).await;
        }
        // 1 (quota) + 3 (create) + 1 (list) + 3 = 8 requests this month.
        let reply = Call::get("/tasks").send(&srv, &key).await;
        assert_monthly_429(&reply, allowance_body(8, "dev"), next);
        let refused = Call::create_one().send(&srv, &key).await;
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    }
);
