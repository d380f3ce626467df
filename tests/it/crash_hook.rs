//! An org actor that panics is restarted and serves the acknowledged state.
//! Needs the binary built with `--features test-hooks`.
#![cfg(feature = "test-hooks")]

use crate::common::*;
use reqwest::Method;
use std::time::Duration;

async fn crash(srv: &TestServer, org: &Org) {
    let (status, body) = srv
        .admin(
            Method::POST,
            &format!("/admin/orgs/{}/crash", org.org_id),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body, json!({ "crashed": true }));
}

backend_tests!(
    crashed_org_actor_recovers_with_acknowledged_state,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let bystander = srv.create_org("dev").await;
        let key = org.owner_key.clone();
        let results = srv
            .create_tasks(
                &key,
                json!([
                    { "title": "a", "priority": 1 },
                    { "title": "b", "priority": 2, "assignee": org.owner_email },
                    { "title": "c", "priority": 3 },
                ]),
            )
            .await;
        let [a, b, c] = [0, 1, 2].map(|i| str_field(&results[i], "task_id"));
        srv.update_ok(
            &key,
            json!({ "task_id": b, "status": "completed", "note": "n", "output": { "ok": true } }),
        )
        .await;
        let claimed = srv
            .claim(
                &key,
                json!({ "lease_seconds": 600, "include_context": false }),
            )
            .await
            .expect("a");
        assert_eq!(claimed["task_id"], a.as_str());
        let other_task = srv.new_task(&bystander.owner_key, "elsewhere").await;

        crash(&srv, &org).await;

        // Requests after the crash succeed (allowing for the restart to happen).
        eventually(
            Duration::from_secs(15),
            "the org to answer again",
            || async {
                let (status, _) = srv.get(&key, "/tasks").await;
                (status == StatusCode::OK).then_some(())
            },
        )
        .await;

        let t = srv.get_task(&key, &a).await;
        assert_eq!(t["status"], "in_progress");
        assert_eq!(ts(&t, "lease_expires_at"), ts(&claimed, "lease_expires_at"));
        let t = srv.get_task(&key, &b).await;
        assert_eq!(t["status"], "completed");
        assert_eq!(t["output"], json!({ "ok": true }));
        assert_eq!(history(&t).len(), 2);
        assert_eq!(srv.status_of(&key, &c).await, "pending");
        assert_eq!(srv.list_all(&key, "").await.len(), 3);

        // Leases and the queue carry on.
        let error = srv
            .update_item_error(
                &key,
                json!({ "task_id": a, "lease_id": new_uuid(), "title": "x" }),
            )
            .await;
        assert_eq!(error, "lease lost");
        srv.update_ok(
            &key,
            json!({ "task_id": a, "lease_id": claimed["lease_id"], "title": "a2" }),
        )
        .await;
        let next = srv.claim(&key, json!({})).await.expect("c");
        assert_eq!(next["task_id"], c.as_str());
        let d = srv.new_task(&key, "after the crash").await;
        assert_eq!(srv.get_task(&key, &d).await["title"], "after the crash");

        // The other org never noticed.
        assert_eq!(
            srv.get_task(&bystander.owner_key, &other_task).await["title"],
            "elsewhere"
        );
    }
);

backend_tests!(repeated_crashes_lose_nothing, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = org.owner_key.clone();
    let mut created = Vec::new();
    for round in 0..3 {
        created.push(srv.new_task(&key, &format!("round {round}")).await);
        crash(&srv, &org).await;
        // The very next request is served correctly.
        let id = created.last().unwrap().clone();
        let task = eventually(
            Duration::from_secs(15),
            "the org to answer again",
            || async {
                let (status, body) = srv
                    .post(&key, "/tasks/get", json!({ "task_ids": [id] }))
                    .await;
                (status == StatusCode::OK).then_some(body)
            },
        )
        .await;
        assert_eq!(
            task["count"], 1,
            "acknowledged task lost after crash: {task}"
        );
    }
    let listed = srv.list_ids(&key, "").await;
    assert_eq!(listed.len(), 3);
    for id in &created {
        assert!(listed.contains(id));
    }
});
