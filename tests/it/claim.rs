//! POST /tasks/claim: order, filters, leases, context, expiry and fencing.

use crate::common::*;
use reqwest::Method;
use std::time::Duration;

const EXPIRY_TIMEOUT: Duration = Duration::from_secs(20);

/// Polls until the task is back in `pending`; returns it (single-id get).
async fn wait_until_pending(srv: &TestServer, key: &str, id: &str) -> Value {
    eventually(
        EXPIRY_TIMEOUT,
        "the expired lease returns the task to pending",
        || async {
            let task = srv.get_task(key, id).await;
            (task["status"] == "pending").then_some(task)
        },
    )
    .await
}

backend_tests!(empty_queue_answers_null, |srv| async move {
    let org = srv.create_org("dev").await;
    let (status, text) = srv.post_raw(&org.owner_key, "/tasks/claim", "{}").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(text.trim(), "null");

    // Only pending tasks are claimable.
    let blocker = srv
        .create_task(
            &org.owner_key,
            json!({ "title": "b", "assignee": org.owner_email }),
        )
        .await;
    srv.update_ok(
        &org.owner_key,
        json!({ "task_id": blocker, "status": "paused" }),
    )
    .await;
    srv.create_task(
        &org.owner_key,
        json!({ "title": "blocked", "blocked_by": [blocker] }),
    )
    .await;
    let (status, text) = srv.post_raw(&org.owner_key, "/tasks/claim", "{}").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(
        text.trim(),
        "null",
        "paused and blocked tasks are not claimable"
    );
});

backend_tests!(claims_by_priority_then_age, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let mut expected = Vec::new();
    for priorities in [vec![3, 1], vec![5, 1, 2], vec![3], vec![2, 4]] {
        let items: Vec<Value> = priorities
            .iter()
            .map(|p| json!({ "title": format!("p{p}"), "priority": p }))
            .collect();
        for (r, p) in srv
            .create_tasks(key, json!(items))
            .await
            .iter()
            .zip(&priorities)
        {
            expected.push((*p, ts(r, "created_at"), str_field(r, "task_id")));
        }
    }
    expected.sort();

    let mut claimed = Vec::new();
    while let Some(task) = srv.claim(key, json!({ "include_context": false })).await {
        claimed.push(str_field(&task, "task_id"));
        assert!(
            claimed.len() <= expected.len(),
            "claimed more tasks than exist"
        );
    }
    let expected: Vec<String> = expected.into_iter().map(|(_, _, id)| id).collect();
    assert_eq!(claimed, expected);
});

backend_tests!(tags_filter_matches_any, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let results = srv
        .create_tasks(
            key,
            json!([
                { "title": "untagged urgent", "priority": 1 },
                { "title": "red", "tags": ["red"] },
                { "title": "blue", "tags": ["blue"] },
                { "title": "red+green", "tags": ["red", "green"] },
            ]),
        )
        .await;
    let [untagged, red, blue, red_green] = [0, 1, 2, 3].map(|i| str_field(&results[i], "task_id"));

    let filter = json!({ "tags": ["green", "blue"], "include_context": false });
    let mut got = vec![
        str_field(
            &srv.claim(key, filter.clone()).await.expect("first match"),
            "task_id",
        ),
        str_field(
            &srv.claim(key, filter.clone()).await.expect("second match"),
            "task_id",
        ),
    ];
    got.sort();
    let mut want = vec![blue, red_green];
    want.sort();
    assert_eq!(got, want);
    assert!(
        srv.claim(key, filter).await.is_none(),
        "only tagged matches"
    );

    let task = srv
        .claim(key, json!({ "tags": ["red"] }))
        .await
        .expect("red");
    assert_eq!(task["task_id"], red.as_str());
    let task = srv.claim(key, json!({})).await.expect("untagged");
    assert_eq!(task["task_id"], untagged.as_str());
    assert!(srv.claim(key, json!({})).await.is_none());
});

backend_tests!(claimed_task_carries_assignee_and_lease, |srv| async move {
    let org = srv.create_org("dev").await;
    let agent = srv
        .add_member_named(&org, "ops@example.com", "user", "agent-1")
        .await;
    let id = srv
        .create_task(
            &org.owner_key,
            json!({ "title": "work", "description": "d", "metadata": { "k": "v" } }),
        )
        .await;

    let before = chrono::Utc::now();
    let task = srv
        .claim(&agent, json!({ "lease_seconds": 600 }))
        .await
        .expect("a task");
    let after = chrono::Utc::now();
    assert_eq!(task["task_id"], id.as_str());
    assert_eq!(task["status"], "in_progress");
    assert_eq!(task["assignee"], "agent-1", "assignee is the key's name");
    assert_eq!(task["title"], "work");
    assert_eq!(task["description"], "d");
    assert_eq!(task["metadata"], json!({ "k": "v" }));
    assert!(
        is_canonical_uuid(task["lease_id"].as_str().unwrap_or("")),
        "{task}"
    );
    assert_eq!(task["lease_seconds"], 600);
    let expires = ts(&task, "lease_expires_at");
    let slack = chrono::Duration::seconds(2);
    assert!(
        expires >= before + chrono::Duration::seconds(600) - slack
            && expires <= after + chrono::Duration::seconds(600) + slack,
        "lease_expires_at {expires} not about 600 s from now"
    );

    let stored = srv.get_task(&org.owner_key, &id).await;
    assert_eq!(stored["status"], "in_progress");
    assert_eq!(stored["assignee"], "agent-1");
    assert_eq!(ts(&stored, "lease_expires_at"), expires);
    assert_eq!(stored["lease_seconds"], 600);
    let event = history(&stored).last().cloned().unwrap();
    assert_eq!(event["from_status"], "pending");
    assert_eq!(event["to_status"], "in_progress");
    assert_eq!(event["agent_id"], "agent-1");

    // Keys made with POST /keys lend their name too; the default lease is 4 h.
    let (_, worker) = srv.new_key(&org.owner_key, "worker-x").await;
    srv.new_task(&org.owner_key, "more work").await;
    let task = srv.claim(&worker, json!({})).await.expect("a task");
    assert_eq!(task["assignee"], "worker-x");
    assert_eq!(task["lease_seconds"], 14400);
    let until = ts(&task, "lease_expires_at") - chrono::Utc::now();
    assert!(
        until > chrono::Duration::seconds(14400 - 30) && until <= chrono::Duration::seconds(14400)
    );
    assert_ne!(task["lease_id"], json!(null));
});

backend_tests!(lease_seconds_bounds, |srv| async move {
    let org = srv.create_org("dev").await;
    let id = srv.new_task(&org.owner_key, "only").await;
    for bad in [json!(0), json!(259201), json!(-5), json!("60"), json!(1.5)] {
        let (status, body) = srv
            .post(
                &org.owner_key,
                "/tasks/claim",
                json!({ "lease_seconds": bad }),
            )
            .await;
        assert_bad_request(status, &body, "lease_seconds");
    }
    let (status, body) = srv
        .post(
            &org.owner_key,
            "/tasks/claim",
            json!({ "include_context": "yes" }),
        )
        .await;
    assert_bad_request(status, &body, "include_context");
    assert_eq!(
        srv.status_of(&org.owner_key, &id).await,
        "pending",
        "a refused claim claimed"
    );

    let task = srv
        .claim(&org.owner_key, json!({ "lease_seconds": 259200 }))
        .await
        .expect("the task");
    assert_eq!(task["lease_seconds"], 259200);
    let until = ts(&task, "lease_expires_at") - chrono::Utc::now();
    assert!(until > chrono::Duration::hours(71), "{task}");
});

backend_tests!(context_holds_parent_chain_and_blockers, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let mut parent: Option<String> = None;
    let mut chain = Vec::new();
    for level in ["g3", "g2", "g1", "p"] {
        let mut item = json!({ "title": format!("ancestor {level}"), "description": format!("about {level}"), "priority": 5 });
        if let Some(p) = &parent {
            item["parent_task_id"] = json!(p);
        }
        let id = srv.create_task(key, item).await;
        chain.push(id.clone());
        parent = Some(id);
    }
    let blocker = srv
        .create_task(
            key,
            json!({ "title": "research", "assignee": org.owner_email, "priority": 5 }),
        )
        .await;
    srv.update_ok(
        key,
        json!({ "task_id": blocker, "status": "completed", "note": "found it", "output": { "answer": 42 } }),
    )
    .await;
    let target = srv
        .create_task(
            key,
            json!({ "title": "target", "priority": 1, "parent_task_id": parent, "blocked_by": [blocker] }),
        )
        .await;

    let task = srv
        .claim(key, json!({ "lease_seconds": 60 }))
        .await
        .expect("target");
    assert_eq!(task["task_id"], target.as_str());
    let context = &task["context"];
    let parents = context["parent_chain"]
        .as_array()
        .unwrap_or_else(|| panic!("{task}"));
    let parent_ids: Vec<String> = ids(parents);
    let expected: Vec<String> = chain.iter().rev().take(3).cloned().collect();
    assert_eq!(
        parent_ids, expected,
        "direct parent first, at most 3: {context}"
    );
    assert_eq!(parents[0]["title"], "ancestor p");
    assert_eq!(parents[0]["description"], "about p");
    assert_eq!(parents[2]["title"], "ancestor g2");
    assert_eq!(parents[0]["status"], "pending");

    let blockers = context["blockers"]
        .as_array()
        .unwrap_or_else(|| panic!("{task}"));
    assert_eq!(blockers.len(), 1, "{context}");
    assert_eq!(blockers[0]["task_id"], blocker.as_str());
    assert_eq!(blockers[0]["title"], "research");
    assert_eq!(blockers[0]["status"], "completed");
    assert_eq!(blockers[0]["output"], json!({ "answer": 42 }));

    // Without context the key is absent altogether.
    let next = srv
        .claim(key, json!({ "include_context": false }))
        .await
        .expect("an ancestor");
    assert!(next.get("context").is_none(), "{next}");
    let another = srv.claim(key, json!({})).await.expect("an ancestor");
    assert!(
        another["context"].is_object(),
        "context is on by default: {another}"
    );
});

backend_tests!(expired_lease_returns_task_to_pending, |srv| async move {
    let org = srv.create_org("dev").await;
    let id = srv.new_task(&org.owner_key, "short lease").await;
    let claimed = srv
        .claim(
            &org.owner_key,
            json!({ "lease_seconds": 1, "include_context": false }),
        )
        .await
        .expect("the task");
    assert_eq!(claimed["status"], "in_progress");

    let task = wait_until_pending(&srv, &org.owner_key, &id).await;
    assert!(task["assignee"].is_null(), "assignee cleared: {task}");
    assert!(
        task.get("lease_expires_at").is_none_or(|v| v.is_null()),
        "{task}"
    );
    let event = history(&task).last().cloned().unwrap();
    assert_eq!(event["from_status"], "in_progress");
    assert_eq!(event["to_status"], "pending");
    assert_eq!(event["agent_id"], "system");
    assert_eq!(event["note"], "lease expired");
    assert_eq!(history(&task).len(), 3, "create, claim, expiry: {task}");

    // It is claimable again.
    let again = srv.claim(&org.owner_key, json!({})).await.expect("reclaim");
    assert_eq!(again["task_id"], id.as_str());
    assert_ne!(again["lease_id"], claimed["lease_id"]);
});

backend_tests!(stale_lease_id_is_fenced, |srv| async move {
    let org = srv.create_org("dev").await;
    let slow = srv
        .add_member_named(&org, "slow@example.com", "user", "slow-agent")
        .await;
    let fast = srv
        .add_member_named(&org, "fast@example.com", "user", "fast-agent")
        .await;
    let id = srv.new_task(&org.owner_key, "contested").await;

    let first = srv
        .claim(
            &slow,
            json!({ "lease_seconds": 1, "include_context": false }),
        )
        .await
        .expect("the task");
    let stale = str_field(&first, "lease_id");
    wait_until_pending(&srv, &org.owner_key, &id).await;

    // Expired and not yet reclaimed: the lease is gone.
    let error = srv
        .update_item_error(
            &slow,
            json!({ "task_id": id, "lease_id": stale, "output": { "late": true } }),
        )
        .await;
    assert_eq!(error, "lease lost");

    let second = srv
        .claim(
            &fast,
            json!({ "lease_seconds": 600, "include_context": false }),
        )
        .await
        .expect("reclaimed");
    assert_eq!(second["task_id"], id.as_str());
    let current = str_field(&second, "lease_id");
    assert_ne!(current, stale, "every claim gets a new lease_id");
    let before = srv.get_task(&org.owner_key, &id).await;

    let error = srv
        .update_item_error(
            &slow,
            json!({ "task_id": id, "lease_id": stale, "status": "completed", "note": "done (not really)", "output": { "by": "slow" } }),
        )
        .await;
    assert_eq!(error, "lease lost");
    // The lease is checked before the item's fields: without the note a
    // completion needs, a stale lease still answers that the lease is lost.
    let error = srv
        .update_item_error(
            &slow,
            json!({ "task_id": id, "lease_id": stale, "status": "completed" }),
        )
        .await;
    assert_eq!(error, "lease lost");
    // A task that does not exist is not found, with or without the note.
    let unknown = uuid::Uuid::now_v7().to_string();
    let error = srv
        .update_item_error(
            &slow,
            json!({ "task_id": unknown, "lease_id": stale, "status": "completed" }),
        )
        .await;
    assert_eq!(error, "task not found");
    let after = srv.get_task(&org.owner_key, &id).await;
    assert_eq!(after, before, "a fenced update changed the task");
    let (status, body) = srv
        .post(
            &fast,
            "/tasks/update",
            json!({ "updates": [{ "task_id": id, "lease_id": current, "status": "completed" }] }),
        )
        .await;
    assert_bad_request(status, &body, "updates[0].note");
    assert_eq!(after["assignee"], "fast-agent");

    // The current holder's lease id works; items without one keep SPEC behaviour.
    srv.update_ok(
        &fast,
        json!({ "task_id": id, "lease_id": current, "output": { "by": "fast" } }),
    )
    .await;
    srv.update_ok(
        &org.owner_key,
        json!({ "task_id": id, "metadata": { "seen": true } }),
    )
    .await;
    srv.update_ok(
        &fast,
        json!({ "task_id": id, "lease_id": current, "status": "completed", "note": "done" }),
    )
    .await;
    let done = srv.get_task(&org.owner_key, &id).await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"], json!({ "by": "fast" }));

    // A completed task holds no lease any more.
    let error = srv
        .update_item_error(
            &fast,
            json!({ "task_id": id, "lease_id": current, "title": "x" }),
        )
        .await;
    assert_eq!(error, "lease lost");
});

backend_tests!(
    update_renews_the_lease_without_shortening_it,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let id = srv.new_task(&org.owner_key, "long haul").await;
        let task = srv
            .claim(
                &org.owner_key,
                json!({ "lease_seconds": 30, "include_context": false }),
            )
            .await
            .expect("the task");
        let initial = ts(&task, "lease_expires_at");

        // Let time pass so that now + lease_seconds moves past the current expiry.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        srv.update_ok(
            &org.owner_key,
            json!({ "task_id": id, "metadata": { "progress": 50 } }),
        )
        .await;
        let renewed = srv.get_task(&org.owner_key, &id).await;
        let renewed_at = ts(&renewed, "lease_expires_at");
        assert!(
            renewed_at >= initial + chrono::Duration::milliseconds(1000),
            "lease not renewed: {initial} -> {renewed_at}"
        );
        assert_eq!(renewed["lease_seconds"], 30);
        assert_eq!(renewed["status"], "in_progress");

        // An update right away must not move the expiry backwards.
        srv.update_ok(&org.owner_key, json!({ "task_id": id, "priority": 2 }))
            .await;
        let again = srv.get_task(&org.owner_key, &id).await;
        assert!(
            ts(&again, "lease_expires_at") >= renewed_at,
            "lease shortened"
        );
    }
);

/// Sleeps until `deadline` (wall clock) has passed.
async fn sleep_until(deadline: chrono::DateTime<chrono::Utc>) {
    let left = (deadline - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(left).await;
}

backend_tests!(finished_or_released_work_never_expires, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let results = srv
        .create_tasks(
            key,
            json!([{ "title": "quick", "priority": 1 }, { "title": "handed back", "priority": 2 }]),
        )
        .await;
    let [done, released] = [0, 1].map(|i| str_field(&results[i], "task_id"));
    let lease = json!({ "lease_seconds": 1, "include_context": false });
    let first = srv.claim(key, lease.clone()).await.expect("quick");
    let second = srv.claim(key, lease).await.expect("handed back");
    assert_eq!(first["task_id"], done.as_str());
    assert_eq!(second["task_id"], released.as_str());
    srv.update_ok(
        key,
        json!({ "task_id": done, "lease_id": first["lease_id"], "status": "completed", "note": "fast" }),
    )
    .await;
    srv.update_ok(
        key,
        json!({ "task_id": released, "lease_id": second["lease_id"], "status": "pending" }),
    )
    .await;
    let error = srv
        .update_item_error(
            key,
            json!({ "task_id": released, "lease_id": second["lease_id"], "title": "x" }),
        )
        .await;
    assert_eq!(error, "lease lost", "a released lease still fences");

    // Well past the old leases' end, nothing has touched either task.
    sleep_until(ts(&second, "lease_expires_at") + chrono::Duration::milliseconds(1500)).await;
    let task = srv.get_task(key, &done).await;
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(task["assignee"], org.owner_key_name.as_str());
    assert_eq!(history(&task).len(), 3, "create, claim, complete: {task}");
    let task = srv.get_task(key, &released).await;
    assert_eq!(task["status"], "pending", "{task}");
    assert!(
        task.get("lease_expires_at").is_none_or(Value::is_null),
        "{task}"
    );
    assert_eq!(history(&task).len(), 3, "create, claim, release: {task}");
});

backend_tests!(
    renewed_lease_outlives_its_first_deadline,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let id = srv.new_task(&org.owner_key, "renewed").await;
        let claimed = srv
            .claim(
                &org.owner_key,
                json!({ "lease_seconds": 6, "include_context": false }),
            )
            .await
            .expect("the task");
        let first_deadline = ts(&claimed, "lease_expires_at");

        // Halfway through, an update renews the lease to about now + 6 s.
        sleep_until(first_deadline - chrono::Duration::seconds(3)).await;
        srv.update_ok(
            &org.owner_key,
            json!({ "task_id": id, "metadata": { "beat": 1 } }),
        )
        .await;
        let renewed = ts(&srv.get_task(&org.owner_key, &id).await, "lease_expires_at");
        assert!(
            renewed >= first_deadline + chrono::Duration::seconds(2),
            "{first_deadline} -> {renewed}"
        );

        // Past the first deadline, before the renewed one: still leased.
        sleep_until(first_deadline + chrono::Duration::milliseconds(1500)).await;
        assert!(
            chrono::Utc::now() < renewed,
            "test ran too slowly to check anything"
        );
        assert_eq!(srv.status_of(&org.owner_key, &id).await, "in_progress");

        // And the renewed lease does run out.
        let task = wait_until_pending(&srv, &org.owner_key, &id).await;
        assert_eq!(history(&task).last().unwrap()["note"], "lease expired");
    }
);

backend_tests!(claims_answer_content_as_last_changed, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let created = srv
        .create_tasks(
            key,
            json!([
                { "title": "reworded", "description": "old words", "metadata": { "v": 1 } },
                { "title": "untouched", "description": "kept words", "metadata": { "v": 1 } },
                { "title": "released", "description": "first words" },
                { "title": "canceled", "assignee": org.owner_email },
            ]),
        )
        .await;
    let ids: Vec<String> = created.iter().map(|t| str_field(t, "task_id")).collect();
    let cache = |stats: &Value| {
        (
            stats["claim_cache"]["claims_kept"]
                .as_u64()
                .expect("claims_kept"),
            stats["claim_cache"]["claims_read"]
                .as_u64()
                .expect("claims_read"),
        )
    };
    let (status, stats) = srv.admin(Method::GET, "/admin/stats", None).await;
    assert_eq!(status, StatusCode::OK, "{stats}");
    let (kept_before, read_before) = cache(&stats);

    // Changed while pending: the claim shows the change, not the words the
    // task was created with.
    srv.update_ok(
        key,
        json!({ "task_id": ids[0], "title": "new title", "metadata": { "v": 2 } }),
    )
    .await;
    srv.update_ok(
        key,
        json!({ "task_id": ids[3], "status": "canceled", "note": "not needed" }),
    )
    .await;
    let first = srv.claim(key, json!({})).await.expect("a task");
    assert_eq!(first["task_id"], ids[0].as_str());
    assert_eq!(first["title"], "new title");
    assert_eq!(first["description"], "old words");
    assert_eq!(first["metadata"], json!({ "v": 2 }));
    let second = srv.claim(key, json!({})).await.expect("a task");
    assert_eq!(second["task_id"], ids[1].as_str());
    assert_eq!(second["title"], "untouched");
    assert_eq!(second["description"], "kept words");
    assert_eq!(second["metadata"], json!({ "v": 1 }));
    let third = srv.claim(key, json!({})).await.expect("a task");
    assert_eq!(third["task_id"], ids[2].as_str());
    assert_eq!(third["description"], "first words");
    assert!(
        srv.claim(key, json!({})).await.is_none(),
        "the canceled task is not claimed"
    );

    // Released, reworded and claimed again: the second claim reads the
    // store and shows the change too.
    srv.update_ok(
        key,
        json!({ "task_id": ids[2], "lease_id": third["lease_id"], "status": "pending" }),
    )
    .await;
    srv.update_ok(
        key,
        json!({ "task_id": ids[2], "description": "second words" }),
    )
    .await;
    let again = srv.claim(key, json!({})).await.expect("a task");
    assert_eq!(again["task_id"], ids[2].as_str());
    assert_eq!(again["title"], "released");
    assert_eq!(again["description"], "second words");

    // The untouched task's first claim was answered from what the actor
    // kept; the reworded task's copy was dropped, and a second claim has
    // none: both were read from the store.
    let (_, stats) = srv.admin(Method::GET, "/admin/stats", None).await;
    let (kept, read) = cache(&stats);
    assert_eq!(kept - kept_before, 2, "{stats}");
    assert_eq!(read - read_before, 2, "{stats}");
    assert_eq!(stats["claim_cache"]["bytes_used"], 0, "{stats}");
});

backend_tests!(
    claims_after_a_restart_are_answered_from_content_read_ahead,
    |mut srv| async move {
        let org = srv.create_org("dev").await;
        let key = org.owner_key.clone();
        const TASKS: usize = 40;
        let items: Vec<Value> = (0..TASKS)
            .map(|n| json!({ "title": format!("task {n}"), "description": format!("words {n}") }))
            .collect();
        for batch in items.chunks(20) {
            srv.create_tasks(&key, json!(batch)).await;
        }
        // Content is kept only by the actor that created the tasks: after a
        // restart every claim would read its task from the store.
        srv.restart().await;
        let cache = |stats: &Value| {
            let figure = |name: &str| {
                stats["claim_cache"][name]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{name} in {stats}"))
            };
            (
                figure("claims_kept"),
                figure("claims_read"),
                figure("tasks_refilled"),
            )
        };
        let check = |task: &Value| {
            let title = task["title"].as_str().expect("a title").to_owned();
            let n = title.strip_prefix("task ").expect("a created title");
            assert_eq!(task["description"], format!("words {n}"), "{task}");
            title
        };
        let mut claimed = vec![check(&srv.claim(&key, json!({})).await.expect("a task"))];

        // The first claim read its task, and asked for the rest to be read
        // ahead, in bulk, off the claim path.
        let stats = eventually(
            Duration::from_secs(10),
            "the pending tasks' content read ahead",
            || async {
                let (status, stats) = srv.admin(Method::GET, "/admin/stats", None).await;
                assert_eq!(status, StatusCode::OK, "{stats}");
                (cache(&stats).2 == TASKS as u64 - 1).then_some(stats)
            },
        )
        .await;
        let (kept_before, read_before, _) = cache(&stats);
        assert_eq!(read_before, 1, "{stats}");

        // Every other claim is answered from it, with the content the task
        // was created with.
        while let Some(task) = srv.claim(&key, json!({})).await {
            claimed.push(check(&task));
        }
        claimed.sort();
        let mut created: Vec<String> = (0..TASKS).map(|n| format!("task {n}")).collect();
        created.sort();
        assert_eq!(claimed, created);
        let (_, stats) = srv.admin(Method::GET, "/admin/stats", None).await;
        let (kept, read, _) = cache(&stats);
        assert_eq!(kept - kept_before, TASKS as u64 - 1, "{stats}");
        assert_eq!(read, read_before, "{stats}");
        assert_eq!(stats["claim_cache"]["bytes_used"], 0, "{stats}");
    }
);
