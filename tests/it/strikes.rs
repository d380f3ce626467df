//! Abuse strikes from rejected feedback: three block a member (by email, in
//! every org, revoked keys included) until the operator lifts it; ten
//! across one org's members suspend the org.

use crate::common::limits::*;
use crate::common::*;
use reqwest::Method;

/// The operator's key reset for a member.
async fn reset_key(srv: &TestServer, org: &Org, email: &str) -> (StatusCode, Value) {
    srv.admin(
        Method::POST,
        &format!("/admin/orgs/{}/members/{email}/keys", org.org_id),
        Some(json!({ "key_name": unique("reset") })),
    )
    .await
}

/// `POST /admin/orgs/{id}/members` for a user.
async fn join(srv: &TestServer, org: &Org, email: &str) -> (StatusCode, Value) {
    srv.admin(
        Method::POST,
        &format!("/admin/orgs/{}/members", org.org_id),
        Some(json!({ "email": email, "role": "user" })),
    )
    .await
}

fn assert_member_blocked(status: StatusCode, body: &Value) {
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body, &json!({ "error": "member blocked" }));
}

/// Three strikes.
async fn strike_out(srv: &TestServer, key: &str) {
    for _ in 0..3 {
        feedback_rejected(srv, key, ABUSE).await;
    }
}

backend_tests!(
    three_rejections_block_the_member_everywhere,
    |srv| async move {
        let a = srv.create_org("dev").await;
        let b = srv.create_org("dev").await;
        let c = srv.create_org("dev").await;
        let email = "mallory@example.com";
        let a1 = srv.add_member(&a, email, "user").await;
        let (_, a2) = srv.new_key(&a1, "mallory-laptop").await;
        let b1 = srv.add_member(&b, email, "admin").await;
        let bob = srv.add_member(&a, "bob@example.com", "user").await;

        feedback_rejected(&srv, &a1, ABUSE).await;
        feedback_rejected(&srv, &a2, "You utter fuckwit").await;

        // Two strikes: still in good standing everywhere.
        for key in [&a1, &a2, &b1] {
            assert_key_works(&srv, key).await;
        }
        let (status, body) = reset_key(&srv, &a, email).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let a3 = str_field(&body, "api_key");
        assert_key_works(&srv, &a3).await;

        // The third strike, sent from the other org, counts for the email.
        feedback_rejected(&srv, &b1, "kill yourself").await;
        for key in [&a1, &a2, &a3, &b1] {
            assert_key_dead(&srv, key).await;
        }
        let (status, body) = srv.post(&a1, "/keys", json!({ "name": "again" })).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert_eq!(body, json!({ "error": "invalid api key" }));
        let (status, body) = send_feedback(&srv, &b1, json!({ "message": "sorry" })).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");

        // No key can be issued to them, in their orgs or a new one.
        for org in [&a, &b] {
            let (status, body) = reset_key(&srv, org, email).await;
            assert_member_blocked(status, &body);
        }
        let (status, body) = join(&srv, &c, email).await;
        assert_member_blocked(status, &body);
        let members = srv.list_members(&c.owner_key).await;
        assert!(
            members.iter().all(|m| m["email"] != email),
            "the blocked member joined: {members:?}"
        );

        // Nobody else is affected.
        for key in [&bob, &a.owner_key, &b.owner_key, &c.owner_key] {
            assert_key_works(&srv, key).await;
        }
        feedback_ok(&srv, &bob, json!({ "message": "all fine on my side" })).await;
    }
);

backend_tests!(strikes_on_a_revoked_key_still_count, |srv| async move {
    let org = srv.create_org("dev").await;
    let email = "eve@example.com";
    let first = srv.add_member(&org, email, "user").await;
    let (a_id, a) = srv.new_key(&first, "eve-a").await;
    let (_, b) = srv.new_key(&first, "eve-b").await;

    feedback_rejected(&srv, &a, ABUSE).await;
    let (status, body) = srv.delete(&first, &format!("/keys/{a_id}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_key_dead(&srv, &a).await;

    feedback_rejected(&srv, &b, ABUSE).await;
    assert_key_works(&srv, &b).await;
    feedback_rejected(&srv, &b, ABUSE).await;
    for key in [&first, &b] {
        assert_key_dead(&srv, key).await;
    }
    let (status, body) = reset_key(&srv, &org, email).await;
    assert_member_blocked(status, &body);
});

backend_tests!(
    unblock_lifts_the_block_but_not_the_revoked_keys,
    |srv| async move {
        let a = srv.create_org("dev").await;
        let c = srv.create_org("dev").await;
        let email = "trent@example.com";
        let old = srv.add_member(&a, email, "user").await;
        strike_out(&srv, &old).await;
        assert_key_dead(&srv, &old).await;

        let (status, body) = srv
            .admin(
                Method::POST,
                "/admin/members/unblock",
                Some(json!({ "email": email })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body, json!({ "email": email, "unblocked": true }));

        // The old keys stay revoked; new ones can be issued and work.
        assert_key_dead(&srv, &old).await;
        let (status, body) = reset_key(&srv, &a, email).await;
        assert_eq!(
            status,
            StatusCode::CREATED,
            "key reset after unblock: {body}"
        );
        let fresh = str_field(&body, "api_key");
        let (status, me) = srv.get(&fresh, "/me").await;
        assert_eq!(status, StatusCode::OK, "{me}");
        assert_eq!(me["email"], email);
        let (status, body) = join(&srv, &c, email).await;
        assert_eq!(status, StatusCode::CREATED, "joining after unblock: {body}");
        let in_c = str_field(&body, "api_key");
        assert_key_works(&srv, &in_c).await;
        srv.new_key(&fresh, "trent-new").await;

        // The strikes were cleared: it takes three new ones to block again.
        feedback_rejected(&srv, &fresh, ABUSE).await;
        feedback_rejected(&srv, &in_c, ABUSE).await;
        assert_key_works(&srv, &fresh).await;
        assert_key_works(&srv, &in_c).await;
        feedback_rejected(&srv, &fresh, ABUSE).await;
        assert_key_dead(&srv, &fresh).await;
        assert_key_dead(&srv, &in_c).await;
        let (status, body) = reset_key(&srv, &c, email).await;
        assert_member_blocked(status, &body);
    }
);

backend_tests!(ten_strikes_suspend_the_org, |srv| async move {
    let org = srv.create_org("dev").await;
    let other = srv.create_org("dev").await;
    let quiet = srv.add_member(&org, "quiet@example.com", "user").await;
    let mut trolls = Vec::new();
    for i in 0..4 {
        trolls.push(
            srv.add_member(&org, &format!("troll{i}@example.com"), "user")
                .await,
        );
    }
    let task = srv.new_task(&org.owner_key, "work in progress").await;

    // Nine strikes block three members; the org carries on.
    for troll in &trolls[..3] {
        strike_out(&srv, troll).await;
        assert_key_dead(&srv, troll).await;
    }
    for key in [&org.owner_key, &quiet, &trolls[3]] {
        assert_key_works(&srv, key).await;
    }

    // The tenth suspends it, for members with no strikes too.
    feedback_rejected(&srv, &trolls[3], ABUSE).await;
    let routes: Vec<(Method, &str, Option<Value>)> = vec![
        (Method::GET, "/tasks", None),
        (
            Method::POST,
            "/tasks",
            Some(json!({ "tasks": [{ "title": "x" }] })),
        ),
        (
            Method::POST,
            "/tasks/get",
            Some(json!({ "task_ids": [task] })),
        ),
        (
            Method::POST,
            "/tasks/update",
            Some(json!({ "updates": [{ "task_id": task, "title": "y" }] })),
        ),
        (Method::POST, "/tasks/claim", Some(json!({}))),
        (Method::GET, "/tags", None),
        (
            Method::POST,
            "/tags",
            Some(json!({ "tags": [{ "name": "z" }] })),
        ),
        (Method::GET, "/members", None),
        (Method::GET, "/me", None),
        (Method::PATCH, "/me", Some(json!({ "profile_tags": [] }))),
        (Method::GET, "/teams", None),
        (Method::GET, "/keys", None),
        (Method::POST, "/keys", Some(json!({ "name": "k" }))),
        (Method::GET, "/quota", None),
        (
            Method::POST,
            "/feedback",
            Some(json!({ "message": "why am I suspended?" })),
        ),
    ];
    for key in [&org.owner_key, &quiet, &trolls[3]] {
        for (method, path, body) in &routes {
            let reply = send(&srv, method.clone(), key, path, body.as_ref()).await;
            assert_eq!(
                reply.status,
                StatusCode::FORBIDDEN,
                "{method} {path}: {}",
                reply.body
            );
            assert_eq!(
                reply.body,
                json!({ "error": "organization suspended" }),
                "{method} {path}"
            );
        }
    }

    // Other orgs carry on.
    assert_key_works(&srv, &other.owner_key).await;
    srv.new_task(&other.owner_key, "unaffected").await;
});
