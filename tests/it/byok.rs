//! Client-encrypted (BYOK) orgs: envelopes kept byte for byte on every read
//! path, the `/org/dek` routes per role and mode, features that must read
//! content answering `byok`, and search's answers.

use crate::common::*;
use reqwest::Method;

/// An envelope whose keys are deliberately not in alphabetical order, so a
/// server that re-sorted them would be caught.
fn envelope(ct: &str) -> String {
    format!(
        r#"{{"__service_enc__":{{"v":1,"kid":"k-7","iv":"aXY=","ct":"{ct}","alg":"A256GCM"}}}}"#
    )
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).expect("an envelope is JSON")
}

async fn post_text(srv: &TestServer, key: &str, path: &str, body: &str) -> (StatusCode, String) {
    srv.raw(
        Method::POST,
        path,
        &[("x-api-key", key)],
        Some(body.to_owned()),
    )
    .await
}

async fn get_text(srv: &TestServer, key: &str, path: &str) -> (StatusCode, String) {
    srv.raw(Method::GET, path, &[("x-api-key", key)], None)
        .await
}

backend_tests!(
    byok_envelopes_round_trip_on_every_read_path,
    |srv| async move {
        let org = srv
            .create_org_with(json!({ "tier": "dev", "encryption": "byok" }))
            .await;
        let key = &org.owner_key;
        let owner = &org.owner_key_name;
        let (parent_title, title, description, metadata) = (
            envelope("cGFyZW50"),
            envelope("dGl0bGU="),
            envelope("ZGVzYw=="),
            envelope("bWV0YQ=="),
        );
        let (blocker_title, output, note) = (
            envelope("YmxvY2tlcg=="),
            envelope("b3V0cHV0"),
            envelope("bm90ZQ=="),
        );

        // A parent, a blocker that completes with an envelope output and note,
        // and the child that a claim then briefs with both.
        let (status, text) = post_text(
        &srv,
        key,
        "/tasks",
        &format!(
            r#"{{"tasks":[{{"ref":"p","title":{parent_title}}},{{"ref":"b","title":{blocker_title}}}]}}"#
        ),
    )
    .await;
        assert_eq!(status, StatusCode::CREATED, "{text}");
        let created = parse(&text);
        let parent = str_field(&created["results"][0], "task_id");
        let blocker = str_field(&created["results"][1], "task_id");
        let (status, text) = post_text(
        &srv,
        key,
        "/tasks",
        &format!(
            r#"{{"tasks":[{{"title":{title},"description":{description},"metadata":{metadata},"parent_task_id":"{parent}","blocked_by":["{blocker}"],"tags":["x"]}}]}}"#
        ),
    )
    .await;
        assert_eq!(status, StatusCode::CREATED, "{text}");
        let child = str_field(&parse(&text)["results"][0], "task_id");

        let claimed = srv
            .claim(key, json!({ "tags": [] }))
            .await
            .expect("the blocker or the parent is pending");
        let first = str_field(&claimed, "task_id");
        assert!(first == parent || first == blocker, "{claimed}");
        for id in [&parent, &blocker] {
            let (status, text) = post_text(
            &srv,
            key,
            "/tasks/update",
            &format!(
                r#"{{"updates":[{{"task_id":"{id}","status":"completed","assignee":"{owner}","output":{output},"note":{note}}}]}}"#
            ),
        )
        .await;
            assert_eq!(status, StatusCode::OK, "{text}");
        }

        // Get, with history: every envelope exactly as sent.
        let (status, text) = post_text(
            &srv,
            key,
            "/tasks/get",
            &format!(r#"{{"task_ids":["{blocker}"]}}"#),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{text}");
        for sent in [&blocker_title, &output, &note] {
            assert!(text.contains(sent.as_str()), "get lost {sent}: {text}");
        }
        let (status, text) = post_text(
            &srv,
            key,
            "/tasks/get",
            &format!(r#"{{"task_ids":["{child}"]}}"#),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{text}");
        for sent in [&title, &description, &metadata] {
            assert!(text.contains(sent.as_str()), "get lost {sent}: {text}");
        }

        // Lean and full lists.
        let (status, text) = get_text(&srv, key, "/tasks").await;
        assert_eq!(status, StatusCode::OK, "{text}");
        for sent in [&parent_title, &blocker_title, &title] {
            assert!(
                text.contains(sent.as_str()),
                "lean list lost {sent}: {text}"
            );
        }
        let (status, text) = get_text(&srv, key, "/tasks?full=true").await;
        assert_eq!(status, StatusCode::OK, "{text}");
        for sent in [&title, &description, &metadata, &output] {
            assert!(
                text.contains(sent.as_str()),
                "full list lost {sent}: {text}"
            );
        }

        // The claim of the child: its content, its parent chain and its
        // blocker's output in the context.
        let (status, text) = post_text(&srv, key, "/tasks/claim", r#"{"tags":["x"]}"#).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let claim = parse(&text);
        assert_eq!(claim["task_id"], child, "{text}");
        for sent in [&title, &description, &metadata, &parent_title, &output] {
            assert!(text.contains(sent.as_str()), "claim lost {sent}: {text}");
        }

        // A metadata envelope replaces the value; so does plaintext over one.
        srv.update_ok(key, json!({ "task_id": child, "metadata": { "plain": 1 } }))
            .await;
        assert_eq!(
            srv.get_task(key, &child).await["metadata"],
            json!({ "plain": 1 })
        );
        srv.update_ok(
            key,
            json!({ "task_id": child, "metadata": parse(&metadata) }),
        )
        .await;
        assert_eq!(
            srv.get_task(key, &child).await["metadata"],
            parse(&metadata)
        );

        // The server never logs what it cannot read.
        let log = srv.server_log();
        for ct in [
            "cGFyZW50", "dGl0bGU=", "ZGVzYw==", "bWV0YQ==", "b3V0cHV0", "bm90ZQ==",
        ] {
            assert!(!log.contains(ct), "the log holds client ciphertext {ct}");
        }
    }
);

backend_tests!(dek_routes_answer_per_role_and_mode, |srv| async move {
    let byok = srv
        .create_org_with(json!({ "tier": "dev", "encryption": "byok" }))
        .await;
    let admin = srv.add_member(&byok, "admin@example.com", "admin").await;
    let user = srv.add_member(&byok, "user@example.com", "user").await;

    let (status, body) = srv.get(&user, "/org/dek").await;
    assert_error(status, &body, StatusCode::NOT_FOUND);

    let kms_key_id = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd  {not parsed}";
    let dek = json!({ "wrapped_dek": "AQIDBAUGBwgJCgsMDQ4PEA==", "kms_key_id": kms_key_id });
    for key in [&admin, &user] {
        let (status, body) = put(&srv, key, &dek).await;
        assert_error(status, &body, StatusCode::FORBIDDEN);
    }
    for (body, field) in [
        (json!({ "kms_key_id": "k" }), "wrapped_dek"),
        (json!({ "wrapped_dek": "AAEC" }), "kms_key_id"),
        (
            json!({ "wrapped_dek": 7, "kms_key_id": "k" }),
            "wrapped_dek",
        ),
        (
            json!({ "wrapped_dek": "AAEC", "kms_key_id": {"id": "k"} }),
            "kms_key_id",
        ),
    ] {
        let (status, answer) = put(&srv, &byok.owner_key, &body).await;
        assert_bad_request(status, &answer, field);
    }
    let (status, body) = srv.get(&user, "/org/dek").await;
    assert_error(status, &body, StatusCode::NOT_FOUND);

    let (status, body) = put(&srv, &byok.owner_key, &dek).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body, json!({ "status": "created", "org_id": byok.org_id }));
    let (status, body) = put(
        &srv,
        &byok.owner_key,
        &json!({ "wrapped_dek": "AAAA", "kms_key_id": "another" }),
    )
    .await;
    assert_error(status, &body, StatusCode::CONFLICT);

    for key in [&user, &admin, &byok.owner_key] {
        let (status, body) = srv.get(key, "/org/dek").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["wrapped_dek"], dek["wrapped_dek"]);
        assert_eq!(body["kms_key_id"], kms_key_id);
        assert_eq!(body["key_provider"], "client_byok");
        assert_eq!(body["org_id"], byok.org_id);
    }

    // A managed org: clients must not encrypt.
    let managed = srv.create_org("dev").await;
    let (status, body) = srv.get(&managed.owner_key, "/org/dek").await;
    assert_error(status, &body, StatusCode::CONFLICT);
    assert_eq!(body["key_provider"], "managed", "{body}");
    let (status, body) = put(&srv, &managed.owner_key, &dek).await;
    assert_error(status, &body, StatusCode::CONFLICT);
    assert_eq!(body["key_provider"], "managed", "{body}");
});

async fn put(srv: &TestServer, key: &str, body: &Value) -> (StatusCode, Value) {
    let (status, text) = srv
        .raw(
            Method::PUT,
            "/org/dek",
            &[("x-api-key", key)],
            Some(body.to_string()),
        )
        .await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

backend_tests!(search_says_why_it_cannot_answer, |srv| async move {
    let byok = srv
        .create_org_with(json!({ "tier": "dev", "encryption": "byok" }))
        .await;
    let managed = srv.create_org("dev").await;
    let (status, body) = srv
        .post(
            &byok.owner_key,
            "/tasks/search",
            json!({ "query": "deploy" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({ "available": false, "reason": "byok" }));
    // This server runs without an embedding model.
    let (status, body) = srv
        .post(
            &managed.owner_key,
            "/tasks/search",
            json!({ "query": "deploy", "limit": 25 }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({ "available": false, "reason": "not_configured" })
    );
    for (body, field) in [
        (json!({ "query": "q", "limit": 26 }), "limit"),
        (json!({ "query": "q", "limit": 0 }), "limit"),
        (json!({}), "query"),
    ] {
        let (status, answer) = srv.post(&managed.owner_key, "/tasks/search", body).await;
        assert_bad_request(status, &answer, field);
    }
});

backend_tests!(
    managed_org_refuses_envelope_notes_and_descriptions,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let id = srv.new_task(&org.owner_key, "plain").await;
        let envelope = parse(&envelope("AAAA"));
        for item in [
            json!({ "task_id": id, "description": envelope }),
            json!({ "task_id": id, "status": "canceled", "note": envelope }),
        ] {
            let (status, body) = srv.update(&org.owner_key, json!([item])).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{item}: {body}");
        }
        let task = srv.get_task(&org.owner_key, &id).await;
        assert_eq!(task["status"], "pending");
        assert!(task["description"].is_null(), "{task}");
    }
);
