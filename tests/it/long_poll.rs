//! Long-poll claims (`wait_seconds`): a claim that finds nothing waits for a
//! matching task to become pending (created, unblocked, lease expired,
//! retried), first come first served, and a waiter whose client went away
//! takes nothing with it.

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::task::JoinHandle;

/// A claim sent on its own connection; resolves to its answer.
fn claim_in_background(srv: &TestServer, key: &str, body: Value) -> JoinHandle<Value> {
    let url = format!("{}/tasks/claim", srv.base_url);
    let key = key.to_owned();
    tokio::spawn(async move {
        let resp = reqwest::Client::new()
            .post(url)
            .header("x-api-key", key)
            .json(&body)
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .expect("the claim is answered");
        assert_eq!(resp.status(), StatusCode::OK);
        resp.json().await.expect("a JSON answer")
    })
}

/// Claims waiting in the server, from `/metrics`.
async fn waiters(srv: &TestServer) -> u64 {
    srv.metric("taskq_claim_waiters")
        .await
        .expect("the waiters gauge")
}

async fn until_waiting(srv: &TestServer, n: u64) {
    eventually(
        Duration::from_secs(10),
        &format!("{n} claim(s) waiting"),
        || async { (waiters(srv).await == n).then_some(()) },
    )
    .await;
}

backend_tests!(wait_seconds_is_bounded, |srv| async move {
    let org = srv.create_org("dev").await;
    for bad in [json!(31), json!(-1), json!(2.5), json!("5"), json!(true)] {
        let (status, body) = srv
            .post(
                &org.owner_key,
                "/tasks/claim",
                json!({ "wait_seconds": bad }),
            )
            .await;
        assert_bad_request(status, &body, "wait_seconds");
    }
    // 0 is the default: an empty queue answers at once.
    let started = Instant::now();
    assert!(srv
        .claim(&org.owner_key, json!({ "wait_seconds": 0 }))
        .await
        .is_none());
    assert!(started.elapsed() < Duration::from_secs(1));
});

backend_tests!(
    an_empty_queue_answers_null_after_the_wait,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let started = Instant::now();
        let answer = srv
            .claim(&org.owner_key, json!({ "wait_seconds": 1 }))
            .await;
        let waited = started.elapsed();
        assert!(answer.is_none(), "{answer:?}");
        assert!(
            waited >= Duration::from_millis(950),
            "answered after {waited:?}"
        );
        assert!(waited < Duration::from_secs(5), "answered after {waited:?}");
        assert_eq!(waiters(&srv).await, 0);
    }
);

backend_tests!(a_created_task_goes_to_the_waiting_claim, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = org.owner_key.clone();
    let started = Instant::now();
    let claim = claim_in_background(&srv, &key, json!({ "wait_seconds": 20 }));
    until_waiting(&srv, 1).await;

    // The org is not held up by the waiting claim.
    let id = srv.new_task(&key, "arrives while an agent waits").await;
    let claimed = claim.await.expect("the claim task");
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_eq!(claimed["task_id"], id.as_str(), "{claimed}");
    assert_eq!(claimed["status"], "in_progress");
    assert!(claimed["lease_id"].is_string(), "{claimed}");
    assert_eq!(srv.status_of(&key, &id).await, "in_progress");
    assert_eq!(waiters(&srv).await, 0);

    // Its lease fences updates as for any claim.
    srv.update_ok(
        &key,
        json!({ "task_id": id, "lease_id": claimed["lease_id"], "status": "completed", "note": "done" }),
    )
    .await;
});

backend_tests!(waiters_are_served_in_arrival_order, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = org.owner_key.clone();
    let (_, second_key) = srv.new_key(&key, "second").await;
    let first = claim_in_background(&srv, &key, json!({ "wait_seconds": 20 }));
    until_waiting(&srv, 1).await;
    let second = claim_in_background(&srv, &second_key, json!({ "wait_seconds": 20 }));
    until_waiting(&srv, 2).await;

    let a = srv.new_task(&key, "first task").await;
    let got = first.await.expect("first claim");
    assert_eq!(
        got["task_id"],
        a.as_str(),
        "the earlier waiter first: {got}"
    );
    assert_eq!(got["assignee"], org.owner_key_name.as_str());
    until_waiting(&srv, 1).await;

    let b = srv.new_task(&key, "second task").await;
    let got = second.await.expect("second claim");
    assert_eq!(got["task_id"], b.as_str(), "{got}");
    assert_eq!(got["assignee"], "second");
});

backend_tests!(a_waiter_takes_only_what_its_tags_allow, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = org.owner_key.clone();
    let picky = claim_in_background(&srv, &key, json!({ "wait_seconds": 20, "tags": ["gpu"] }));
    until_waiting(&srv, 1).await;
    let any = claim_in_background(&srv, &key, json!({ "wait_seconds": 20 }));
    until_waiting(&srv, 2).await;

    // The earlier waiter wants gpu work: the cpu task passes it by.
    let cpu = srv
        .create_task(&key, json!({ "title": "cpu work", "tags": ["cpu"] }))
        .await;
    let got = any.await.expect("unfiltered claim");
    assert_eq!(got["task_id"], cpu.as_str(), "{got}");
    until_waiting(&srv, 1).await;

    let gpu = srv
        .create_task(&key, json!({ "title": "gpu work", "tags": ["gpu"] }))
        .await;
    let got = picky.await.expect("filtered claim");
    assert_eq!(got["task_id"], gpu.as_str(), "{got}");
});

backend_tests!(
    an_unblocked_or_expired_or_retried_task_wakes_a_waiter,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = org.owner_key.clone();

        // Unblocked: its blocker completes.
        let made = srv
            .create_tasks(
                &key,
                json!([
                    { "ref": "first", "title": "first step" },
                    { "title": "second step", "blocked_by": ["ref:first"] }
                ]),
            )
            .await;
        let (first, second) = (
            str_field(&made[0], "task_id"),
            str_field(&made[1], "task_id"),
        );
        let lease = srv.claim(&key, json!({})).await.expect("the first step");
        assert_eq!(lease["task_id"], first.as_str());
        let waiting = claim_in_background(&srv, &key, json!({ "wait_seconds": 20 }));
        until_waiting(&srv, 1).await;
        srv.update_ok(
            &key,
            json!({ "task_id": first, "status": "completed", "note": "done" }),
        )
        .await;
        let got = waiting.await.expect("claim");
        assert_eq!(got["task_id"], second.as_str(), "{got}");

        // Expired: a one-second lease runs out while another agent waits.
        let short = srv.new_task(&key, "short lease").await;
        let held = srv
            .claim(&key, json!({ "lease_seconds": 1 }))
            .await
            .expect("the short task");
        assert_eq!(held["task_id"], short.as_str());
        let waiting = claim_in_background(&srv, &key, json!({ "wait_seconds": 20 }));
        let got = waiting.await.expect("claim");
        assert_eq!(got["task_id"], short.as_str(), "{got}");
        assert_ne!(got["lease_id"], held["lease_id"]);

        // Retried: a failed task put back to pending.
        srv.update_ok(
            &key,
            json!({ "task_id": short, "status": "failed", "note": "broke" }),
        )
        .await;
        let waiting = claim_in_background(&srv, &key, json!({ "wait_seconds": 20 }));
        until_waiting(&srv, 1).await;
        srv.update_ok(&key, json!({ "task_id": short, "status": "pending" }))
            .await;
        let got = waiting.await.expect("claim");
        assert_eq!(got["task_id"], short.as_str(), "{got}");
    }
);

backend_tests!(a_waiter_that_went_away_takes_nothing, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = org.owner_key.clone();

    // A client sends a long poll, then hangs up.
    let addr = srv.base_url.trim_start_matches("http://").to_owned();
    let body = r#"{"wait_seconds": 30}"#;
    let mut socket = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let request = format!(
        "POST /tasks/claim HTTP/1.1\r\nhost: {addr}\r\nx-api-key: {key}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    socket
        .write_all(request.as_bytes())
        .await
        .expect("send the claim");
    until_waiting(&srv, 1).await;
    drop(socket);
    // The server notices the hang-up by itself: no other request is needed
    // for the waiter to leave the count.
    until_waiting(&srv, 0).await;

    // A live agent waits behind it.
    let live = claim_in_background(&srv, &key, json!({ "wait_seconds": 20 }));
    until_waiting(&srv, 1).await;

    let id = srv.new_task(&key, "for whoever is still there").await;
    let got = live.await.expect("the live claim");
    assert_eq!(got["task_id"], id.as_str(), "{got}");
    let task = srv.get_task(&key, &id).await;
    let claims: Vec<Value> = history(&task)
        .into_iter()
        .filter(|e| e["to_status"] == "in_progress")
        .collect();
    assert_eq!(claims.len(), 1, "claimed once, by the live agent: {task}");
    assert_eq!(waiters(&srv).await, 0);

    // With nobody waiting, the next task stays pending.
    let next = srv.new_task(&key, "nobody waits").await;
    assert_eq!(srv.status_of(&key, &next).await, "pending");
});

backend_tests!(
    stopping_the_server_answers_waiting_claims,
    |mut srv| async move {
        let org = srv.create_org("dev").await;
        let waiting = claim_in_background(&srv, &org.owner_key, json!({ "wait_seconds": 30 }));
        until_waiting(&srv, 1).await;
        let started = Instant::now();
        srv.stop().await;
        let answer = waiting.await.expect("the claim");
        assert!(answer.is_null(), "{answer}");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "shutdown waited {:?} for the long poll",
            started.elapsed()
        );
    }
);
