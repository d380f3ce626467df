//! GET /members, PATCH /members/{email}, seats, GET/PATCH /me.

use crate::common::*;
use reqwest::Method;

const ADMIN_REQUIRED: &str = "admin or owner role required";

/// A dev org with a small vocabulary: `ui` (plain), `secure` and `vault`
/// (strict).
async fn org_with_tags(srv: &TestServer) -> Org {
    let org = srv.create_org("dev").await;
    srv.create_tags(
        &org.owner_key,
        json!([
            { "name": "ui" },
            { "name": "backend" },
            { "name": "secure", "strict": true, "description": "cleared staff" },
            { "name": "vault", "strict": true, "description": "vault access" },
        ]),
    )
    .await;
    org
}

fn assert_member_shape(m: &Value) {
    for key in ["email", "role", "joined_at"] {
        assert!(m[key].is_string(), "`{key}` in {m}");
    }
    ts(m, "joined_at");
    assert!(m["profile_tags"].is_array(), "{m}");
    assert!(m["team_tags"].is_array(), "{m}");
    assert!(m["seated"].is_boolean(), "{m}");
}

/// PATCH /members/{email} expected to fail with `expected`; checks that the
/// member listing did not change.
async fn assert_patch_refused(
    srv: &TestServer,
    caller: &str,
    email: &str,
    body: Value,
    expected: StatusCode,
) -> Value {
    let before = srv.list_members(caller).await;
    let (status, resp) = srv
        .patch(caller, &format!("/members/{email}"), body.clone())
        .await;
    assert_error(status, &resp, expected);
    let after = srv.list_members(caller).await;
    assert_eq!(
        before, after,
        "refused PATCH {email} {body} changed members"
    );
    resp
}

backend_tests!(members_are_listed_in_join_order, |srv| async move {
    let org = srv.create_org("dev").await;
    let alice = srv.add_member(&org, "alice@example.com", "user").await;
    srv.add_member(&org, "bob@example.com", "admin").await;

    // Any member may list.
    let members = srv.list_members(&alice).await;
    let emails: Vec<String> = members.iter().map(|m| str_field(m, "email")).collect();
    assert_eq!(
        emails,
        [
            org.owner_email.as_str(),
            "alice@example.com",
            "bob@example.com"
        ]
    );
    let roles: Vec<String> = members.iter().map(|m| str_field(m, "role")).collect();
    assert_eq!(roles, ["owner", "user", "admin"]);
    for m in &members {
        assert_member_shape(m);
        assert_eq!(m["profile_tags"], json!([]), "{m}");
        assert_eq!(m["team_tags"], json!([]), "{m}");
    }
    let joined: Vec<_> = members.iter().map(|m| ts(m, "joined_at")).collect();
    assert!(joined.windows(2).all(|w| w[0] <= w[1]), "{members:?}");
    assert_eq!(members[0]["seated"], true, "the owner is seated");
});

backend_tests!(role_changes_follow_the_role_rules, |srv| async move {
    let org = srv.create_org("dev").await;
    let owner = &org.owner_key;
    let user = srv.add_member(&org, "user@example.com", "user").await;
    let admin = srv.add_member(&org, "admin@example.com", "admin").await;
    srv.add_member(&org, "carol@example.com", "user").await;

    // A user may change nobody, not even themself.
    for (email, body) in [
        ("carol@example.com", json!({ "role": "admin" })),
        ("user@example.com", json!({ "role": "admin" })),
        (org.owner_email.as_str(), json!({ "role": "user" })),
    ] {
        let resp = assert_patch_refused(&srv, &user, email, body, StatusCode::FORBIDDEN).await;
        assert_eq!(resp["error"], ADMIN_REQUIRED, "{resp}");
    }

    // An admin may promote a user to admin and back, but may not make anyone
    // owner nor touch an owner.
    let m = srv
        .patch_member(&admin, "carol@example.com", json!({ "role": "admin" }))
        .await;
    assert_member_shape(&m);
    assert_eq!(m["email"], "carol@example.com");
    assert_eq!(m["role"], "admin");
    assert_eq!(
        srv.member(owner, "carol@example.com").await["role"],
        "admin"
    );
    srv.patch_member(&admin, "carol@example.com", json!({ "role": "user" }))
        .await;
    assert_patch_refused(
        &srv,
        &admin,
        "carol@example.com",
        json!({ "role": "owner" }),
        StatusCode::FORBIDDEN,
    )
    .await;
    assert_patch_refused(
        &srv,
        &admin,
        "admin@example.com",
        json!({ "role": "owner" }),
        StatusCode::FORBIDDEN,
    )
    .await;
    assert_patch_refused(
        &srv,
        &admin,
        &org.owner_email,
        json!({ "role": "admin" }),
        StatusCode::FORBIDDEN,
    )
    .await;
    assert_patch_refused(
        &srv,
        &admin,
        &org.owner_email,
        json!({ "profile_tags": [] }),
        StatusCode::FORBIDDEN,
    )
    .await;

    // The owner may make another owner, then step down; the last owner
    // cannot demote themself.
    let m = srv
        .patch_member(owner, "carol@example.com", json!({ "role": "owner" }))
        .await;
    assert_eq!(m["role"], "owner");
    let m = srv
        .patch_member(owner, &org.owner_email, json!({ "role": "admin" }))
        .await;
    assert_eq!(m["role"], "admin");
    let carol = srv
        .admin(
            Method::POST,
            &format!("/admin/orgs/{}/members/carol@example.com/keys", org.org_id),
            Some(json!({})),
        )
        .await;
    assert_eq!(carol.0, StatusCode::CREATED, "{}", carol.1);
    let carol = str_field(&carol.1, "api_key");
    for role in ["admin", "user"] {
        assert_patch_refused(
            &srv,
            &carol,
            "carol@example.com",
            json!({ "role": role }),
            StatusCode::CONFLICT,
        )
        .await;
    }
    // The former owner is an admin now and cannot demote the new owner.
    assert_patch_refused(
        &srv,
        owner,
        "carol@example.com",
        json!({ "role": "user" }),
        StatusCode::FORBIDDEN,
    )
    .await;
    assert_eq!(
        srv.member(owner, "carol@example.com").await["role"],
        "owner"
    );
});

backend_tests!(member_patch_bodies_are_validated, |srv| async move {
    let org = org_with_tags(&srv).await;
    let owner = &org.owner_key;
    srv.add_member(&org, "alice@example.com", "user").await;
    let alice = "alice@example.com";

    let cases = [
        (json!({}), None),
        (json!({ "role": "emperor" }), Some("role")),
        (json!({ "role": 1 }), Some("role")),
        (json!({ "profile_tags": "ui" }), Some("profile_tags")),
        (json!({ "profile_tags": [1] }), Some("profile_tags")),
        (json!({ "profile_tags": ["ui", "nope"] }), None),
        (json!({ "nickname": "al" }), Some("nickname")),
        (
            json!({ "role": "admin", "nickname": "al" }),
            Some("nickname"),
        ),
        // Seats only exist on pro and enterprise.
        (json!({ "seated": true }), Some("seat")),
        (json!({ "seated": false }), Some("seat")),
    ];
    for (body, field) in cases {
        let resp =
            assert_patch_refused(&srv, owner, alice, body.clone(), StatusCode::BAD_REQUEST).await;
        if let Some(field) = field {
            assert_error_mentions(&resp, field);
        }
    }
    for raw in ["{\"role\": ", "not json", ""] {
        let (status, text) = srv
            .send_raw(Method::PATCH, owner, &format!("/members/{alice}"), raw)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{raw:?}: {text}");
    }

    // Unknown member.
    assert_patch_refused(
        &srv,
        owner,
        "ghost@example.com",
        json!({ "role": "admin" }),
        StatusCode::NOT_FOUND,
    )
    .await;

    // `seated` on free is refused too.
    let free = srv.create_org("free").await;
    srv.add_member(&free, "f@example.com", "user").await;
    assert_patch_refused(
        &srv,
        &free.owner_key,
        "f@example.com",
        json!({ "seated": false }),
        StatusCode::BAD_REQUEST,
    )
    .await;

    let m = srv.member(owner, alice).await;
    assert_eq!(m["role"], "user");
    assert_eq!(m["profile_tags"], json!([]));
});

backend_tests!(admins_set_profile_tags_including_strict, |srv| async move {
    let org = org_with_tags(&srv).await;
    let admin = srv.add_member(&org, "admin@example.com", "admin").await;
    let alice = srv.add_member(&org, "alice@example.com", "user").await;

    let m = srv
        .patch_member(
            &admin,
            "alice@example.com",
            json!({ "profile_tags": ["ui", "secure"] }),
        )
        .await;
    assert_member_shape(&m);
    assert_eq!(sorted_strings(&m["profile_tags"]), ["secure", "ui"]);
    assert_eq!(m["role"], "user", "role unchanged: {m}");
    let listed = srv.member(&alice, "alice@example.com").await;
    assert_eq!(sorted_strings(&listed["profile_tags"]), ["secure", "ui"]);
    let (status, me) = srv.get(&alice, "/me").await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(sorted_strings(&me["profile_tags"]), ["secure", "ui"]);

    // Role and tags together; an empty list clears.
    let m = srv
        .patch_member(
            &org.owner_key,
            "alice@example.com",
            json!({ "role": "admin", "profile_tags": [] }),
        )
        .await;
    assert_eq!(m["role"], "admin");
    assert_eq!(m["profile_tags"], json!([]));
    let (_, me) = srv.get(&alice, "/me").await;
    assert_eq!(me["role"], "admin");
    assert_eq!(me["profile_tags"], json!([]));
});

backend_tests!(seats_on_a_pro_org, |srv| async move {
    let org = srv.create_org_seats("pro", 2).await;
    let owner = &org.owner_key;
    let alice = srv.add_member(&org, "alice@example.com", "user").await;
    let admin = srv.add_member(&org, "admin@example.com", "admin").await;

    // Two seats: the owner and alice; the admin joined with none free.
    assert_eq!(srv.member(owner, &org.owner_email).await["seated"], true);
    assert_eq!(srv.member(owner, "alice@example.com").await["seated"], true);
    assert_eq!(
        srv.member(owner, "admin@example.com").await["seated"],
        false
    );

    // No seat free: granting one is 400.
    let resp = assert_patch_refused(
        &srv,
        owner,
        "admin@example.com",
        json!({ "seated": true }),
        StatusCode::BAD_REQUEST,
    )
    .await;
    assert_error_mentions(&resp, "seat");
    // Users cannot move seats.
    let (status, _) = srv.get(&alice, "/members").await;
    assert_eq!(status, StatusCode::OK);
    assert_patch_refused(
        &srv,
        &alice,
        "alice@example.com",
        json!({ "seated": false }),
        StatusCode::FORBIDDEN,
    )
    .await;

    // Revoking alice's seat stops her key at once.
    let m = srv
        .patch_member(owner, "alice@example.com", json!({ "seated": false }))
        .await;
    assert_eq!(m["seated"], false);
    let (status, body) = srv.get(&alice, "/tasks").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"], "invalid api key");
    let (status, body) = srv
        .post(&alice, "/tasks", json!({ "tasks": [{ "title": "x" }] }))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");

    // The freed seat goes to the admin, whose key works.
    let m = srv
        .patch_member(owner, "admin@example.com", json!({ "seated": true }))
        .await;
    assert_eq!(m["seated"], true);
    let (status, body) = srv.get(&admin, "/tasks").await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Now alice cannot get hers back until one is freed.
    assert_patch_refused(
        &srv,
        owner,
        "alice@example.com",
        json!({ "seated": true }),
        StatusCode::BAD_REQUEST,
    )
    .await;
    let (status, _) = srv.get(&alice, "/tasks").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    srv.patch_member(owner, "admin@example.com", json!({ "seated": false }))
        .await;
    let m = srv
        .patch_member(owner, "alice@example.com", json!({ "seated": true }))
        .await;
    assert_eq!(m["seated"], true);
    let (status, body) = srv.get(&alice, "/tasks").await;
    assert_eq!(status, StatusCode::OK, "re-seated key works again: {body}");
    let (status, body) = srv.get(&admin, "/tasks").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(srv.list_all(owner, "").await.is_empty(), "nothing written");

    // Raising the org's seats frees one more.
    let (status, body) = srv
        .admin(
            Method::PATCH,
            &format!("/admin/orgs/{}", org.org_id),
            Some(json!({ "seats": 3 })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    srv.patch_member(owner, "admin@example.com", json!({ "seated": true }))
        .await;
    let (status, _) = srv.get(&admin, "/tasks").await;
    assert_eq!(status, StatusCode::OK);
});

backend_tests!(me_shows_and_updates_own_profile, |srv| async move {
    let org = org_with_tags(&srv).await;
    let alice = srv.add_member(&org, "alice@example.com", "user").await;

    let (status, me) = srv.get(&alice, "/me").await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(me["email"], "alice@example.com", "{me}");
    assert_eq!(me["role"], "user", "{me}");
    assert_eq!(me["profile_tags"], json!([]), "{me}");
    let (status, me) = srv.get(&org.owner_key, "/me").await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(me["email"], org.owner_email.as_str());
    assert_eq!(me["role"], "owner");

    let (status, m) = srv
        .patch(&alice, "/me", json!({ "profile_tags": ["ui", "backend"] }))
        .await;
    assert_eq!(status, StatusCode::OK, "{m}");
    assert_member_shape(&m);
    assert_eq!(m["email"], "alice@example.com");
    assert_eq!(sorted_strings(&m["profile_tags"]), ["backend", "ui"]);
    let (_, me) = srv.get(&alice, "/me").await;
    assert_eq!(sorted_strings(&me["profile_tags"]), ["backend", "ui"]);
    assert_eq!(
        sorted_strings(&srv.member(&org.owner_key, "alice@example.com").await["profile_tags"]),
        ["backend", "ui"]
    );

    // Bad bodies change nothing.
    let cases = [
        (json!({}), Some("profile_tags")),
        (json!({ "profile_tags": "ui" }), Some("profile_tags")),
        (json!({ "profile_tags": [7] }), Some("profile_tags")),
        (json!({ "profile_tags": ["ui", "nope"] }), None),
    ];
    for (body, field) in cases {
        let (status, resp) = srv.patch(&alice, "/me", body.clone()).await;
        assert_error(status, &resp, StatusCode::BAD_REQUEST);
        if let Some(field) = field {
            assert_error_mentions(&resp, field);
        }
    }
    for raw in ["{\"profile_tags\": [", "nope", ""] {
        let (status, text) = srv.send_raw(Method::PATCH, &alice, "/me", raw).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{raw:?}: {text}");
    }
    // A user cannot promote themself through /me.
    let (status, resp) = srv
        .patch(
            &alice,
            "/me",
            json!({ "profile_tags": ["ui", "backend"], "role": "owner" }),
        )
        .await;
    assert!(
        status == StatusCode::OK || status == StatusCode::BAD_REQUEST,
        "role through /me: {status} {resp}"
    );
    let (_, me) = srv.get(&alice, "/me").await;
    assert_eq!(me["role"], "user");
    assert_eq!(sorted_strings(&me["profile_tags"]), ["backend", "ui"]);
});

backend_tests!(users_cannot_self_assign_strict_tags, |srv| async move {
    let org = org_with_tags(&srv).await;
    let owner = &org.owner_key;
    let alice = srv.add_member(&org, "alice@example.com", "user").await;
    let bob = srv.add_member(&org, "bob@example.com", "user").await;
    let admin = srv.add_member(&org, "admin@example.com", "admin").await;

    // Bob asks for a strict tag: dropped silently, the rest applies.
    let (status, m) = srv
        .patch(&bob, "/me", json!({ "profile_tags": ["vault", "ui"] }))
        .await;
    assert_eq!(status, StatusCode::OK, "{m}");
    assert_eq!(sorted_strings(&m["profile_tags"]), ["ui"]);
    let (_, me) = srv.get(&bob, "/me").await;
    assert_eq!(sorted_strings(&me["profile_tags"]), ["ui"]);

    // Alice was given `secure` by the owner: she keeps it, but cannot add
    // `vault`.
    srv.patch_member(
        owner,
        "alice@example.com",
        json!({ "profile_tags": ["secure"] }),
    )
    .await;
    let (status, m) = srv
        .patch(
            &alice,
            "/me",
            json!({ "profile_tags": ["secure", "vault", "backend"] }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{m}");
    assert_eq!(sorted_strings(&m["profile_tags"]), ["backend", "secure"]);
    assert_eq!(
        sorted_strings(&srv.member(owner, "alice@example.com").await["profile_tags"]),
        ["backend", "secure"]
    );

    // An admin may give themself strict tags.
    let (status, m) = srv
        .patch(&admin, "/me", json!({ "profile_tags": ["vault"] }))
        .await;
    assert_eq!(status, StatusCode::OK, "{m}");
    assert_eq!(sorted_strings(&m["profile_tags"]), ["vault"]);

    // The dropped tag really is absent: bob's claims skip vault work, the
    // admin's do not.
    let task = srv
        .create_task(
            owner,
            json!({ "title": "open the vault", "tags": ["vault"] }),
        )
        .await;
    assert!(
        srv.claim(&bob, json!({ "include_context": false }))
            .await
            .is_none(),
        "bob must not claim vault work"
    );
    assert!(
        srv.claim(&alice, json!({ "include_context": false }))
            .await
            .is_none(),
        "alice must not claim vault work"
    );
    let got = srv
        .claim(&admin, json!({ "include_context": false }))
        .await
        .expect("the admin holds `vault`");
    assert_eq!(got["task_id"], task.as_str());
});
