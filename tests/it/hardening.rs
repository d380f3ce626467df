//! What a hostile or careless client meets: bounded content, names that
//! cannot rewrite a terminal or a page, JSON errors for malformed paths and
//! queries (after the key is checked), a 413 that closes its connection,
//! and logs without colour codes when they go to a file.

use std::time::Duration;

use crate::common::*;
use reqwest::Method;

backend_tests!(
    content_is_bounded_and_nothing_is_written,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let cases = [
            (json!({ "title": "t".repeat(1_001) }), "tasks[0].title"),
            (
                json!({ "title": "t", "description": "d".repeat(65_537) }),
                "tasks[0].description",
            ),
            (
                json!({ "title": "t", "metadata": { "k": "m".repeat(65_536) } }),
                "tasks[0].metadata",
            ),
        ];
        for (item, field) in cases {
            let (status, body) = srv.post(key, "/tasks", json!({ "tasks": [item] })).await;
            assert_bad_request(status, &body, field);
        }
        assert!(
            srv.list_all(key, "").await.is_empty(),
            "nothing was written"
        );

        // The largest allowed values are accepted.
        let id = srv
            .create_task(
                key,
                json!({ "title": "t".repeat(1_000), "description": "d".repeat(65_536) }),
            )
            .await;
        let (status, body) = srv
            .update(
                key,
                json!([{ "task_id": id, "output": { "o": "x".repeat(70_000) } }]),
            )
            .await;
        assert_bad_request(status, &body, "updates[0].output");
        let (status, body) = srv
            .update(
                key,
                json!([{ "task_id": id, "status": "canceled", "note": "n".repeat(65_537) }]),
            )
            .await;
        assert_bad_request(status, &body, "updates[0].note");
        assert_eq!(srv.status_of(key, &id).await, "pending");
    }
);

backend_tests!(names_refuse_controls_and_bidi_overrides, |srv| async move {
    let org = srv.create_org("pro").await;
    let key = &org.owner_key;
    for bad in [
        "bell\u{7}",
        "new\nline",
        "csi\u{9b}",
        "rtl\u{202e}txt",
        "iso\u{2066}late",
    ] {
        let (status, body) = srv
            .post(key, "/tags", json!({ "tags": [{ "name": bad }] }))
            .await;
        assert_bad_request(status, &body, "tags[0].name");
        let (status, body) = srv.post(key, "/teams", json!({ "name": bad })).await;
        assert_bad_request(status, &body, "name");
        let (status, body) = srv.post(key, "/keys", json!({ "name": bad })).await;
        assert_bad_request(status, &body, "name");
        let (status, body) = srv
            .admin(
                Method::POST,
                "/admin/orgs",
                Some(json!({ "name": bad, "owner_email": "o@example.com" })),
            )
            .await;
        assert_bad_request(status, &body, "name");
    }
    assert!(srv.list_tags(key).await.is_empty());
    // Letters of any script are names.
    srv.create_tags(key, json!([{ "name": "größe-大小" }]))
        .await;
});

backend_tests!(
    malformed_paths_and_queries_answer_json_after_the_key,
    |srv| async move {
        let org = srv.create_org("pro").await;
        let key = org.owner_key.as_str();
        let paths = [
            (Method::GET, "/teams/%ff%fe"),
            (Method::PATCH, "/members/%ff%fe"),
            (Method::DELETE, "/keys/%ff%fe"),
            (Method::DELETE, "/teams/x/members/%c3%28"),
            (Method::GET, "/tasks?limit=%ff"),
            (Method::GET, "/tasks?status=%ff%fe"),
        ];
        for (method, path) in paths {
            let body =
                (method != Method::GET && method != Method::DELETE).then(|| "{}".to_string());
            // Without a key: 401, whatever the path holds.
            let (status, text) = srv.raw(method.clone(), path, &[], body.clone()).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}: {text}");
            let (status, text) = srv
                .raw(method.clone(), path, &[("x-api-key", key)], body)
                .await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {text}");
            let body: Value = serde_json::from_str(&text)
                .unwrap_or_else(|_| panic!("{method} {path} answered non-JSON: {text}"));
            assert!(body["error"].is_string(), "{method} {path}: {text}");
        }
    }
);

/// A client that speaks HTTP/2 in clear text (prior knowledge): one
/// connection carries every request it sends.
fn http2_client() -> reqwest::Client {
    taskq::install_crypto_provider();
    reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("an HTTP/2 client")
}

backend_tests!(
    http2_clients_are_served_beside_http1_ones,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let h2 = http2_client();
        let call = |path: &str, body: Value| {
            h2.post(format!("{}{path}", srv.base_url))
                .header("x-api-key", &org.owner_key)
                .json(&body)
                .send()
        };
        let answer = call("/tasks", json!({ "tasks": [{ "title": "over h2" }] }))
            .await
            .expect("an answer over HTTP/2");
        assert_eq!(
            (answer.status(), answer.version()),
            (StatusCode::CREATED, reqwest::Version::HTTP_2)
        );
        let claimed = call("/tasks/claim", json!({}))
            .await
            .expect("a claim over HTTP/2");
        let task: Value = claimed.json().await.expect("a JSON task");
        assert_eq!(task["title"], "over h2", "{task}");
        // An HTTP/1.1 client of the same server is served as before.
        let (status, body) = srv.get(&org.owner_key, "/tasks?limit=1").await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
);

backend_tests!(
    hundreds_of_long_polls_on_one_http2_connection_hold_back_nothing,
    |srv| async move {
        const POLLS: usize = 300;
        let org = srv.create_org("dev").await;
        let h2 = http2_client();
        let polls = long_polls(&h2, &srv.base_url, &org.owner_key, POLLS);
        eventually(
            Duration::from_secs(20),
            "every long poll waiting",
            || async {
                let waiting = srv.metric("taskq_claim_waiters").await.unwrap_or(0);
                (waiting >= POLLS as u64).then_some(())
            },
        )
        .await;
        let listed = h2
            .get(format!("{}/tasks?limit=1", srv.base_url))
            .header("x-api-key", &org.owner_key)
            .send()
            .await
            .expect("a list beside the long polls");
        assert_eq!(listed.status(), StatusCode::OK);
        assert!(
            polls.iter().all(|p| !p.is_finished()),
            "the list was answered only once long polls had ended"
        );
        let created = srv.create_many(&org.owner_key, POLLS).await;
        assert_eq!(
            claimed(polls).await,
            created,
            "each long poll claimed a task of its own"
        );
    }
);

backend_tests!(a_413_closes_its_connection, |srv| async move {
    let org = srv.create_org("dev").await;
    taskq::install_crypto_provider();
    // One connection, reused whenever the server lets it be.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .expect("client");
    let url = format!("{}/tasks", srv.base_url);
    for round in 0..20 {
        assert_oversized_refused(&http, &url, &org.owner_key).await;
        // The next request on the same client is answered, never lost.
        let response = http
            .post(&url)
            .header("x-api-key", &org.owner_key)
            .json(&json!({ "tasks": [{ "title": format!("after {round}") }] }))
            .send()
            .await
            .unwrap_or_else(|e| panic!("round {round}: the request after a 413 was lost: {e}"));
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    assert_eq!(srv.list_all(&org.owner_key, "").await.len(), 20);
});

backend_tests!(logs_to_a_file_carry_no_colour_codes, |srv| async move {
    let org = srv.create_org("dev").await;
    srv.new_task(&org.owner_key, "something to log").await;
    let log = srv.server_log();
    assert!(log.contains("org actor"), "the log has lines: {log}");
    assert!(!log.contains('\u{1b}'), "no escape codes in a file: {log}");
});
