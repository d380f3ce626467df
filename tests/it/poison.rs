//! The poison-task guard: a task whose lease runs out `max_attempts` times
//! is failed with the note `max attempts reached`, and its dependents
//! cascade as for any failure. The count shows on the task and survives a
//! restart; a retry starts it over. A lease that ran out while the org's
//! write limit refused its holder's renewals uses no attempt.

use std::time::Duration;

use crate::common::limits::create_org_with_limits;
use crate::common::*;
use serde_json::{json, Value};

/// Claims the task with a one-second lease and waits for the lease to run
/// out: to `pending` again, or `failed` on the last attempt.
async fn let_lease_expire(srv: &TestServer, key: &str, id: &str) -> Value {
    let claimed = srv
        .claim(key, json!({ "lease_seconds": 1, "include_context": false }))
        .await
        .expect("a pending task");
    assert_eq!(claimed["task_id"], id, "{claimed}");
    lease_ran_out(srv, key, id).await
}

/// The task once its lease has run out (it is no longer `in_progress`).
async fn lease_ran_out(srv: &TestServer, key: &str, id: &str) -> Value {
    eventually(Duration::from_secs(15), "the lease to run out", || async {
        let task = srv.get_task(key, id).await;
        (task["status"] != "in_progress").then_some(task)
    })
    .await
}

backend_tests!(max_attempts_is_validated_and_shown, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    for bad in [json!(0), json!(101), json!(-1), json!(2.5), json!("3")] {
        let (status, body) = srv
            .post(
                key,
                "/tasks",
                json!({ "tasks": [{ "title": "t", "max_attempts": bad }] }),
            )
            .await;
        assert_bad_request(status, &body, "max_attempts");
    }
    let plain = srv.new_task(key, "defaults").await;
    let task = srv.get_task(key, &plain).await;
    assert_eq!(task["attempts"], 0, "{task}");
    assert_eq!(task["max_attempts"], 5, "{task}");
    let custom = srv
        .create_task(key, json!({ "title": "custom", "max_attempts": 100 }))
        .await;
    assert_eq!(srv.get_task(key, &custom).await["max_attempts"], 100);
});

backend_tests!(
    the_last_expiry_fails_the_task_and_its_dependents,
    |mut srv| async move {
        let org = srv.create_org("dev").await;
        let key = org.owner_key.clone();
        let made = srv
            .create_tasks(
                &key,
                json!([
                    { "ref": "poison", "title": "crashes every agent", "max_attempts": 2 },
                    { "ref": "next", "title": "waits on it", "blocked_by": ["ref:poison"] },
                    { "title": "waits on the waiter", "blocked_by": ["ref:next"] }
                ]),
            )
            .await;
        let ids: Vec<String> = made.iter().map(|m| str_field(m, "task_id")).collect();

        // First expiry: back to pending, one attempt used; it survives a restart.
        let task = let_lease_expire(&srv, &key, &ids[0]).await;
        assert_eq!(task["status"], "pending", "{task}");
        assert_eq!(task["attempts"], 1, "{task}");
        assert_eq!(history(&task).last().unwrap()["note"], "lease expired");
        srv.restart().await;
        assert_eq!(srv.get_task(&key, &ids[0]).await["attempts"], 1);

        // Second expiry: the last attempt; failed, with the system's note.
        let task = let_lease_expire(&srv, &key, &ids[0]).await;
        assert_eq!(task["status"], "failed", "{task}");
        assert_eq!(task["attempts"], 2, "{task}");
        let last = history(&task).last().cloned().unwrap();
        assert_eq!(last["from_status"], "in_progress");
        assert_eq!(last["to_status"], "failed");
        assert_eq!(last["agent_id"], "system");
        assert_eq!(last["note"], "max attempts reached");
        assert!(
            task["assignee"].is_string(),
            "the last holder stays: {task}"
        );
        assert!(task.get("lease_expires_at").is_none(), "{task}");

        // Its dependents fail by cascade, transitively.
        for (dependent, blocker) in [(&ids[1], &ids[0]), (&ids[2], &ids[1])] {
            let t = srv.get_task(&key, dependent).await;
            assert_eq!(t["status"], "failed", "{t}");
            let note = history(&t).last().unwrap()["note"].clone();
            assert_eq!(note, format!("blocker {blocker} failed"), "{t}");
        }
        assert!(srv.claim(&key, json!({})).await.is_none(), "nothing left");

        // A retry starts the count over.
        srv.update_ok(&key, json!({ "task_id": ids[0], "status": "pending" }))
            .await;
        let task = srv.get_task(&key, &ids[0]).await;
        assert_eq!(task["status"], "pending");
        assert_eq!(task["attempts"], 0, "{task}");
        let task = let_lease_expire(&srv, &key, &ids[0]).await;
        assert_eq!(
            task["status"], "pending",
            "one attempt of two again: {task}"
        );
    }
);

backend_tests!(
    a_task_with_one_attempt_fails_on_its_first_expiry,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let id = srv
            .create_task(key, json!({ "title": "once only", "max_attempts": 1 }))
            .await;
        let task = let_lease_expire(&srv, key, &id).await;
        assert_eq!(task["status"], "failed", "{task}");
        assert_eq!(task["attempts"], 1);
        // A finished task keeps its count in lists too.
        let listed = srv.list_all(key, "status=failed&full=true").await;
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0]["attempts"], 1, "{}", listed[0]);
        assert_eq!(listed[0]["max_attempts"], 1);
    }
);

backend_tests!(
    an_expiry_while_the_write_limit_refused_its_renewal_uses_no_attempt,
    |srv| async move {
        // Three writes: the create, the claim and one renewal.
        let org = create_org_with_limits(&srv, "dev", json!({ "writes_per_minute": 3 })).await;
        let key = org.owner_key.clone();
        let id = srv
            .create_task(&key, json!({ "title": "one attempt", "max_attempts": 1 }))
            .await;
        let claimed = srv
            .claim(
                &key,
                json!({ "lease_seconds": 2, "include_context": false }),
            )
            .await
            .expect("the task");
        let renewal = json!({ "task_id": id, "lease_id": str_field(&claimed, "lease_id") });
        srv.update_ok(&key, renewal.clone()).await;
        let (status, body) = srv.update(&key, json!([renewal])).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert_eq!(body["limit_type"], "write", "{body}");

        // Its holder was alive and trying: back to pending, no attempt
        // used, where a lease that ran out on its own fails this task.
        let task = lease_ran_out(&srv, &key, &id).await;
        assert_eq!(task["status"], "pending", "{task}");
        assert_eq!(task["attempts"], 0, "{task}");
        assert_eq!(
            history(&task).last().unwrap()["note"],
            "lease expired while the org's write limit refused its renewals"
        );
    }
);
