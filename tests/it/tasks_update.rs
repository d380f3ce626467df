//! POST /tasks/update: transitions, per-item failures, field semantics,
//! events, and POST /tasks/get shapes.

use crate::common::*;

const TERMINAL: [&str; 3] = ["completed", "failed", "canceled"];

/// A pending task that already has an assignee, so moves out of `pending`
/// are not refused for lack of one.
async fn assigned_task(srv: &TestServer, org: &Org, title: &str) -> String {
    srv.create_task(
        &org.owner_key,
        json!({ "title": title, "assignee": org.owner_email }),
    )
    .await
}

fn move_item(id: &str, status: &str) -> Value {
    if TERMINAL.contains(&status) {
        json!({ "task_id": id, "status": status, "note": format!("to {status}") })
    } else {
        json!({ "task_id": id, "status": status })
    }
}

async fn move_ok(srv: &TestServer, org: &Org, id: &str, status: &str) {
    let result = srv.update_ok(&org.owner_key, move_item(id, status)).await;
    assert_eq!(result["task_id"], id);
    assert_eq!(result["status"], status, "{result}");
    ts(&result, "updated_at");
}

async fn move_refused(srv: &TestServer, org: &Org, id: &str, to: &str) {
    let before = srv.get_task(&org.owner_key, id).await;
    let error = srv
        .update_item_error(&org.owner_key, move_item(id, to))
        .await;
    assert_eq!(
        error, "Invalid status transition",
        "{} -> {to}",
        before["status"]
    );
    let after = srv.get_task(&org.owner_key, id).await;
    assert_eq!(
        after["status"], before["status"],
        "refused move changed the status"
    );
    assert_eq!(
        history(&after).len(),
        history(&before).len(),
        "refused move wrote an event"
    );
}

backend_tests!(allowed_transitions, |srv| async move {
    let org = srv.create_org("dev").await;

    let id = assigned_task(&srv, &org, "walk").await;
    let path = [
        "paused",
        "in_progress",
        "feedback",
        "in_progress",
        "pending",
        "feedback",
        "paused",
        "pending",
        "in_progress",
        "paused",
        "feedback",
        "pending",
        "completed",
    ];
    for to in path {
        move_ok(&srv, &org, &id, to).await;
    }

    let retried = assigned_task(&srv, &org, "retry").await;
    move_ok(&srv, &org, &retried, "in_progress").await;
    move_ok(&srv, &org, &retried, "failed").await;
    move_ok(&srv, &org, &retried, "pending").await;

    let reopened = assigned_task(&srv, &org, "reopen").await;
    move_ok(&srv, &org, &reopened, "canceled").await;
    move_ok(&srv, &org, &reopened, "pending").await;

    for (i, to) in TERMINAL.iter().enumerate() {
        for from in ["paused", "feedback", "in_progress"] {
            let id = assigned_task(&srv, &org, &format!("{from}->{to} {i}")).await;
            move_ok(&srv, &org, &id, from).await;
            move_ok(&srv, &org, &id, to).await;
        }
        let id = assigned_task(&srv, &org, &format!("pending->{to}")).await;
        move_ok(&srv, &org, &id, to).await;
    }

    // The walk's history has one event per move, in order.
    let task = srv.get_task(&org.owner_key, &id).await;
    let events = history(&task);
    assert_eq!(events.len(), path.len() + 1, "{task}");
    let mut from = "pending".to_string();
    for (event, to) in events[1..].iter().zip(path) {
        assert_eq!(event["from_status"], from.as_str(), "{task}");
        assert_eq!(event["to_status"], to, "{task}");
        from = to.to_string();
    }
});

backend_tests!(refused_transitions, |srv| async move {
    let org = srv.create_org("dev").await;

    let done = assigned_task(&srv, &org, "done").await;
    move_ok(&srv, &org, &done, "completed").await;
    for to in [
        "pending",
        "in_progress",
        "paused",
        "feedback",
        "blocked",
        "failed",
        "canceled",
    ] {
        move_refused(&srv, &org, &done, to).await;
    }

    let failed = assigned_task(&srv, &org, "failed").await;
    move_ok(&srv, &org, &failed, "failed").await;
    for to in [
        "in_progress",
        "paused",
        "feedback",
        "completed",
        "canceled",
        "blocked",
    ] {
        move_refused(&srv, &org, &failed, to).await;
    }

    let canceled = assigned_task(&srv, &org, "canceled").await;
    move_ok(&srv, &org, &canceled, "canceled").await;
    for to in ["in_progress", "completed", "failed", "paused"] {
        move_refused(&srv, &org, &canceled, to).await;
    }

    // Nobody moves a task into `blocked` by status.
    let open = assigned_task(&srv, &org, "open").await;
    move_refused(&srv, &org, &open, "blocked").await;
    move_ok(&srv, &org, &open, "in_progress").await;
    move_refused(&srv, &org, &open, "blocked").await;
});

backend_tests!(
    blocked_task_moves_only_to_terminal_while_blocker_is_live,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let blocker = assigned_task(&srv, &org, "blocker").await;
        let make_blocked = |title: &'static str| {
            let srv = &srv;
            let org = &org;
            let blocker = blocker.clone();
            async move {
                srv.create_task(
                    &org.owner_key,
                    json!({ "title": title, "assignee": org.owner_email, "blocked_by": [blocker] }),
                )
                .await
            }
        };

        let dependent = make_blocked("dependent").await;
        assert_eq!(srv.status_of(&org.owner_key, &dependent).await, "blocked");
        for to in ["pending", "in_progress", "paused", "feedback", "completed"] {
            move_refused(&srv, &org, &dependent, to).await;
        }
        let canceled = make_blocked("to cancel").await;
        move_ok(&srv, &org, &canceled, "canceled").await;
        let failed = make_blocked("to fail").await;
        move_ok(&srv, &org, &failed, "failed").await;

        // Still blocked: the blocker is live until completed, not merely started.
        move_ok(&srv, &org, &blocker, "in_progress").await;
        assert_eq!(srv.status_of(&org.owner_key, &dependent).await, "blocked");
        move_refused(&srv, &org, &dependent, "pending").await;
    }
);

backend_tests!(note_is_required_for_terminal_statuses, |srv| async move {
    let org = srv.create_org("dev").await;
    let a = assigned_task(&srv, &org, "a").await;
    let b = assigned_task(&srv, &org, "b").await;

    for status in TERMINAL {
        let (code, body) = srv
            .update(
                &org.owner_key,
                json!([
                    { "task_id": a, "status": "in_progress", "title": "changed" },
                    { "task_id": b, "status": status },
                ]),
            )
            .await;
        assert_bad_request(code, &body, "note");
    }
    // Nothing of those calls was applied.
    let task_a = srv.get_task(&org.owner_key, &a).await;
    assert_eq!(task_a["status"], "pending");
    assert_eq!(task_a["title"], "a");
    assert_eq!(history(&task_a).len(), 1);
    assert_eq!(srv.status_of(&org.owner_key, &b).await, "pending");

    // Even when the task already has that status.
    move_ok(&srv, &org, &b, "completed").await;
    let (code, body) = srv
        .update(
            &org.owner_key,
            json!([{ "task_id": b, "status": "completed" }]),
        )
        .await;
    assert_bad_request(code, &body, "note");
});

backend_tests!(
    assignee_is_required_to_leave_holding_states,
    |srv| async move {
        let org = srv.create_org("dev").await;
        srv.add_member(&org, "erin@example.com", "user").await;
        let unassigned = srv.new_task(&org.owner_key, "nobody's").await;

        for item in [
            json!({ "task_id": unassigned, "status": "in_progress" }),
            json!({ "task_id": unassigned, "status": "canceled", "note": "not needed" }),
        ] {
            let error = srv.update_item_error(&org.owner_key, item).await;
            assert_eq!(error, "assignee required");
        }
        let task = srv.get_task(&org.owner_key, &unassigned).await;
        assert_eq!(task["status"], "pending");
        assert_eq!(history(&task).len(), 1);

        // Giving the assignee in the same item is enough.
        let result = srv
        .update_ok(
            &org.owner_key,
            json!({ "task_id": unassigned, "status": "in_progress", "assignee": "erin@example.com" }),
        )
        .await;
        assert_eq!(result["status"], "in_progress");
        let task = srv.get_task(&org.owner_key, &unassigned).await;
        assert_eq!(task["assignee"], "erin@example.com");

        // Batches where every item fails are still 207, with per-item errors.
        let x = srv.new_task(&org.owner_key, "x").await;
        let y = srv.new_task(&org.owner_key, "y").await;
        let (code, body) = srv
            .update(
                &org.owner_key,
                json!([
                    { "task_id": x, "status": "paused" },
                    { "task_id": y, "status": "feedback" },
                ]),
            )
            .await;
        assert_eq!(code, StatusCode::MULTI_STATUS, "{body}");
        assert_eq!(body["partial"], true);
        assert_eq!(body["updated"], 0);
        assert_eq!(
            body["results"][0],
            json!({ "task_id": x, "error": "assignee required" })
        );
        assert_eq!(
            body["results"][1],
            json!({ "task_id": y, "error": "assignee required" })
        );
    }
);

backend_tests!(
    batch_applies_items_in_order_and_keeps_earlier_ones,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let a = assigned_task(&srv, &org, "a").await;
        let done = assigned_task(&srv, &org, "done").await;
        move_ok(&srv, &org, &done, "completed").await;
        let c = assigned_task(&srv, &org, "c").await;
        let ghost = new_uuid();

        let (code, body) = srv
            .update(
                &org.owner_key,
                json!([
                    { "task_id": a, "status": "in_progress", "priority": 1 },
                    { "task_id": ghost, "title": "nobody" },
                    { "task_id": done, "status": "pending" },
                    { "task_id": c, "title": "c2" },
                ]),
            )
            .await;
        assert_eq!(code, StatusCode::MULTI_STATUS, "{body}");
        assert_eq!(body["partial"], true);
        assert_eq!(body["updated"], 2, "{body}");
        let results = body["results"].as_array().unwrap();
        assert_eq!(results.len(), 4);
        assert_eq!(results[0]["task_id"], a.as_str());
        assert_eq!(results[0]["status"], "in_progress");
        ts(&results[0], "updated_at");
        assert_eq!(
            results[1],
            json!({ "task_id": ghost, "error": "task not found" })
        );
        assert_eq!(
            results[2],
            json!({ "task_id": done, "error": "Invalid status transition" })
        );
        assert_eq!(results[3]["task_id"], c.as_str());
        assert!(results[3].get("error").is_none(), "{body}");

        let task_a = srv.get_task(&org.owner_key, &a).await;
        assert_eq!(task_a["status"], "in_progress");
        assert_eq!(task_a["priority"], 1);
        assert_eq!(srv.get_task(&org.owner_key, &c).await["title"], "c2");
        assert_eq!(srv.status_of(&org.owner_key, &done).await, "completed");
    }
);

backend_tests!(success_body_shape, |srv| async move {
    let org = srv.create_org("dev").await;
    let a = assigned_task(&srv, &org, "a").await;
    let b = assigned_task(&srv, &org, "b").await;
    let (code, body) = srv
        .update(
            &org.owner_key,
            json!([{ "task_id": a, "title": "a2" }, { "task_id": b, "status": "paused" }]),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["updated"], 2);
    assert!(
        body.get("partial").is_none() || body["partial"] == false,
        "{body}"
    );
    assert_eq!(body["results"][0]["task_id"], a.as_str());
    assert_eq!(body["results"][0]["status"], "pending");
    assert_eq!(body["results"][1]["task_id"], b.as_str());
    assert_eq!(body["results"][1]["status"], "paused");
});

backend_tests!(update_validation_is_upfront, |srv| async move {
    let org = srv.create_org("dev").await;
    let a = assigned_task(&srv, &org, "a").await;
    let cases = [
        (json!({ "task_id": a, "priority": 0 }), "priority"),
        (json!({ "task_id": a, "priority": 6 }), "priority"),
        (json!({ "task_id": a, "priority": "low" }), "priority"),
        (json!({ "task_id": a, "output": "done!" }), "output"),
        (json!({ "task_id": a, "metadata": "x" }), "metadata"),
        (json!({ "task_id": a, "metadata": [1] }), "metadata"),
        (json!({ "task_id": a, "title": 5 }), "title"),
        (json!({ "task_id": a, "tags": "one" }), "tags"),
        (json!({ "title": "no id" }), "task_id"),
    ];
    for (bad, field) in cases {
        let (code, body) = srv
            .update(
                &org.owner_key,
                json!([{ "task_id": a, "title": "first item" }, bad]),
            )
            .await;
        assert_bad_request(code, &body, field);
    }
    let (code, body) = srv.update(&org.owner_key, json!([])).await;
    assert_bad_request(code, &body, "updates");
    let many: Vec<Value> = (0..26)
        .map(|_| json!({ "task_id": a, "title": "x" }))
        .collect();
    let (code, body) = srv.update(&org.owner_key, json!(many)).await;
    assert_bad_request(code, &body, "updates");
    let (code, text) = srv
        .post_raw(&org.owner_key, "/tasks/update", "{\"updates\": [")
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{text}");

    let task = srv.get_task(&org.owner_key, &a).await;
    assert_eq!(task["title"], "a", "a refused call applied an item");
    assert_eq!(task["priority"], 3);
});

backend_tests!(same_status_is_not_a_transition, |srv| async move {
    let org = srv.create_org("dev").await;
    let id = assigned_task(&srv, &org, "same").await;
    let result = srv
        .update_ok(
            &org.owner_key,
            json!({ "task_id": id, "status": "pending", "title": "renamed", "priority": 2 }),
        )
        .await;
    assert_eq!(result["status"], "pending");
    let task = srv.get_task(&org.owner_key, &id).await;
    assert_eq!(task["title"], "renamed");
    assert_eq!(task["priority"], 2);
    assert_eq!(
        history(&task).len(),
        1,
        "same-status move wrote an event: {task}"
    );

    // Completed tasks too: no error, no event, fields apply.
    move_ok(&srv, &org, &id, "completed").await;
    srv.update_ok(
        &org.owner_key,
        json!({ "task_id": id, "status": "completed", "note": "again", "output": { "v": 2 } }),
    )
    .await;
    let task = srv.get_task(&org.owner_key, &id).await;
    assert_eq!(task["status"], "completed");
    assert_eq!(task["output"], json!({ "v": 2 }));
    assert_eq!(history(&task).len(), 2, "{task}");
});

backend_tests!(fields_without_status_write_no_event, |srv| async move {
    let org = srv.create_org("dev").await;
    srv.add_member(&org, "fay@example.com", "user").await;
    let id = srv
        .create_task(
            &org.owner_key,
            json!({ "title": "t", "tags": ["a", "b"], "metadata": { "keep": 1, "obj": { "x": 1 }, "swap": "old" } }),
        )
        .await;
    let before = srv.get_task(&org.owner_key, &id).await;

    srv.update_ok(
        &org.owner_key,
        json!({
            "task_id": id,
            "title": "t2",
            "description": "now described",
            "priority": 5,
            "assignee": "fay@example.com",
            "tags": ["c"],
            "metadata": { "obj": { "y": 2 }, "swap": "new", "added": true },
            "output": { "partial": "result" },
        }),
    )
    .await;
    let task = srv.get_task(&org.owner_key, &id).await;
    assert_eq!(task["status"], "pending");
    assert_eq!(task["title"], "t2");
    assert_eq!(task["description"], "now described");
    assert_eq!(task["priority"], 5);
    assert_eq!(task["assignee"], "fay@example.com");
    assert_eq!(task["tags"], json!(["c"]), "tags are replaced");
    assert_eq!(
        task["metadata"],
        json!({ "keep": 1, "obj": { "y": 2 }, "swap": "new", "added": true }),
        "metadata is shallow-merged"
    );
    assert_eq!(task["output"], json!({ "partial": "result" }));
    assert_eq!(history(&task).len(), 1, "no status, no event: {task}");
    assert!(ts(&task, "updated_at") >= ts(&before, "updated_at"));
    assert_eq!(task["created_at"], before["created_at"]);

    // Omitted tags stay; `[]` clears them.
    srv.update_ok(&org.owner_key, json!({ "task_id": id, "title": "t3" }))
        .await;
    assert_eq!(
        srv.get_task(&org.owner_key, &id).await["tags"],
        json!(["c"])
    );
    srv.update_ok(&org.owner_key, json!({ "task_id": id, "tags": [] }))
        .await;
    let task = srv.get_task(&org.owner_key, &id).await;
    assert_eq!(task["tags"], json!([]));
    assert_eq!(task["metadata"]["keep"], 1);
});

backend_tests!(events_record_each_transition, |srv| async move {
    let org = srv.create_org("dev").await;
    let id = assigned_task(&srv, &org, "evented").await;
    srv.update_ok(
        &org.owner_key,
        json!({ "task_id": id, "status": "in_progress", "agent_id": "agent-007", "note": "starting" }),
    )
    .await;
    srv.update_ok(
        &org.owner_key,
        json!({ "task_id": id, "title": "no event" }),
    )
    .await;
    srv.update_ok(
        &org.owner_key,
        json!({ "task_id": id, "status": "failed", "note": "disk full", "output": { "err": "ENOSPC" } }),
    )
    .await;
    srv.update_ok(
        &org.owner_key,
        json!({ "task_id": id, "status": "pending" }),
    )
    .await;

    let task = srv.get_task(&org.owner_key, &id).await;
    let events = history(&task);
    let summary: Vec<(Value, Value, Value)> = events
        .iter()
        .map(|e| {
            (
                e["from_status"].clone(),
                e["to_status"].clone(),
                e["agent_id"].clone(),
            )
        })
        .collect();
    let owner = json!(org.owner_key_name);
    assert_eq!(
        summary,
        vec![
            (Value::Null, json!("pending"), owner.clone()),
            (json!("pending"), json!("in_progress"), json!("agent-007")),
            (json!("in_progress"), json!("failed"), owner.clone()),
            (json!("failed"), json!("pending"), owner.clone()),
        ],
        "{task}"
    );
    assert_eq!(events[1]["note"], "starting");
    assert_eq!(events[2]["note"], "disk full");
    for pair in events.windows(2) {
        assert!(
            ts(&pair[0], "timestamp") <= ts(&pair[1], "timestamp"),
            "history not chronological"
        );
    }
});

backend_tests!(get_shapes_history_and_dependencies, |srv| async move {
    let org = srv.create_org("dev").await;
    let blocker = assigned_task(&srv, &org, "blocker").await;
    let dependent = srv
        .create_task(
            &org.owner_key,
            json!({ "title": "dependent", "blocked_by": [blocker] }),
        )
        .await;
    let ghost = new_uuid();

    let (code, body) = srv
        .post(
            &org.owner_key,
            "/tasks/get",
            json!({ "task_ids": [blocker, dependent, ghost] }),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["count"], 2);
    assert_eq!(body["not_found"], json!([ghost]));
    for task in body["tasks"].as_array().unwrap() {
        assert!(
            task.get("history").is_none(),
            "history on a multi-id get: {task}"
        );
        assert!(task["dependencies"].is_array(), "{task}");
    }

    let task = srv.get_task(&org.owner_key, &dependent).await;
    assert_eq!(
        task["dependencies"],
        json!([{ "task_id": blocker, "status": "pending" }])
    );
    assert!(task["history"].is_array());

    move_ok(&srv, &org, &blocker, "in_progress").await;
    let task = srv.get_task(&org.owner_key, &dependent).await;
    assert_eq!(
        task["dependencies"],
        json!([{ "task_id": blocker, "status": "in_progress" }])
    );

    // Batch limits and shape.
    let (code, body) = srv
        .post(&org.owner_key, "/tasks/get", json!({ "task_ids": [] }))
        .await;
    assert_bad_request(code, &body, "task_ids");
    let many: Vec<String> = (0..26).map(|_| new_uuid()).collect();
    let (code, body) = srv
        .post(&org.owner_key, "/tasks/get", json!({ "task_ids": many }))
        .await;
    assert_bad_request(code, &body, "task_ids");
    let (code, body) = srv
        .post(
            &org.owner_key,
            "/tasks/get",
            json!({ "task_ids": ["not-a-uuid"] }),
        )
        .await;
    assert_bad_request(code, &body, "task_ids");
    let (code, body) = srv
        .post(&org.owner_key, "/tasks/get", json!({ "task_ids": [ghost] }))
        .await;
    assert_eq!(code, StatusCode::OK, "unknown ids are not a 404: {body}");
    assert_eq!(body["count"], 0);
    assert_eq!(body["tasks"], json!([]));
});

backend_tests!(later_items_see_earlier_items_effects, |srv| async move {
    let org = srv.create_org("dev").await;
    let blocker = assigned_task(&srv, &org, "blocker").await;
    let dependent = srv
        .create_task(
            &org.owner_key,
            json!({ "title": "dependent", "assignee": org.owner_email, "blocked_by": [blocker] }),
        )
        .await;
    let twice = assigned_task(&srv, &org, "twice").await;

    let (code, body) = srv
        .update(
            &org.owner_key,
            json!([
                { "task_id": blocker, "status": "completed", "note": "unblocks" },
                { "task_id": dependent, "status": "in_progress" },
                { "task_id": twice, "status": "in_progress" },
                { "task_id": twice, "status": "completed", "note": "both steps" },
            ]),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["updated"], 4);

    let task = srv.get_task(&org.owner_key, &dependent).await;
    assert_eq!(task["status"], "in_progress");
    let moves: Vec<(Value, Value)> = history(&task)
        .iter()
        .map(|e| (e["to_status"].clone(), e["agent_id"].clone()))
        .collect();
    assert_eq!(
        moves,
        vec![
            (json!("blocked"), json!(org.owner_key_name)),
            (json!("pending"), json!("system")),
            (json!("in_progress"), json!(org.owner_key_name)),
        ]
    );
    let task = srv.get_task(&org.owner_key, &twice).await;
    assert_eq!(task["status"], "completed");
    assert_eq!(history(&task).len(), 3);
});
