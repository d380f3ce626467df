//! Batch claims: `POST /tasks/claim` with `count` answers `{tasks: [...]}`,
//! each task claimed as by a single claim, with its own lease.

use std::time::Duration;

use crate::common::*;
use serde_json::{json, Value};

/// `POST /tasks/claim` with a body expecting 200; the `tasks` of the answer.
async fn claim_batch(srv: &TestServer, key: &str, body: Value) -> Vec<Value> {
    let (status, answer) = srv.post(key, "/tasks/claim", body).await;
    assert_eq!(status, StatusCode::OK, "batch claim: {answer}");
    let object = answer.as_object().expect("an object");
    assert_eq!(object.len(), 1, "only `tasks`: {answer}");
    answer["tasks"].as_array().expect("a tasks array").clone()
}

backend_tests!(
    batch_claims_in_claim_order_with_own_leases,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let agent = srv
            .add_member_named(&org, "worker@example.com", "user", "worker-1")
            .await;
        let items: Vec<Value> = [4, 1, 3, 1, 5, 2, 3]
            .iter()
            .enumerate()
            .map(|(i, p)| json!({ "title": format!("t{i}"), "priority": p }))
            .collect();
        let created = srv.create_tasks(key, json!(items)).await;
        let mut expected: Vec<_> = created
            .iter()
            .zip([4, 1, 3, 1, 5, 2, 3])
            .map(|(r, p)| (p, ts(r, "created_at"), str_field(r, "task_id")))
            .collect();
        expected.sort();
        let expected: Vec<String> = expected.into_iter().map(|(_, _, id)| id).collect();

        let body = json!({ "count": 3, "include_context": false, "lease_seconds": 600 });
        let first = claim_batch(&srv, &agent, body).await;
        assert_eq!(
            ids(&first),
            expected[..3],
            "the first three by priority then age"
        );
        let leases: std::collections::HashSet<String> =
            first.iter().map(|t| str_field(t, "lease_id")).collect();
        assert_eq!(leases.len(), 3, "each task has its own lease");
        for task in &first {
            assert_eq!(task["status"], "in_progress");
            assert_eq!(task["assignee"], "worker-1");
            assert!(task.get("context").is_none(), "no context asked: {task}");
            assert!(task["title"].is_string(), "the whole task: {task}");
            let stored = srv.get_task(key, &str_field(task, "task_id")).await;
            assert_eq!(stored["status"], "in_progress", "the claim is stored");
        }

        // Each lease fences its own task only.
        let [a, b] = [&first[0], &first[1]];
        let error = srv
            .update_item_error(
                &agent,
                json!({ "task_id": a["task_id"], "lease_id": b["lease_id"], "output": { "x": 1 } }),
            )
            .await;
        assert_eq!(error, "lease lost");
        for task in &first {
            srv.update_ok(
                &agent,
                json!({ "task_id": task["task_id"], "lease_id": task["lease_id"],
                    "status": "completed", "note": "done" }),
            )
            .await;
        }

        // More than are left: what is left, then an empty list.
        let rest = claim_batch(&srv, &agent, json!({ "count": 25 })).await;
        assert_eq!(ids(&rest), expected[3..]);
        assert!(
            rest.iter().all(|t| t.get("context").is_some()),
            "context by default, for each task"
        );
        assert!(claim_batch(&srv, &agent, json!({ "count": 5 }))
            .await
            .is_empty());
        // Without `count` the answer keeps its single form.
        assert!(srv.claim(&agent, json!({})).await.is_none());
    }
);

backend_tests!(count_is_bounded, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    srv.new_task(key, "only one").await;
    for bad in [
        json!(0),
        json!(26),
        json!(-1),
        json!(2.5),
        json!("2"),
        json!(true),
    ] {
        let (status, body) = srv.post(key, "/tasks/claim", json!({ "count": bad })).await;
        assert_bad_request(status, &body, "count");
    }
    assert_eq!(
        srv.status_of(key, &srv.list_ids(key, "").await[0]).await,
        "pending",
        "a refused batch claims nothing"
    );
    // `count: 1` is a batch of one.
    let one = claim_batch(&srv, key, json!({ "count": 1 })).await;
    assert_eq!(one.len(), 1);
    assert_eq!(one[0]["title"], "only one");
});

backend_tests!(batch_respects_the_tag_filter, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let created = srv
        .create_tasks(
            key,
            json!([
                { "title": "red 1", "tags": ["red"] },
                { "title": "plain", "priority": 1 },
                { "title": "red 2", "tags": ["red"] },
            ]),
        )
        .await;
    let red = claim_batch(&srv, key, json!({ "count": 10, "tags": ["red"] })).await;
    assert_eq!(
        ids(&red),
        vec![
            str_field(&created[0], "task_id"),
            str_field(&created[2], "task_id")
        ]
    );
    assert_eq!(
        srv.status_of(key, &str_field(&created[1], "task_id")).await,
        "pending"
    );
});

backend_tests!(batch_long_poll_takes_what_arrives, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = org.owner_key.clone();
    let url = format!("{}/tasks/claim", srv.base_url);
    let waiting = tokio::spawn({
        let key = key.clone();
        async move {
            let resp = reqwest::Client::new()
                .post(url)
                .header("x-api-key", key)
                .json(&json!({ "count": 5, "wait_seconds": 20, "include_context": false }))
                .timeout(Duration::from_secs(60))
                .send()
                .await
                .expect("the claim is answered");
            assert_eq!(resp.status(), StatusCode::OK);
            resp.json::<Value>().await.expect("a JSON answer")
        }
    });
    eventually(Duration::from_secs(10), "the batch claim waits", || async {
        (srv.metric("taskq_claim_waiters").await == Some(1)).then_some(())
    })
    .await;
    let created = srv
        .create_tasks(&key, json!([{ "title": "one" }, { "title": "two" }]))
        .await;
    let answer = waiting.await.expect("the waiter");
    let tasks = answer["tasks"].as_array().expect("tasks").clone();
    assert_eq!(ids(&tasks), ids(&created), "both tasks, in claim order");
    assert!(tasks.iter().all(|t| t["status"] == "in_progress"));

    // A batch long poll that finds nothing answers an empty list.
    let empty = claim_batch(&srv, &key, json!({ "count": 3, "wait_seconds": 1 })).await;
    assert!(empty.is_empty());
});
