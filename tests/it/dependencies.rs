//! Blockers: unblocking on completion, cascades on failure and cancelation,
//! and blockers added by update.

use crate::common::*;

async fn assigned(srv: &TestServer, org: &Org, title: &str, blocked_by: &[&str]) -> String {
    srv.create_task(
        &org.owner_key,
        json!({ "title": title, "assignee": org.owner_email, "blocked_by": blocked_by }),
    )
    .await
}

async fn finish(srv: &TestServer, org: &Org, id: &str, status: &str) {
    srv.update_ok(
        &org.owner_key,
        json!({ "task_id": id, "status": status, "note": format!("{status} by test") }),
    )
    .await;
}

/// The last history event of a task.
async fn last_event(srv: &TestServer, org: &Org, id: &str) -> Value {
    let task = srv.get_task(&org.owner_key, id).await;
    history(&task)
        .last()
        .cloned()
        .expect("history is never empty")
}

backend_tests!(completing_the_last_blocker_unblocks, |srv| async move {
    let org = srv.create_org("dev").await;
    let a = assigned(&srv, &org, "a", &[]).await;
    let d = assigned(&srv, &org, "d", &[]).await;
    let b = assigned(&srv, &org, "b", &[&a]).await;
    let c = assigned(&srv, &org, "c", &[&a, &d]).await;
    assert_eq!(srv.status_of(&org.owner_key, &b).await, "blocked");
    assert_eq!(srv.status_of(&org.owner_key, &c).await, "blocked");

    finish(&srv, &org, &a, "completed").await;
    assert_eq!(srv.status_of(&org.owner_key, &b).await, "pending");
    let event = last_event(&srv, &org, &b).await;
    assert_eq!(event["from_status"], "blocked");
    assert_eq!(event["to_status"], "pending");
    assert_eq!(event["agent_id"], "system");
    assert_eq!(
        srv.status_of(&org.owner_key, &c).await,
        "blocked",
        "d is still live"
    );
    let task_c = srv.get_task(&org.owner_key, &c).await;
    let mut deps = task_c["dependencies"].as_array().unwrap().clone();
    deps.sort_by_key(|d| d["task_id"].as_str().unwrap().to_string());
    let mut expected = vec![
        json!({ "task_id": a, "status": "completed" }),
        json!({ "task_id": d, "status": "pending" }),
    ];
    expected.sort_by_key(|d| d["task_id"].as_str().unwrap().to_string());
    assert_eq!(deps, expected);

    finish(&srv, &org, &d, "completed").await;
    assert_eq!(srv.status_of(&org.owner_key, &c).await, "pending");

    // The unblocked task is claimable like any other.
    let claimed = srv
        .claim(&org.owner_key, json!({ "include_context": false }))
        .await;
    assert!(claimed.is_some());
});

backend_tests!(failure_cascades_transitively, |srv| async move {
    let org = srv.create_org("dev").await;
    let a = assigned(&srv, &org, "a", &[]).await;
    let b = assigned(&srv, &org, "b", &[&a]).await;
    let c = assigned(&srv, &org, "c", &[&b]).await;
    let unrelated = assigned(&srv, &org, "unrelated", &[]).await;
    let other_blocker = assigned(&srv, &org, "other blocker", &[]).await;
    let elsewhere = assigned(&srv, &org, "elsewhere", &[&other_blocker]).await;

    srv.update_ok(
        &org.owner_key,
        json!({ "task_id": a, "status": "in_progress" }),
    )
    .await;
    finish(&srv, &org, &a, "failed").await;

    for (id, blocker) in [(&b, &a), (&c, &b)] {
        let task = srv.get_task(&org.owner_key, id).await;
        assert_eq!(task["status"], "failed", "{task}");
        let event = history(&task).last().cloned().unwrap();
        assert_eq!(event["from_status"], "blocked", "{task}");
        assert_eq!(event["to_status"], "failed");
        assert_eq!(event["agent_id"], "system");
        let note = event["note"]
            .as_str()
            .unwrap_or_else(|| panic!("cascade note: {event}"));
        assert!(
            note.contains(blocker.as_str()) || note.contains(a.as_str()),
            "cascade note should name the blocker: {event}"
        );
    }
    assert_eq!(srv.status_of(&org.owner_key, &unrelated).await, "pending");
    assert_eq!(srv.status_of(&org.owner_key, &elsewhere).await, "blocked");
});

backend_tests!(cancelation_cascades_transitively, |srv| async move {
    let org = srv.create_org("dev").await;
    let a = assigned(&srv, &org, "a", &[]).await;
    let b = assigned(&srv, &org, "b", &[&a]).await;
    let c = assigned(&srv, &org, "c", &[&b]).await;
    let d = assigned(&srv, &org, "d", &[&c, &a]).await;

    finish(&srv, &org, &a, "canceled").await;
    for id in [&b, &c, &d] {
        assert_eq!(srv.status_of(&org.owner_key, id).await, "canceled");
        let event = last_event(&srv, &org, id).await;
        assert_eq!(event["from_status"], "blocked");
        assert_eq!(event["to_status"], "canceled");
        assert_eq!(event["agent_id"], "system");
    }
    // One cascade event per dependent, even when reached along two paths.
    let task_d = srv.get_task(&org.owner_key, &d).await;
    assert_eq!(history(&task_d).len(), 2, "{task_d}");
});

backend_tests!(
    cascaded_dependent_stays_failed_when_blocker_is_retried,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let a = assigned(&srv, &org, "a", &[]).await;
        let b = assigned(&srv, &org, "b", &[&a]).await;
        finish(&srv, &org, &a, "failed").await;
        assert_eq!(srv.status_of(&org.owner_key, &b).await, "failed");

        srv.update_ok(&org.owner_key, json!({ "task_id": a, "status": "pending" }))
            .await;
        assert_eq!(srv.status_of(&org.owner_key, &a).await, "pending");
        let task_b = srv.get_task(&org.owner_key, &b).await;
        assert_eq!(task_b["status"], "failed", "{task_b}");
        assert_eq!(history(&task_b).len(), 2, "{task_b}");

        // Completing the retried blocker does not resurrect it either.
        finish(&srv, &org, &a, "completed").await;
        assert_eq!(srv.status_of(&org.owner_key, &b).await, "failed");

        // It can be retried itself.
        let result = srv
            .update_ok(&org.owner_key, json!({ "task_id": b, "status": "pending" }))
            .await;
        assert_eq!(
            result["status"], "pending",
            "blocker completed, so retry lands in pending"
        );
    }
);

backend_tests!(adding_a_live_blocker_blocks, |srv| async move {
    let org = srv.create_org("dev").await;
    let blocker = assigned(&srv, &org, "blocker", &[]).await;
    let done = assigned(&srv, &org, "done", &[]).await;
    finish(&srv, &org, &done, "completed").await;
    let pending = assigned(&srv, &org, "pending one", &[]).await;
    let working = assigned(&srv, &org, "working one", &[]).await;
    srv.update_ok(
        &org.owner_key,
        json!({ "task_id": working, "status": "in_progress" }),
    )
    .await;

    // A completed blocker is not live.
    let result = srv
        .update_ok(
            &org.owner_key,
            json!({ "task_id": pending, "blocked_by": [done] }),
        )
        .await;
    assert_eq!(result["status"], "pending");

    for id in [&pending, &working] {
        let result = srv
            .update_ok(
                &org.owner_key,
                json!({ "task_id": id, "blocked_by": [done, blocker] }),
            )
            .await;
        assert_eq!(result["status"], "blocked", "{result}");
        let task = srv.get_task(&org.owner_key, id).await;
        assert_eq!(task["status"], "blocked");
        assert_eq!(
            history(&task).last().unwrap()["to_status"],
            "blocked",
            "{task}"
        );
    }

    finish(&srv, &org, &blocker, "completed").await;
    assert_eq!(srv.status_of(&org.owner_key, &pending).await, "pending");
    assert_eq!(srv.status_of(&org.owner_key, &working).await, "pending");
});
