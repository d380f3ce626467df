//! POST /feedback: the task it becomes in the operator's feedback org, its
//! validation, its place among the limits, and the content filter (built-in
//! list, blocklist file, off, and a moderation endpoint).

use crate::common::limits::*;
use crate::common::*;
use chrono::Utc;
use reqwest::Method;

/// Number of tasks in the feedback org.
async fn inbox_size(srv: &TestServer, inbox: &FeedbackInbox) -> usize {
    srv.list_all(&inbox.key, "").await.len()
}

backend_tests!(
    feedback_becomes_a_task_in_the_feedback_org,
    |srv| async move {
        let inbox = feedback_inbox(&srv).await;
        let org = srv.create_org("dev").await;
        let alice = srv.add_member(&org, "alice@example.com", "user").await;

        let message = "The claim button does nothing\n\nSteps:\n1. open a task\n2. press claim";
        let before = Utc::now();
        let (status, resp) =
            send_feedback(&srv, &alice, json!({ "message": message, "type": "bug" })).await;
        assert_eq!(status, StatusCode::CREATED, "{resp}");
        let mut keys: Vec<&String> = resp.as_object().expect("object").keys().collect();
        keys.sort();
        assert_eq!(keys, ["created_at", "task_id"], "{resp}");
        let id = str_field(&resp, "task_id");
        assert!(is_canonical_uuid(&id), "{resp}");
        let created_at = ts(&resp, "created_at");
        assert!(
            (created_at - before).num_seconds().abs() < 60,
            "created_at {created_at} is not now"
        );

        let task = srv.get_task(&inbox.key, &id).await;
        assert_eq!(task["title"], "The claim button does nothing", "{task}");
        assert_eq!(task["description"], message, "{task}");
        assert_eq!(task["tags"], json!(["bug"]), "{task}");
        assert_eq!(
            task["metadata"],
            json!({ "from_org": org.org_id, "from_email": "alice@example.com", "type": "bug" }),
            "{task}"
        );
        assert!(
            (ts(&task, "created_at") - created_at).num_seconds().abs() <= 1,
            "{task} vs {resp}"
        );

        // Nothing lands in the sender's org, and the sender cannot read it.
        assert!(srv.list_all(&org.owner_key, "").await.is_empty());
        assert!(!srv.task_exists(&alice, &id).await);

        // Without a type it is general; a one-line message is its own title.
        let id = feedback_ok(
            &srv,
            &org.owner_key,
            json!({ "message": "Please add a dark mode" }),
        )
        .await;
        let task = srv.get_task(&inbox.key, &id).await;
        assert_eq!(task["title"], "Please add a dark mode");
        assert_eq!(task["description"], "Please add a dark mode");
        assert_eq!(task["tags"], json!(["general"]));
        assert_eq!(
            task["metadata"],
            json!({ "from_org": org.org_id, "from_email": org.owner_email, "type": "general" })
        );

        let id = feedback_ok(
            &srv,
            &alice,
            json!({ "message": "Bulk export\nto CSV, please", "type": "feature" }),
        )
        .await;
        let task = srv.get_task(&inbox.key, &id).await;
        assert_eq!(task["title"], "Bulk export");
        assert_eq!(task["tags"], json!(["feature"]));
        assert_eq!(task["metadata"]["type"], "feature");

        assert_eq!(inbox_size(&srv, &inbox).await, 3);
    }
);

backend_tests!(
    invalid_feedback_is_400_and_writes_nothing,
    |srv| async move {
        let inbox = feedback_inbox(&srv).await;
        let org = srv.create_org("dev").await;
        let key = org.owner_key.clone();

        let cases = [
            (json!({}), "message"),
            (json!({ "type": "bug" }), "message"),
            (json!({ "message": null }), "message"),
            (json!({ "message": 42 }), "message"),
            (json!({ "message": ["a list"] }), "message"),
            (json!({ "message": { "text": "an object" } }), "message"),
            (json!({ "message": "ok", "type": "praise" }), "type"),
            (json!({ "message": "ok", "type": 3 }), "type"),
        ];
        for (body, field) in cases {
            let (status, resp) = send_feedback(&srv, &key, body.clone()).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {resp}");
            assert_error_mentions(&resp, field);
        }
        let too_long = [
            "x".repeat(4097),
            format!("{}\n{}", "t".repeat(256), "x".repeat(3840)),
            "y".repeat(257),
            format!("{}\nthe rest is short", "y".repeat(257)),
            format!("{}\n{}", "é".repeat(256), "ü".repeat(3840)),
        ];
        for message in too_long {
            let (status, resp) = send_feedback(&srv, &key, json!({ "message": message })).await;
            assert_error(status, &resp, StatusCode::BAD_REQUEST);
        }
        let (status, text) = srv.post_raw(&key, "/feedback", "{\"message\": ").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "malformed JSON: {text}");
        assert_eq!(
            inbox_size(&srv, &inbox).await,
            0,
            "a refused message was stored"
        );

        // The limits themselves pass; they count characters, not bytes.
        let at_limit = [
            format!("{}\n{}", "t".repeat(256), "x".repeat(3839)),
            "y".repeat(256),
            format!("{}\n{}", "é".repeat(256), "ü".repeat(3839)),
        ];
        for message in &at_limit {
            assert_eq!(
                message.chars().count(),
                if message.len() < 300 { 256 } else { 4096 }
            );
            let id = feedback_ok(&srv, &key, json!({ "message": message })).await;
            let task = srv.get_task(&inbox.key, &id).await;
            assert_eq!(task["description"], message.as_str());
            assert_eq!(task["title"], message.lines().next().unwrap());
        }

        // Validation failures are not strikes: the sender is in good standing.
        assert_key_works(&srv, &key).await;
        assert_eq!(inbox_size(&srv, &inbox).await, at_limit.len());
    }
);

backend_tests!(
    feedback_is_a_write_but_not_against_the_task_quota,
    |srv| async move {
        let inbox = feedback_inbox(&srv).await;

        // No tasks left this month, yet feedback goes through.
        let full = create_org_with_limits(&srv, "dev", json!({ "tasks_per_month": 0 })).await;
        let refused = Call::create_one().send(&srv, &full.owner_key).await;
        assert_eq!(
            refused.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{}",
            refused.body
        );
        assert_eq!(refused.body["error"], "monthly task limit reached");
        for i in 0..3 {
            feedback_ok(
                &srv,
                &full.owner_key,
                json!({ "message": format!("idea number {i}") }),
            )
            .await;
        }
        let (status, quota) = srv.get(&full.owner_key, "/quota").await;
        assert_eq!(status, StatusCode::OK, "{quota}");
        assert_eq!(quota["limit"], 0, "{quota}");
        assert_eq!(quota["used"], 0, "feedback counted as a task: {quota}");
        assert_eq!(quota["remaining"], 0, "{quota}");

        // It takes a token from the sender's write bucket.
        let chatty = create_org_with_limits(&srv, "dev", json!({ "writes_per_minute": 3 })).await;
        let call = Call {
            method: Method::POST,
            path: "/feedback".into(),
            body: Some(json!({ "message": "one more thought", "type": "general" })),
            ok: StatusCode::CREATED,
        };
        let burst = until_refused(&srv, &chatty.owner_key, &call, 20).await;
        assert_burst(&burst, 3);
        assert_rate_limited(&burst.refused, "write", 3, "dev");
        assert_eq!(inbox_size(&srv, &inbox).await, 3 + burst.passed);
    }
);

backend_tests!(builtin_filter_rejects_abuse, |srv| async move {
    let inbox = feedback_inbox(&srv).await;
    let org = srv.create_org("dev").await;
    let ann = srv.add_member(&org, "ann@example.com", "user").await;
    let ben = srv.add_member(&org, "ben@example.com", "user").await;

    feedback_rejected(&srv, &ann, ABUSE).await;
    feedback_rejected(&srv, &ann, "Honestly, just KILL YOURSELF.").await;
    feedback_rejected(&srv, &ben, "Fuckwit.\nThe rest of this is polite.").await;
    let (status, body) = send_feedback(
        &srv,
        &ben,
        json!({ "message": "This is a bug report from a fuckwit", "type": "bug" }),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body,
        json!({ "error": "feedback rejected by the content filter" })
    );
    assert_eq!(
        inbox_size(&srv, &inbox).await,
        0,
        "a rejected message was stored"
    );

    // Ordinary words that contain no listed term pass.
    feedback_ok(
        &srv,
        &org.owner_key,
        json!({ "message": "The killer feature: skill-based routing. Yourself included?" }),
    )
    .await;
    assert_eq!(inbox_size(&srv, &inbox).await, 1);
});

backend_tests!(
    blocklist_file_extends_the_builtin_filter,
    |backend: Backend| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let list = dir.path().join("blocklist.txt");
        std::fs::write(&list, "zzbadwordzz\n").expect("write blocklist");
        let srv = TestServer::builder(backend)
            .env("TASKQ_FEEDBACK_BLOCKLIST", list.to_str().unwrap())
            .start()
            .await;
        let inbox = feedback_inbox(&srv).await;
        let org = srv.create_org("dev").await;
        let ann = srv.add_member(&org, "ann@example.com", "user").await;
        let ben = srv.add_member(&org, "ben@example.com", "user").await;

        feedback_rejected(&srv, &ann, "Your product is ZZBadWordZZ!").await;
        feedback_rejected(&srv, &ann, "zzbadwordzz").await;
        // The built-in list still applies.
        feedback_rejected(&srv, &ben, ABUSE).await;
        assert_eq!(inbox_size(&srv, &inbox).await, 0);

        // Whole words only.
        let id = feedback_ok(
            &srv,
            &ben,
            json!({ "message": "zzbadwordzzish is not the term" }),
        )
        .await;
        assert_eq!(
            srv.get_task(&inbox.key, &id).await["title"],
            "zzbadwordzzish is not the term"
        );
        assert_eq!(inbox_size(&srv, &inbox).await, 1);
    }
);

backend_tests!(
    filter_off_lets_everything_through,
    |backend: Backend| async move {
        let srv = TestServer::builder(backend)
            .env("TASKQ_FEEDBACK_FILTER", "off")
            .start()
            .await;
        let inbox = feedback_inbox(&srv).await;
        let org = srv.create_org("dev").await;
        let ann = srv.add_member(&org, "ann@example.com", "user").await;
        for _ in 0..4 {
            let id = feedback_ok(&srv, &ann, json!({ "message": ABUSE })).await;
            assert_eq!(srv.get_task(&inbox.key, &id).await["description"], ABUSE);
        }
        // Nothing was a strike.
        assert_key_works(&srv, &ann).await;
        assert_eq!(inbox_size(&srv, &inbox).await, 4);
    }
);

backend_tests!(moderation_endpoint_decides, |backend: Backend| async move {
    let moderation = Moderation::start().await;
    let srv = TestServer::builder(backend)
        .env("TASKQ_FEEDBACK_FILTER", &moderation.url)
        .start()
        .await;
    let inbox = feedback_inbox(&srv).await;
    let org = srv.create_org("dev").await;
    let ann = srv.add_member(&org, "ann@example.com", "user").await;

    let message = "All good here\nthanks for the queue";
    let id = feedback_ok(&srv, &ann, json!({ "message": message })).await;
    assert_eq!(srv.get_task(&inbox.key, &id).await["description"], message);
    let requests = moderation.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(
        requests[0].0.starts_with("POST /moderations "),
        "{requests:?}"
    );
    assert_eq!(requests[0].1["input"], message, "{requests:?}");

    // Flagged: 400, nothing stored, and a strike each; the third blocks.
    feedback_rejected(&srv, &ann, "please flagme").await;
    feedback_rejected(&srv, &ann, "flagme again").await;
    assert_key_works(&srv, &ann).await;
    feedback_rejected(&srv, &ann, "and flagme a third time").await;
    assert_key_dead(&srv, &ann).await;
    assert_eq!(moderation.requests().len(), 4);

    // An endpoint answering 500 is unavailable: 503, nothing written.
    let (status, body) = send_feedback(
        &srv,
        &org.owner_key,
        json!({ "message": "this will explode" }),
    )
    .await;
    assert_error(status, &body, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(inbox_size(&srv, &inbox).await, 1);
    assert_key_works(&srv, &org.owner_key).await;
});

backend_tests!(
    unreachable_moderation_is_503_without_strikes,
    |backend: Backend| async move {
        let url = closed_port_url().await;
        let srv = TestServer::builder(backend)
            .env("TASKQ_FEEDBACK_FILTER", &url)
            .start()
            .await;
        let inbox = feedback_inbox(&srv).await;
        let org = srv.create_org("dev").await;
        let ann = srv.add_member(&org, "ann@example.com", "user").await;

        for message in ["first try", "second try", "third try", "fourth try"] {
            let (status, body) = send_feedback(&srv, &ann, json!({ "message": message })).await;
            assert_error(status, &body, StatusCode::SERVICE_UNAVAILABLE);
        }
        assert_eq!(inbox_size(&srv, &inbox).await, 0);
        // Four failures, no strikes: the member is not blocked.
        assert_key_works(&srv, &ann).await;
        let (status, body) = srv
            .admin(
                Method::POST,
                &format!("/admin/orgs/{}/members/ann@example.com/keys", org.org_id),
                Some(json!({ "key_name": "ann-2" })),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "key reset: {body}");
    }
);
