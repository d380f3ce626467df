//! The tag vocabulary: GET/POST /tags, /tags/update, /tags/delete, tags on
//! tasks once a vocabulary exists, default tags, and strict tags in claims.

use crate::common::*;
use reqwest::Method;

const ADMIN_REQUIRED: &str = "admin or owner role required";

/// The names of GET /tags, in the order served.
async fn tag_names(srv: &TestServer, key: &str) -> Vec<String> {
    srv.list_tags(key)
        .await
        .iter()
        .map(|t| str_field(t, "name"))
        .collect()
}

/// Asserts that `POST path body` is refused with `expected` and that the
/// vocabulary (every field of every tag) is unchanged.
async fn assert_tags_refused(
    srv: &TestServer,
    key: &str,
    path: &str,
    body: Value,
    expected: StatusCode,
) -> Value {
    let before = srv.list_tags(key).await;
    let (status, resp) = srv.post(key, path, body.clone()).await;
    assert_error(status, &resp, expected);
    let after = srv.list_tags(key).await;
    assert_eq!(before, after, "a refused {path} changed the tags: {body}");
    resp
}

/// Like `assert_tags_refused` for a 400 whose error names `field`.
async fn assert_tags_bad_request(
    srv: &TestServer,
    key: &str,
    path: &str,
    body: Value,
    field: &str,
) {
    let resp = assert_tags_refused(srv, key, path, body.clone(), StatusCode::BAD_REQUEST).await;
    assert!(
        resp["error"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains(&field.to_lowercase()),
        "error for {body} should name `{field}`: {resp}"
    );
}

/// The tags of a task from a single-id get, sorted (absent reads as none).
async fn task_tags(srv: &TestServer, key: &str, id: &str) -> Vec<String> {
    sorted_strings(&srv.get_task(key, id).await["tags"])
}

fn many(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({ "name": format!("t{i:02}") }))
        .collect()
}

backend_tests!(create_list_update_delete_round_trip, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    assert!(srv.list_tags(key).await.is_empty(), "a new org has no tags");

    let before = chrono::Utc::now() - chrono::Duration::seconds(5);
    let created = srv
        .create_tags(
            key,
            json!([
                { "name": "ops" },
                { "name": "backend", "description": "server work", "default": true },
                { "name": "secure", "strict": true, "description": "cleared staff only" },
            ]),
        )
        .await;
    let names: Vec<String> = created.iter().map(|t| str_field(t, "name")).collect();
    assert_eq!(names, ["ops", "backend", "secure"], "input order");
    assert_eq!(created[0]["strict"], false, "{}", created[0]);
    assert_eq!(created[0]["default"], false, "{}", created[0]);
    assert!(created[0]["description"].is_null(), "{}", created[0]);
    assert_eq!(created[1]["default"], true);
    assert_eq!(created[1]["description"], "server work");
    assert_eq!(created[2]["strict"], true);
    assert_eq!(created[2]["description"], "cleared staff only");
    for t in &created {
        assert_eq!(t["created_by"], org.owner_email.as_str(), "{t}");
        assert!(ts(t, "created_at") >= before, "{t}");
    }

    // GET /tags: a bare array sorted by name, the same objects.
    let listed = srv.list_tags(key).await;
    assert_eq!(
        listed
            .iter()
            .map(|t| str_field(t, "name"))
            .collect::<Vec<_>>(),
        ["backend", "ops", "secure"]
    );
    for t in &created {
        let same = listed.iter().find(|l| l["name"] == t["name"]).unwrap();
        assert_eq!(same, t, "GET /tags serves what POST /tags returned");
    }

    // Update: omitted keys unchanged, `description: null` clears.
    let (status, body) = srv
        .post(
            key,
            "/tags/update",
            json!({ "tags": [
                { "name": "backend", "description": null },
                { "name": "ops", "default": true, "description": "on call" },
            ]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["updated"], 2, "{body}");
    let updated = body["tags"].as_array().expect("tags array");
    assert_eq!(updated.len(), 2, "{body}");
    let listed = srv.list_tags(key).await;
    let backend = listed.iter().find(|t| t["name"] == "backend").unwrap();
    assert!(backend["description"].is_null(), "{backend}");
    assert_eq!(backend["default"], true, "default untouched: {backend}");
    assert_eq!(backend["strict"], false, "{backend}");
    let ops = listed.iter().find(|t| t["name"] == "ops").unwrap();
    assert_eq!(ops["default"], true, "{ops}");
    assert_eq!(ops["description"], "on call", "{ops}");
    assert_eq!(ops["strict"], false, "{ops}");
    for t in updated {
        let same = listed.iter().find(|l| l["name"] == t["name"]).unwrap();
        assert_eq!(same, t, "update returns the stored tag");
    }

    // Delete.
    let (status, body) = srv
        .post(key, "/tags/delete", json!({ "names": ["ops", "secure"] }))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["count"], 2, "{body}");
    assert_eq!(
        sorted_strings(&body["deleted"]),
        ["ops", "secure"],
        "{body}"
    );
    assert_eq!(tag_names(&srv, key).await, ["backend"]);
});

backend_tests!(tag_writes_need_admin_or_owner, |srv| async move {
    let org = srv.create_org("dev").await;
    let user = srv.add_member(&org, "user@example.com", "user").await;
    let admin = srv.add_member(&org, "admin@example.com", "admin").await;
    srv.create_tags(&org.owner_key, json!([{ "name": "ops" }]))
        .await;

    // Reading is open to every member.
    assert_eq!(tag_names(&srv, &user).await, ["ops"]);

    for (path, body) in [
        ("/tags", json!({ "tags": [{ "name": "mine" }] })),
        (
            "/tags/update",
            json!({ "tags": [{ "name": "ops", "default": true }] }),
        ),
        ("/tags/delete", json!({ "names": ["ops"] })),
    ] {
        let resp = assert_tags_refused(&srv, &user, path, body, StatusCode::FORBIDDEN).await;
        assert_eq!(resp["error"], ADMIN_REQUIRED, "{path}");
    }

    // An admin may write.
    let created = srv
        .create_tags(&admin, json!([{ "name": "by-admin" }]))
        .await;
    assert_eq!(created[0]["created_by"], "admin@example.com");
    let (status, body) = srv
        .post(
            &admin,
            "/tags/update",
            json!({ "tags": [{ "name": "ops", "default": true }] }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = srv
        .post(&admin, "/tags/delete", json!({ "names": ["by-admin"] }))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(tag_names(&srv, &user).await, ["ops"]);
});

backend_tests!(
    create_is_validated_upfront_and_writes_nothing,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        srv.create_tags(key, json!([{ "name": "existing" }])).await;

        let long_desc = "d".repeat(201);
        let cases = [
            (json!({ "tags": [] }), "tags"),
            (json!({ "tags": many(26) }), "tags"),
            (json!({}), "tags"),
            (json!({ "tags": "ops" }), "tags"),
            (json!({ "tags": [{ "strict": false }] }), "name"),
            (json!({ "tags": [{ "name": 5 }] }), "name"),
            (json!({ "tags": [{ "name": "" }] }), "name"),
            (json!({ "tags": [{ "name": "x".repeat(65) }] }), "name"),
            (json!({ "tags": [{ "name": "a,b" }] }), "name"),
            (
                json!({ "tags": [{ "name": "s", "strict": "yes" }] }),
                "strict",
            ),
            (
                json!({ "tags": [{ "name": "d", "default": 1 }] }),
                "default",
            ),
            (
                json!({ "tags": [{ "name": "d", "description": 7 }] }),
                "description",
            ),
            (
                json!({ "tags": [{ "name": "d", "description": long_desc }] }),
                "description",
            ),
            (
                json!({ "tags": [{ "name": "s", "strict": true }] }),
                "description",
            ),
            (
                json!({ "tags": [{ "name": "s", "strict": true, "description": null }] }),
                "description",
            ),
            (
                json!({ "tags": [{ "name": "c", "colour": "red" }] }),
                "colour",
            ),
        ];
        for (body, field) in cases {
            assert_tags_bad_request(&srv, key, "/tags", body, field).await;
        }

        // A bad item refuses the whole call: its valid neighbours are not written.
        assert_tags_refused(
            &srv,
            key,
            "/tags",
            json!({ "tags": [{ "name": "fine" }, { "name": "y".repeat(65) }] }),
            StatusCode::BAD_REQUEST,
        )
        .await;
        assert_tags_refused(
            &srv,
            key,
            "/tags",
            json!({ "tags": [{ "name": "fine" }, { "name": "dup" }, { "name": "dup" }] }),
            StatusCode::BAD_REQUEST,
        )
        .await;

        // An existing name: 409, and the new names of the call are not written.
        assert_tags_refused(
            &srv,
            key,
            "/tags",
            json!({ "tags": [{ "name": "fresh" }, { "name": "existing" }] }),
            StatusCode::CONFLICT,
        )
        .await;

        for raw in ["{\"tags\": [", "not json", "[1,2]", ""] {
            let (status, text) = srv.post_raw(key, "/tags", raw).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "body {raw:?}: {text}");
            let body: Value = serde_json::from_str(&text).expect("error body is JSON");
            assert_error(status, &body, StatusCode::BAD_REQUEST);
        }
        assert_eq!(tag_names(&srv, key).await, ["existing"]);

        // The limits themselves are accepted: 64-char names, 200-char
        // descriptions, 25 items.
        let name64 = "n".repeat(64);
        let created = srv
            .create_tags(
                key,
                json!([{ "name": name64, "strict": true, "description": "d".repeat(200) }]),
            )
            .await;
        assert_eq!(created[0]["name"], name64.as_str());
        srv.create_tags(key, json!(many(25))).await;
        assert_eq!(srv.list_tags(key).await.len(), 27);
    }
);

backend_tests!(tier_tag_limit_is_429_and_writes_nothing, |srv| async move {
    // The tier's own number: free allows 20 tags.
    let free = srv.create_org("free").await;
    srv.create_tags(&free.owner_key, json!(many(20))).await;
    let resp = assert_tags_refused(
        &srv,
        &free.owner_key,
        "/tags",
        json!({ "tags": [{ "name": "one-more" }] }),
        StatusCode::TOO_MANY_REQUESTS,
    )
    .await;
    assert_eq!(resp["limit_type"], "tags", "{resp}");
    assert_eq!(resp["limit"], 20, "{resp}");
    assert_eq!(resp["tier"], "free", "{resp}");
    assert_eq!(srv.list_tags(&free.owner_key).await.len(), 20);

    // An operator override: the body carries the effective limit.
    let org = srv.create_org("dev").await;
    srv.set_limits(&org, json!({ "tags": 2 })).await;
    let key = &org.owner_key;
    srv.create_tags(key, json!([{ "name": "a" }])).await;
    let resp = assert_tags_refused(
        &srv,
        key,
        "/tags",
        json!({ "tags": [{ "name": "b" }, { "name": "c" }] }),
        StatusCode::TOO_MANY_REQUESTS,
    )
    .await;
    assert_eq!(resp["limit_type"], "tags", "{resp}");
    assert_eq!(resp["limit"], 2, "{resp}");
    assert_eq!(resp["tier"], "dev", "{resp}");
    assert_eq!(tag_names(&srv, key).await, ["a"], "nothing written");

    // Up to the limit is fine; one past it is not.
    srv.create_tags(key, json!([{ "name": "b" }])).await;
    let resp = assert_tags_refused(
        &srv,
        key,
        "/tags",
        json!({ "tags": [{ "name": "c" }] }),
        StatusCode::TOO_MANY_REQUESTS,
    )
    .await;
    assert_eq!(resp["limit"], 2, "{resp}");

    // Deleting frees room again.
    let (status, body) = srv
        .post(key, "/tags/delete", json!({ "names": ["a"] }))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    srv.create_tags(key, json!([{ "name": "c" }])).await;
    assert_eq!(tag_names(&srv, key).await, ["b", "c"]);
});

backend_tests!(update_rules, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    srv.create_tags(
        key,
        json!([
            { "name": "plain" },
            { "name": "described", "description": "has one" },
            { "name": "secure", "strict": true, "description": "cleared staff" },
        ]),
    )
    .await;

    let cases = [
        (json!({ "tags": [] }), "tags"),
        (json!({ "tags": many(26) }), "tags"),
        (json!({}), "tags"),
        (json!({ "tags": {} }), "tags"),
        (json!({ "tags": [{ "default": true }] }), "name"),
        (json!({ "tags": [{ "name": 3, "default": true }] }), "name"),
        (
            json!({ "tags": [{ "name": "plain", "strict": "true" }] }),
            "strict",
        ),
        (
            json!({ "tags": [{ "name": "plain", "default": "no" }] }),
            "default",
        ),
        (
            json!({ "tags": [{ "name": "plain", "description": ["x"] }] }),
            "description",
        ),
        (
            json!({ "tags": [{ "name": "plain", "description": "d".repeat(201) }] }),
            "description",
        ),
        (
            json!({ "tags": [{ "name": "plain", "colour": "red" }] }),
            "colour",
        ),
        // Enabling strict without a description in the same item.
        (
            json!({ "tags": [{ "name": "plain", "strict": true }] }),
            "description",
        ),
        // A strict tag cannot lose its description.
        (
            json!({ "tags": [{ "name": "secure", "description": null }] }),
            "description",
        ),
    ];
    for (body, field) in cases {
        assert_tags_bad_request(&srv, key, "/tags/update", body, field).await;
    }
    // A bad item refuses the valid item before it too.
    assert_tags_refused(
        &srv,
        key,
        "/tags/update",
        json!({ "tags": [
            { "name": "described", "default": true },
            { "name": "plain", "strict": true },
        ]}),
        StatusCode::BAD_REQUEST,
    )
    .await;

    // Unknown name: 404, and the known item of the call is not applied.
    assert_tags_refused(
        &srv,
        key,
        "/tags/update",
        json!({ "tags": [
            { "name": "plain", "default": true },
            { "name": "ghost", "default": true },
        ]}),
        StatusCode::NOT_FOUND,
    )
    .await;

    for raw in ["{\"tags\": [", "not json", ""] {
        let (status, text) = srv.post_raw(key, "/tags/update", raw).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "body {raw:?}: {text}");
    }

    // Strict with a description in the same item; strict on a tag that
    // already has a description.
    let (status, body) = srv
        .post(
            key,
            "/tags/update",
            json!({ "tags": [
                { "name": "plain", "strict": true, "description": "now strict" },
                { "name": "described", "strict": true },
            ]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["updated"], 2, "{body}");
    let listed = srv.list_tags(key).await;
    for name in ["plain", "described"] {
        let t = listed.iter().find(|t| t["name"] == name).unwrap();
        assert_eq!(t["strict"], true, "{t}");
        assert!(t["description"].is_string(), "{t}");
    }
    let described = listed.iter().find(|t| t["name"] == "described").unwrap();
    assert_eq!(described["description"], "has one");

    // Turning strict off, then clearing the description, is fine.
    for item in [
        json!({ "name": "secure", "strict": false }),
        json!({ "name": "secure", "description": null }),
    ] {
        let (status, body) = srv
            .post(key, "/tags/update", json!({ "tags": [item] }))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let secure = srv
        .list_tags(key)
        .await
        .into_iter()
        .find(|t| t["name"] == "secure")
        .unwrap();
    assert_eq!(secure["strict"], false, "{secure}");
    assert!(secure["description"].is_null(), "{secure}");
});

backend_tests!(delete_rules_and_tasks_keep_their_tags, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    srv.create_tags(key, json!([{ "name": "keep" }, { "name": "old" }]))
        .await;
    let task = srv
        .create_task(key, json!({ "title": "tagged", "tags": ["old", "keep"] }))
        .await;

    let cases = [
        (json!({ "names": [] }), "names"),
        (
            json!({ "names": (0..26).map(|i| format!("t{i}")).collect::<Vec<_>>() }),
            "names",
        ),
        (json!({}), "names"),
        (json!({ "names": "old" }), "names"),
        (json!({ "names": [1] }), "names"),
    ];
    for (body, field) in cases {
        assert_tags_bad_request(&srv, key, "/tags/delete", body, field).await;
    }
    let (status, text) = srv.post_raw(key, "/tags/delete", "{\"names\": [").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");

    // Any unknown name: 404, nothing deleted.
    assert_tags_refused(
        &srv,
        key,
        "/tags/delete",
        json!({ "names": ["old", "ghost"] }),
        StatusCode::NOT_FOUND,
    )
    .await;
    assert_eq!(tag_names(&srv, key).await, ["keep", "old"]);

    let (status, body) = srv
        .post(key, "/tags/delete", json!({ "names": ["old"] }))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({ "deleted": ["old"], "count": 1 }));
    assert_eq!(tag_names(&srv, key).await, ["keep"]);

    // The task keeps the deleted tag.
    assert_eq!(task_tags(&srv, key, &task).await, ["keep", "old"]);

    // A deleted name is unknown now, on tasks and to delete again.
    let (status, body) = srv
        .post(
            key,
            "/tasks",
            json!({ "tasks": [{ "title": "t", "tags": ["old"] }] }),
        )
        .await;
    assert_bad_request(status, &body, "old");
    assert_tags_refused(
        &srv,
        key,
        "/tags/delete",
        json!({ "names": ["old"] }),
        StatusCode::NOT_FOUND,
    )
    .await;
});

backend_tests!(
    unknown_task_tags_are_refused_once_a_vocabulary_exists,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;

        // No vocabulary yet: any tag goes.
        let free_form = srv
            .create_task(key, json!({ "title": "early", "tags": ["anything"] }))
            .await;
        assert_eq!(task_tags(&srv, key, &free_form).await, ["anything"]);

        srv.create_tags(key, json!([{ "name": "backend" }, { "name": "ui" }]))
            .await;

        // Create: one unknown tag refuses the whole call.
        let before = srv.list_ids(key, "").await;
        let (status, body) = srv
            .post(
                key,
                "/tasks",
                json!({ "tasks": [
                    { "title": "fine", "tags": ["backend"] },
                    { "title": "bad", "tags": ["ui", "nope"] },
                ]}),
            )
            .await;
        assert_bad_request(status, &body, "nope");
        assert_eq!(srv.list_ids(key, "").await, before, "nothing written");

        // Update: the same, and the valid item of the call is not applied.
        let task = srv
            .create_task(key, json!({ "title": "target", "tags": ["backend"] }))
            .await;
        let (status, body) = srv
            .update(
                key,
                json!([
                    { "task_id": task, "title": "renamed" },
                    { "task_id": free_form, "tags": ["nope"] },
                ]),
            )
            .await;
        assert_bad_request(status, &body, "nope");
        let got = srv.get_task(key, &task).await;
        assert_eq!(got["title"], "target", "nothing written: {got}");
        assert_eq!(task_tags(&srv, key, &free_form).await, ["anything"]);

        // Known tags are fine.
        srv.update_ok(key, json!({ "task_id": task, "tags": ["ui", "backend"] }))
            .await;
        assert_eq!(task_tags(&srv, key, &task).await, ["backend", "ui"]);

        // With every tag deleted, the org has no vocabulary again.
        let (status, body) = srv
            .post(key, "/tags/delete", json!({ "names": ["backend", "ui"] }))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        srv.create_task(key, json!({ "title": "free again", "tags": ["nope"] }))
            .await;
    }
);

backend_tests!(
    default_tags_apply_only_when_tags_are_absent,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        srv.create_tags(
            key,
            json!([
                { "name": "triage", "default": true },
                { "name": "inbox", "default": true },
                { "name": "ops" },
            ]),
        )
        .await;

        let results = srv
            .create_tasks(
                key,
                json!([
                    { "title": "no tags key" },
                    { "title": "empty tags", "tags": [] },
                    { "title": "explicit", "tags": ["ops"] },
                ]),
            )
            .await;
        let ids = ids(&results);
        assert_eq!(task_tags(&srv, key, &ids[0]).await, ["inbox", "triage"]);
        assert!(task_tags(&srv, key, &ids[1]).await.is_empty());
        assert_eq!(task_tags(&srv, key, &ids[2]).await, ["ops"]);

        // Turning `default` off stops it applying to new tasks; old ones keep it.
        let (status, body) = srv
            .post(
                key,
                "/tags/update",
                json!({ "tags": [{ "name": "inbox", "default": false }] }),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let later = srv.new_task(key, "later").await;
        assert_eq!(task_tags(&srv, key, &later).await, ["triage"]);
        assert_eq!(task_tags(&srv, key, &ids[0]).await, ["inbox", "triage"]);

        // Updates never add default tags.
        srv.update_ok(key, json!({ "task_id": ids[1], "title": "renamed" }))
            .await;
        assert!(task_tags(&srv, key, &ids[1]).await.is_empty());
    }
);

backend_tests!(strict_tags_gate_claims_by_profile_tags, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let alice = srv.add_member(&org, "alice@example.com", "user").await;
    let bob = srv.add_member(&org, "bob@example.com", "user").await;
    srv.create_tags(
        key,
        json!([
            { "name": "secure", "strict": true, "description": "cleared staff only" },
            { "name": "ui" },
        ]),
    )
    .await;
    srv.patch_member(
        key,
        "bob@example.com",
        json!({ "profile_tags": ["secure"] }),
    )
    .await;

    let secure = srv
        .create_task(
            key,
            json!({ "title": "rotate keys", "priority": 1, "tags": ["secure"] }),
        )
        .await;
    let plain = srv
        .create_task(
            key,
            json!({ "title": "fix css", "priority": 3, "tags": ["ui"] }),
        )
        .await;

    // Alice lacks the tag: her claims skip the more urgent strict task, also
    // when she filters for it; the owner without the tag is skipped as well.
    assert!(
        srv.claim(
            &alice,
            json!({ "tags": ["secure"], "include_context": false })
        )
        .await
        .is_none(),
        "a filtered claim must not hand out strict work"
    );
    assert!(
        srv.claim(key, json!({ "tags": ["secure"], "include_context": false }))
            .await
            .is_none(),
        "the owner has no `secure` tag either"
    );
    let got = srv
        .claim(&alice, json!({ "include_context": false }))
        .await
        .expect("alice gets the plain task");
    assert_eq!(got["task_id"], plain.as_str(), "{got}");
    assert!(
        srv.claim(&alice, json!({ "include_context": false }))
            .await
            .is_none(),
        "only strict work is left"
    );
    assert_eq!(srv.status_of(key, &secure).await, "pending");

    // Bob holds the tag in his profile.
    let got = srv
        .claim(&bob, json!({ "include_context": false }))
        .await
        .expect("bob may claim strict work");
    assert_eq!(got["task_id"], secure.as_str(), "{got}");
    assert_eq!(got["status"], "in_progress");
});

backend_tests!(
    tag_bodies_on_every_route_are_json_errors,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        for path in ["/tags", "/tags/update", "/tags/delete"] {
            let (status, text) = srv.send_raw(Method::POST, key, path, "{").await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {text}");
            let body: Value = serde_json::from_str(&text).expect("error body is JSON");
            assert_error(status, &body, StatusCode::BAD_REQUEST);
        }
        let (status, body) = srv.delete(key, "/tags").await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{body}");
        assert!(srv.list_tags(key).await.is_empty());
    }
);
