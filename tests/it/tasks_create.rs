//! POST /tasks: batches, refs and blockers, client-minted ids, validation.

use crate::common::*;
use reqwest::Method;

/// RFC 3339, UTC, millisecond precision, `Z` suffix: `2026-01-02T03:04:05.678Z`.
fn is_millisecond_utc(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 24
        && chrono::DateTime::parse_from_rfc3339(s).is_ok()
        && b[19] == b'.'
        && b[20..23].iter().all(u8::is_ascii_digit)
        && b[23] == b'Z'
}

/// Asserts that a create call is refused with 400 and wrote nothing.
async fn assert_create_refused(srv: &TestServer, org: &Org, body: Value, field: &str) {
    let before = srv.list_ids(&org.owner_key, "").await;
    let (status, resp) = srv.post(&org.owner_key, "/tasks", body.clone()).await;
    assert_bad_request(status, &resp, field);
    let after = srv.list_ids(&org.owner_key, "").await;
    assert_eq!(before, after, "a refused create wrote tasks: {body}");
}

backend_tests!(batch_results_follow_input_order, |srv| async move {
    let org = srv.create_org("dev").await;
    let items: Vec<Value> = (0..25)
        .map(|i| {
            if i % 5 == 0 {
                json!({ "title": format!("task {i}") })
            } else {
                json!({ "title": format!("task {i}"), "ref": format!("r{i}") })
            }
        })
        .collect();
    let before = chrono::Utc::now() - chrono::Duration::seconds(5);
    let (status, body) = srv
        .post(&org.owner_key, "/tasks", json!({ "tasks": items }))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["created"], 25);
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 25);

    let mut seen = std::collections::HashSet::new();
    for (i, r) in results.iter().enumerate() {
        if i % 5 == 0 {
            assert!(r["ref"].is_null(), "item {i} had no ref: {r}");
        } else {
            assert_eq!(r["ref"], format!("r{i}"), "{r}");
        }
        let id = str_field(r, "task_id");
        assert!(is_canonical_uuid(&id), "{id}");
        assert_eq!(
            uuid::Uuid::parse_str(&id).unwrap().get_version_num(),
            7,
            "server ids are v7"
        );
        assert!(seen.insert(id.clone()), "duplicate id {id}");
        assert_eq!(r["status"], "pending");
        let created = ts(r, "created_at");
        assert!(created > before && created < chrono::Utc::now() + chrono::Duration::seconds(5));
        assert!(str_field(r, "created_at").ends_with('Z'), "{r}");
    }

    // Each result maps to the item at the same position.
    let ids = ids(results);
    let (status, got) = srv
        .post(&org.owner_key, "/tasks/get", json!({ "task_ids": ids }))
        .await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(got["count"], 25);
    for task in got["tasks"].as_array().unwrap() {
        let pos = ids
            .iter()
            .position(|i| task["task_id"] == i.as_str())
            .unwrap();
        assert_eq!(task["title"], format!("task {pos}"));
    }

    let single = srv
        .create_tasks(&org.owner_key, json!([{ "title": "alone" }]))
        .await;
    assert_eq!(single[0]["status"], "pending");
});

backend_tests!(batch_size_outside_1_to_25_is_refused, |srv| async move {
    let org = srv.create_org("dev").await;
    assert_create_refused(&srv, &org, json!({ "tasks": [] }), "tasks").await;
    let items: Vec<Value> = (0..26)
        .map(|i| json!({ "title": format!("t{i}") }))
        .collect();
    assert_create_refused(&srv, &org, json!({ "tasks": items }), "tasks").await;
    assert_create_refused(&srv, &org, json!({}), "tasks").await;
    assert_create_refused(&srv, &org, json!({ "tasks": "many" }), "tasks").await;
    assert!(srv.list_all(&org.owner_key, "").await.is_empty());
});

backend_tests!(refs_resolve_within_the_call, |srv| async move {
    let org = srv.create_org("dev").await;
    let existing = srv.new_task(&org.owner_key, "existing").await;

    let results = srv
        .create_tasks(
            &org.owner_key,
            json!([
                // Points at a later item of the same call.
                { "title": "a", "ref": "a", "blocked_by": ["ref:b"] },
                { "title": "b", "ref": "b" },
                // Mixes a UUID with a ref.
                { "title": "c", "ref": "c", "blocked_by": [existing, "ref:a"] },
            ]),
        )
        .await;
    let [a, b, c] = [0, 1, 2].map(|i| str_field(&results[i], "task_id"));
    assert_eq!(results[0]["status"], "blocked");
    assert_eq!(results[1]["status"], "pending");
    assert_eq!(results[2]["status"], "blocked");

    let task_a = srv.get_task(&org.owner_key, &a).await;
    assert_eq!(task_a["status"], "blocked");
    assert_eq!(task_a["blocked_by"], json!([b]), "refs are stored as ids");
    assert_eq!(
        task_a["dependencies"],
        json!([{ "task_id": b, "status": "pending" }])
    );

    let task_c = srv.get_task(&org.owner_key, &c).await;
    let mut blockers: Vec<String> = task_c["blocked_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    blockers.sort();
    let mut expected = vec![existing.clone(), a.clone()];
    expected.sort();
    assert_eq!(blockers, expected);
    assert_eq!(
        task_c["dependencies"].as_array().unwrap().len(),
        2,
        "{task_c}"
    );
});

backend_tests!(bad_refs_and_blockers_write_nothing, |srv| async move {
    let org = srv.create_org("dev").await;
    srv.new_task(&org.owner_key, "baseline").await;

    // A ref that names no item.
    assert_create_refused(
        &srv,
        &org,
        json!({ "tasks": [
            { "title": "ok", "ref": "ok" },
            { "title": "dangling", "blocked_by": ["ref:ghost"] },
        ]}),
        "ref",
    )
    .await;
    // A cycle among the call's items.
    let (status, body) = srv
        .post(
            &org.owner_key,
            "/tasks",
            json!({ "tasks": [
                { "title": "x", "ref": "x", "blocked_by": ["ref:y"] },
                { "title": "y", "ref": "y", "blocked_by": ["ref:z"] },
                { "title": "z", "ref": "z", "blocked_by": ["ref:x"] },
                { "title": "innocent" },
            ]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "cycle: {body}");
    assert!(body["error"].is_string());
    // A task blocked by itself.
    let (status, body) = srv
        .post(
            &org.owner_key,
            "/tasks",
            json!({ "tasks": [{ "title": "self", "ref": "s", "blocked_by": ["ref:s"] }] }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "self-cycle: {body}");
    // A blocker id that does not exist.
    assert_create_refused(
        &srv,
        &org,
        json!({ "tasks": [
            { "title": "fine" },
            { "title": "orphan", "blocked_by": [new_uuid()] },
        ]}),
        "blocked_by",
    )
    .await;

    let titles: Vec<Value> = srv
        .list_all(&org.owner_key, "")
        .await
        .iter()
        .map(|t| t["title"].clone())
        .collect();
    assert_eq!(titles, vec![json!("baseline")]);
});

backend_tests!(client_minted_task_id, |srv| async move {
    let org = srv.create_org("dev").await;
    let id = new_uuid();
    let results = srv
        .create_tasks(
            &org.owner_key,
            json!([{ "task_id": id, "title": "minted" }]),
        )
        .await;
    assert_eq!(results[0]["task_id"], id.as_str());
    assert_eq!(srv.get_task(&org.owner_key, &id).await["title"], "minted");

    // An existing id is rejected, never overwritten, and nothing else is written.
    let (status, body) = srv
        .post(
            &org.owner_key,
            "/tasks",
            json!({ "tasks": [
                { "title": "bystander" },
                { "task_id": id, "title": "overwrite attempt", "priority": 1 },
            ]}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "task_id already exists");
    assert_eq!(body["task_id"], id.as_str());

    let task = srv.get_task(&org.owner_key, &id).await;
    assert_eq!(task["title"], "minted");
    assert_eq!(task["priority"], 3);
    assert_eq!(
        srv.list_all(&org.owner_key, "").await.len(),
        1,
        "bystander was written"
    );

    // The same id in another org is that org's business... but it must not
    // reveal or touch this org's task either way.
    let other = srv.create_org("dev").await;
    let (status, body) = srv
        .post(
            &other.owner_key,
            "/tasks",
            json!({ "tasks": [{ "task_id": id, "title": "theirs" }] }),
        )
        .await;
    assert!(
        status == StatusCode::CREATED || status == StatusCode::CONFLICT,
        "{status} {body}"
    );
    assert_eq!(srv.get_task(&org.owner_key, &id).await["title"], "minted");
});

backend_tests!(invalid_items_are_refused_whole, |srv| async move {
    let org = srv.create_org("dev").await;
    for priority in [json!(0), json!(6), json!("high"), json!(2.5), json!(-1)] {
        assert_create_refused(
            &srv,
            &org,
            json!({ "tasks": [{ "title": "ok" }, { "title": "p", "priority": priority }] }),
            "priority",
        )
        .await;
    }
    assert_create_refused(
        &srv,
        &org,
        json!({ "tasks": [{ "title": "ok" }, { "description": "no title" }] }),
        "title",
    )
    .await;
    assert_create_refused(&srv, &org, json!({ "tasks": [{ "title": 42 }] }), "title").await;
    for metadata in [json!("a string"), json!([1, 2]), json!(7)] {
        assert_create_refused(
            &srv,
            &org,
            json!({ "tasks": [{ "title": "m", "metadata": metadata }] }),
            "metadata",
        )
        .await;
    }
    assert_create_refused(
        &srv,
        &org,
        json!({ "tasks": [{ "title": "t", "tags": "urgent" }] }),
        "tags",
    )
    .await;
    assert_create_refused(
        &srv,
        &org,
        json!({ "tasks": [{ "title": "t", "assignee": "stranger@example.com" }] }),
        "assignee",
    )
    .await;
    for bad_id in [
        "not-a-uuid",
        "A1A20081-F05D-755C-A35B-8E563823D57C",
        "a1a20081f05d755ca35b8e563823d57c",
    ] {
        assert_create_refused(
            &srv,
            &org,
            json!({ "tasks": [{ "title": "ok" }, { "title": "t", "task_id": bad_id }] }),
            "task_id",
        )
        .await;
    }
    assert!(srv.list_all(&org.owner_key, "").await.is_empty());
});

backend_tests!(malformed_json_is_400, |srv| async move {
    let org = srv.create_org("dev").await;
    for raw in ["{\"tasks\": [", "not json", "[1,2]", ""] {
        let (status, text) = srv.post_raw(&org.owner_key, "/tasks", raw).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "body {raw:?}: {text}");
        let body: Value = serde_json::from_str(&text).expect("error body is JSON");
        assert!(body["error"].is_string(), "{body}");
    }
    assert!(srv.list_all(&org.owner_key, "").await.is_empty());
});

backend_tests!(defaults_and_creation_event, |srv| async move {
    let org = srv.create_org("dev").await;
    let id = srv.new_task(&org.owner_key, "plain").await;
    let task = srv.get_task(&org.owner_key, &id).await;
    assert_eq!(task["task_id"], id.as_str());
    assert_eq!(task["title"], "plain");
    assert_eq!(task["status"], "pending");
    assert_eq!(task["priority"], 3, "default priority: {task}");
    assert!(task["assignee"].is_null(), "{task}");
    assert!(task["description"].is_null(), "{task}");
    assert!(task["parent_task_id"].is_null(), "{task}");
    assert_eq!(task["tags"], json!([]));
    assert_eq!(task["blocked_by"], json!([]));
    assert_eq!(task["dependencies"], json!([]));
    assert!(ts(&task, "updated_at") >= ts(&task, "created_at"), "{task}");

    let events = history(&task);
    assert_eq!(events.len(), 1, "{task}");
    for stamp in [
        &task["created_at"],
        &task["updated_at"],
        &events[0]["timestamp"],
    ] {
        assert!(
            is_millisecond_utc(stamp.as_str().unwrap()),
            "timestamp format: {stamp}"
        );
    }
    assert!(events[0]["from_status"].is_null(), "{task}");
    assert_eq!(events[0]["to_status"], "pending");
    assert_eq!(events[0]["agent_id"], org.owner_key_name.as_str());
    ts(&events[0], "timestamp");
});

backend_tests!(all_fields_round_trip, |srv| async move {
    let org = srv.create_org("dev").await;
    srv.add_member(&org, "dana@example.com", "user").await;
    let parent = srv.new_task(&org.owner_key, "parent").await;
    let id = srv
        .create_task(
            &org.owner_key,
            json!({
                "title": "full",
                "description": "all the fields",
                "parent_task_id": parent,
                "assignee": "dana@example.com",
                "priority": 1,
                "tags": ["backend", "urgent"],
                "metadata": { "ticket": 42, "nested": { "a": [1, 2] } },
            }),
        )
        .await;
    let task = srv.get_task(&org.owner_key, &id).await;
    assert_eq!(task["description"], "all the fields");
    assert_eq!(task["parent_task_id"], parent.as_str());
    assert_eq!(task["assignee"], "dana@example.com");
    assert_eq!(task["priority"], 1);
    assert_eq!(task["tags"], json!(["backend", "urgent"]));
    assert_eq!(
        task["metadata"],
        json!({ "ticket": 42, "nested": { "a": [1, 2] } })
    );
    assert_eq!(task["status"], "pending");
});

backend_tests!(blockers_decide_the_initial_status, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let done = srv
        .create_task(key, json!({ "title": "done", "assignee": org.owner_email }))
        .await;
    srv.update_ok(
        key,
        json!({ "task_id": done, "status": "completed", "note": "shipped" }),
    )
    .await;
    let live = srv.new_task(key, "live").await;

    let results = srv
        .create_tasks(
            key,
            json!([
                { "title": "after done", "blocked_by": [done] },
                { "title": "after both", "blocked_by": [done, live] },
            ]),
        )
        .await;
    assert_eq!(results[0]["status"], "pending", "all blockers completed");
    assert_eq!(results[1]["status"], "blocked");

    let first = srv.get_task(key, &str_field(&results[0], "task_id")).await;
    assert_eq!(first["status"], "pending");
    assert_eq!(history(&first)[0]["to_status"], "pending");
    let second = srv.get_task(key, &str_field(&results[1], "task_id")).await;
    assert_eq!(second["status"], "blocked");
    assert!(history(&second)[0]["from_status"].is_null());
    assert_eq!(history(&second)[0]["to_status"], "blocked");
});

backend_tests!(
    integers_follow_json_schema_and_content_keeps_its_numbers,
    |srv| async move {
        let org = srv.create_org("pro").await;
        let key = &org.owner_key;
        // To JSON Schema, which the document states the requests in, a
        // number without a fraction is an integer: in a body, in a query and
        // in the operator's requests.
        let (status, body) = srv
            .post(
                key,
                "/tasks",
                json!({ "tasks": [{ "title": "floats", "priority": 2.0, "max_attempts": 3e0,
                    "metadata": { "ratio": 2.0, "count": 7 } }] }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let id = str_field(&body["results"][0], "task_id");
        let (status, text) = srv
            .raw(
                Method::POST,
                "/tasks/get",
                &[("x-api-key", key)],
                Some(json!({ "task_ids": [id] }).to_string()),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let task = &serde_json::from_str::<Value>(&text).unwrap()["tasks"][0];
        assert_eq!(
            (&task["priority"], &task["max_attempts"]),
            (&json!(2), &json!(3))
        );
        // Free-form content is kept as written: `2.0` stays a float.
        assert!(
            text.contains(r#""metadata":{"ratio":2.0,"count":7}"#),
            "{text}"
        );
        let (status, body) = srv.get(key, "/tasks?limit=1.0").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["tasks"].as_array().map(Vec::len), Some(1), "{body}");
        let (status, body) = srv.get(key, "/tasks?limit=1.5").await;
        assert_bad_request(status, &body, "limit");

        let (status, body) = srv
            .admin(
                Method::PATCH,
                &format!("/admin/orgs/{}", org.org_id),
                Some(json!({ "seats": 905.0, "limits": { "tags": 9_007_199_254_740_991.0 } })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["seats"], 905, "{body}");
        assert_eq!(body["limits"]["tags"], 9_007_199_254_740_991_i64, "{body}");
    }
);
