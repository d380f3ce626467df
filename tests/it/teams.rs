//! Teams: the paid-tier gate, CRUD, limits, manual membership, and team tags
//! flowing into GET /members and claims.

use crate::common::*;
use reqwest::Method;

const ADMIN_REQUIRED: &str = "admin or owner role required";

/// A dev org with tags `ui`, `backend` and the strict `secure`.
async fn org_with_tags(srv: &TestServer, tier: &str) -> Org {
    let org = srv.create_org(tier).await;
    srv.create_tags(
        &org.owner_key,
        json!([
            { "name": "ui" },
            { "name": "backend" },
            { "name": "secure", "strict": true, "description": "cleared staff" },
        ]),
    )
    .await;
    org
}

/// GET /teams expecting 200; the teams' names in the order served.
async fn team_names(srv: &TestServer, key: &str) -> Vec<String> {
    let (status, body) = srv.get(key, "/teams").await;
    assert_eq!(status, StatusCode::OK, "GET /teams: {body}");
    body.as_array()
        .unwrap_or_else(|| panic!("GET /teams is not an array: {body}"))
        .iter()
        .map(|t| str_field(t, "name"))
        .collect()
}

/// The emails of a team's memberships, in the order served.
fn member_emails(team: &Value) -> Vec<String> {
    team["members"]
        .as_array()
        .unwrap_or_else(|| panic!("expected `members` in {team}"))
        .iter()
        .map(|m| str_field(m, "email"))
        .collect()
}

/// Asserts the call is refused with `expected` and GET /teams (with every
/// team's members) is unchanged.
async fn assert_team_refused(
    srv: &TestServer,
    key: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
    expected: StatusCode,
) -> Value {
    let snapshot = || async {
        let (status, list) = srv.get(key, "/teams").await;
        assert_eq!(status, StatusCode::OK, "{list}");
        let mut full = Vec::new();
        for t in list.as_array().unwrap() {
            full.push(srv.get_team(key, t["name"].as_str().unwrap()).await);
        }
        full
    };
    let before = snapshot().await;
    let headers = [("x-api-key", key)];
    let (status, text) = srv
        .raw(
            method.clone(),
            path,
            &headers,
            body.as_ref().map(|b| b.to_string()),
        )
        .await;
    let resp: Value = serde_json::from_str(&text)
        .unwrap_or_else(|_| panic!("{method} {path}: non-JSON body {text:?}"));
    assert_error(status, &resp, expected);
    assert_eq!(
        before,
        snapshot().await,
        "refused {method} {path} {body:?} changed teams"
    );
    resp
}

fn assert_team_shape(t: &Value) {
    assert!(t["name"].is_string(), "{t}");
    assert!(t["tags"].is_array(), "{t}");
    assert!(
        t["description"].is_string() || t["description"].is_null(),
        "{t}"
    );
    assert!(t["idp_only"].is_boolean(), "{t}");
    assert!(t["created_by"].is_string(), "{t}");
    ts(t, "created_at");
}

backend_tests!(
    free_tier_gets_upgrade_on_every_team_route,
    |srv| async move {
        let org = srv.create_org("free").await;
        srv.add_member(&org, "alice@example.com", "user").await;
        let key = &org.owner_key;
        let routes = [
            (Method::GET, "/teams".to_string(), None),
            (Method::GET, "/teams/eng".to_string(), None),
            (
                Method::POST,
                "/teams".to_string(),
                Some(json!({ "name": "eng" })),
            ),
            (
                Method::PATCH,
                "/teams/eng".to_string(),
                Some(json!({ "description": "x" })),
            ),
            (Method::DELETE, "/teams/eng".to_string(), None),
            (
                Method::POST,
                "/teams/eng/members".to_string(),
                Some(json!({ "email": "alice@example.com" })),
            ),
            (
                Method::DELETE,
                "/teams/eng/members/alice@example.com".to_string(),
                None,
            ),
        ];
        for (method, path, body) in &routes {
            let (status, text) = srv
                .raw(
                    method.clone(),
                    path,
                    &[("x-api-key", key)],
                    body.as_ref().map(|b| b.to_string()),
                )
                .await;
            let resp: Value = serde_json::from_str(&text)
                .unwrap_or_else(|_| panic!("{method} {path}: non-JSON body {text:?}"));
            assert_error(status, &resp, StatusCode::FORBIDDEN);
            assert_eq!(resp["upgrade"], true, "{method} {path}: {resp}");
        }

        // Upgrading opens them, and nothing was created meanwhile.
        let (status, body) = srv
            .admin(
                Method::PATCH,
                &format!("/admin/orgs/{}", org.org_id),
                Some(json!({ "tier": "dev" })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(team_names(&srv, key).await.is_empty());
        srv.create_team(key, json!({ "name": "eng" })).await;
        assert_eq!(team_names(&srv, key).await, ["eng"]);
    }
);

backend_tests!(team_create_read_update_delete, |srv| async move {
    let org = org_with_tags(&srv, "dev").await;
    let key = &org.owner_key;
    assert!(team_names(&srv, key).await.is_empty());

    let before = chrono::Utc::now() - chrono::Duration::seconds(5);
    let team = srv
        .create_team(
            key,
            json!({ "name": "Backend", "tags": ["backend", "ui"], "description": "server folks" }),
        )
        .await;
    assert_team_shape(&team);
    assert_eq!(team["name"], "backend", "names are lowercased: {team}");
    assert_eq!(sorted_strings(&team["tags"]), ["backend", "ui"]);
    assert_eq!(team["description"], "server folks");
    assert_eq!(team["idp_only"], false);
    assert_eq!(team["created_by"], org.owner_email.as_str());
    assert!(ts(&team, "created_at") >= before);

    let bare = srv.create_team(key, json!({ "name": "alpha" })).await;
    assert_team_shape(&bare);
    assert_eq!(bare["tags"], json!([]));
    assert!(bare["description"].is_null(), "{bare}");
    assert_eq!(bare["idp_only"], false);

    // Listing is sorted by name; GET by name matches case-insensitively.
    assert_eq!(team_names(&srv, key).await, ["alpha", "backend"]);
    let (_, list) = srv.get(key, "/teams").await;
    assert_eq!(list[1], team, "GET /teams serves the created object");
    let got = srv.get_team(key, "BACKEND").await;
    assert_eq!(got["members"], json!([]), "{got}");
    for field in [
        "name",
        "tags",
        "description",
        "idp_only",
        "created_by",
        "created_at",
    ] {
        assert_eq!(got[field], team[field], "{field}: {got}");
    }
    let (status, body) = srv.get(key, "/teams/nobody").await;
    assert_error(status, &body, StatusCode::NOT_FOUND);

    // PATCH: only present keys change.
    let (status, t) = srv
        .patch(key, "/teams/backend", json!({ "description": null }))
        .await;
    assert_eq!(status, StatusCode::OK, "{t}");
    assert!(t["description"].is_null(), "{t}");
    assert_eq!(sorted_strings(&t["tags"]), ["backend", "ui"], "{t}");
    let (status, t) = srv
        .patch(key, "/teams/Backend", json!({ "tags": [] }))
        .await;
    assert_eq!(status, StatusCode::OK, "{t}");
    assert_eq!(t["tags"], json!([]), "{t}");
    assert!(t["description"].is_null(), "{t}");
    let (status, t) = srv
        .patch(
            key,
            "/teams/backend",
            json!({ "tags": ["secure"], "description": "on call" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{t}");
    assert_eq!(t["tags"], json!(["secure"]));
    assert_eq!(t["description"], "on call");
    assert_eq!(t["name"], "backend");
    assert_eq!(t["idp_only"], false);
    let got = srv.get_team(key, "backend").await;
    assert_eq!(got["tags"], json!(["secure"]));
    assert_eq!(got["description"], "on call");

    // DELETE: 204, then gone.
    let (status, body) = srv.delete(key, "/teams/BACKEND").await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(team_names(&srv, key).await, ["alpha"]);
    let (status, body) = srv.get(key, "/teams/backend").await;
    assert_error(status, &body, StatusCode::NOT_FOUND);
    let (status, body) = srv.delete(key, "/teams/backend").await;
    assert_error(status, &body, StatusCode::NOT_FOUND);
    let (status, body) = srv
        .patch(key, "/teams/backend", json!({ "description": "x" }))
        .await;
    assert_error(status, &body, StatusCode::NOT_FOUND);

    // The name is free again.
    srv.create_team(key, json!({ "name": "backend" })).await;
});

backend_tests!(team_writes_need_admin_or_owner, |srv| async move {
    let org = org_with_tags(&srv, "pro").await;
    let user = srv.add_member(&org, "user@example.com", "user").await;
    let admin = srv.add_member(&org, "admin@example.com", "admin").await;
    srv.create_team(&org.owner_key, json!({ "name": "eng" }))
        .await;

    // Reads need only the paid tier.
    assert_eq!(team_names(&srv, &user).await, ["eng"]);
    assert_eq!(srv.get_team(&user, "eng").await["name"], "eng");

    let writes = [
        (Method::POST, "/teams", Some(json!({ "name": "mine" }))),
        (
            Method::PATCH,
            "/teams/eng",
            Some(json!({ "description": "x" })),
        ),
        (Method::DELETE, "/teams/eng", None),
        (
            Method::POST,
            "/teams/eng/members",
            Some(json!({ "email": "user@example.com" })),
        ),
    ];
    for (method, path, body) in writes {
        let resp =
            assert_team_refused(&srv, &user, method, path, body, StatusCode::FORBIDDEN).await;
        assert_eq!(resp["error"], ADMIN_REQUIRED, "{path}: {resp}");
    }
    srv.add_to_team(&org.owner_key, "eng", "user@example.com")
        .await;
    let resp = assert_team_refused(
        &srv,
        &user,
        Method::DELETE,
        "/teams/eng/members/user@example.com",
        None,
        StatusCode::FORBIDDEN,
    )
    .await;
    assert_eq!(resp["error"], ADMIN_REQUIRED);

    // An admin may do all of it.
    let t = srv.create_team(&admin, json!({ "name": "ops" })).await;
    assert_eq!(t["created_by"], "admin@example.com");
    let (status, body) = srv
        .patch(&admin, "/teams/ops", json!({ "tags": ["ui"] }))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let m = srv.add_to_team(&admin, "ops", "user@example.com").await;
    assert_eq!(m["added_by"], "admin@example.com");
    let (status, body) = srv
        .delete(&admin, "/teams/eng/members/user@example.com")
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = srv.delete(&admin, "/teams/eng").await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(team_names(&srv, &user).await, ["ops"]);
});

backend_tests!(team_bodies_are_validated, |srv| async move {
    let org = org_with_tags(&srv, "dev").await;
    let key = &org.owner_key;
    srv.create_team(key, json!({ "name": "eng", "tags": ["ui"] }))
        .await;

    let cases = [
        (json!({}), Some("name")),
        (json!({ "name": 5 }), Some("name")),
        (json!({ "name": "" }), Some("name")),
        (json!({ "name": "x".repeat(33) }), Some("name")),
        (json!({ "name": "a#b" }), Some("name")),
        (
            json!({ "name": "t", "description": 7 }),
            Some("description"),
        ),
        (
            json!({ "name": "t", "description": "d".repeat(201) }),
            Some("description"),
        ),
        (json!({ "name": "t", "tags": "ui" }), Some("tags")),
        (json!({ "name": "t", "tags": [1] }), Some("tags")),
        (json!({ "name": "t", "tags": ["ui", "nope"] }), None),
        (json!({ "name": "t", "idp_only": "yes" }), Some("idp_only")),
    ];
    for (body, field) in cases {
        let resp = assert_team_refused(
            &srv,
            key,
            Method::POST,
            "/teams",
            Some(body.clone()),
            StatusCode::BAD_REQUEST,
        )
        .await;
        if let Some(field) = field {
            assert_error_mentions(&resp, field);
        }
    }
    for raw in ["{\"name\": ", "not json", "[]", ""] {
        let (status, text) = srv.send_raw(Method::POST, key, "/teams", raw).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{raw:?}: {text}");
    }

    // An existing name, in any case: 409.
    for name in ["eng", "ENG"] {
        assert_team_refused(
            &srv,
            key,
            Method::POST,
            "/teams",
            Some(json!({ "name": name, "tags": ["backend"] })),
            StatusCode::CONFLICT,
        )
        .await;
    }

    // PATCH validation leaves the team as it was.
    let patch_cases = [
        (json!({ "description": 7 }), Some("description")),
        (
            json!({ "description": "d".repeat(201) }),
            Some("description"),
        ),
        (json!({ "tags": "ui" }), Some("tags")),
        (json!({ "tags": ["nope"] }), None),
        (json!({ "idp_only": "no" }), Some("idp_only")),
    ];
    for (body, field) in patch_cases {
        let resp = assert_team_refused(
            &srv,
            key,
            Method::PATCH,
            "/teams/eng",
            Some(body.clone()),
            StatusCode::BAD_REQUEST,
        )
        .await;
        if let Some(field) = field {
            assert_error_mentions(&resp, field);
        }
    }
    let (status, text) = srv
        .send_raw(Method::PATCH, key, "/teams/eng", "{\"tags\": [")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");

    // Membership bodies.
    for (body, field) in [
        (json!({}), "email"),
        (json!({ "email": 5 }), "email"),
        (json!({ "email": ["a@example.com"] }), "email"),
    ] {
        let resp = assert_team_refused(
            &srv,
            key,
            Method::POST,
            "/teams/eng/members",
            Some(body),
            StatusCode::BAD_REQUEST,
        )
        .await;
        assert_error_mentions(&resp, field);
    }
    let (status, text) = srv
        .send_raw(Method::POST, key, "/teams/eng/members", "{\"email\"")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");

    assert_eq!(team_names(&srv, key).await, ["eng"]);

    // The limits themselves are accepted.
    let name32 = "n".repeat(32);
    let t = srv
        .create_team(
            key,
            json!({ "name": name32, "description": "d".repeat(200) }),
        )
        .await;
    assert_eq!(t["name"], name32.as_str());
});

backend_tests!(team_limit_is_429_and_writes_nothing, |srv| async move {
    // Dev allows 5 teams.
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    for i in 0..5 {
        srv.create_team(key, json!({ "name": format!("team{i}") }))
            .await;
    }
    let resp = assert_team_refused(
        &srv,
        key,
        Method::POST,
        "/teams",
        Some(json!({ "name": "team5" })),
        StatusCode::TOO_MANY_REQUESTS,
    )
    .await;
    assert_eq!(resp["limit_type"], "teams", "{resp}");
    assert_eq!(resp["limit"], 5, "{resp}");
    assert_eq!(resp["tier"], "dev", "{resp}");
    assert_eq!(team_names(&srv, key).await.len(), 5);

    // Deleting one frees room.
    let (status, _) = srv.delete(key, "/teams/team0").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    srv.create_team(key, json!({ "name": "team5" })).await;

    // Operator override on pro: the body carries the effective limit.
    let pro = srv.create_org("pro").await;
    srv.set_limits(&pro, json!({ "teams": 1 })).await;
    srv.create_team(&pro.owner_key, json!({ "name": "only" }))
        .await;
    let resp = assert_team_refused(
        &srv,
        &pro.owner_key,
        Method::POST,
        "/teams",
        Some(json!({ "name": "second" })),
        StatusCode::TOO_MANY_REQUESTS,
    )
    .await;
    assert_eq!(resp["limit_type"], "teams", "{resp}");
    assert_eq!(resp["limit"], 1, "{resp}");
    assert_eq!(resp["tier"], "pro", "{resp}");
    assert_eq!(team_names(&srv, &pro.owner_key).await, ["only"]);
});

backend_tests!(manual_membership_rules, |srv| async move {
    let org = org_with_tags(&srv, "dev").await;
    let key = &org.owner_key;
    srv.add_member(&org, "zed@example.com", "user").await;
    srv.add_member(&org, "alice@example.com", "user").await;
    srv.create_team(key, json!({ "name": "eng" })).await;

    let before = chrono::Utc::now() - chrono::Duration::seconds(5);
    let m = srv.add_to_team(key, "eng", "zed@example.com").await;
    assert_eq!(m["email"], "zed@example.com");
    assert_eq!(m["sources"], json!(["manual"]));
    assert_eq!(m["added_by"], org.owner_email.as_str());
    assert!(ts(&m, "added_at") >= before, "{m}");
    let m2 = srv.add_to_team(key, "ENG", "alice@example.com").await;
    assert_eq!(m2["sources"], json!(["manual"]));

    // Memberships are listed by email.
    let team = srv.get_team(key, "eng").await;
    assert_eq!(
        member_emails(&team),
        ["alice@example.com", "zed@example.com"]
    );
    assert_eq!(team["members"][1], m, "GET serves the created membership");

    // Already a manual member: 409. Unknown member or team: 404.
    assert_team_refused(
        &srv,
        key,
        Method::POST,
        "/teams/eng/members",
        Some(json!({ "email": "zed@example.com" })),
        StatusCode::CONFLICT,
    )
    .await;
    assert_team_refused(
        &srv,
        key,
        Method::POST,
        "/teams/eng/members",
        Some(json!({ "email": "ghost@example.com" })),
        StatusCode::NOT_FOUND,
    )
    .await;
    assert_team_refused(
        &srv,
        key,
        Method::POST,
        "/teams/nope/members",
        Some(json!({ "email": "zed@example.com" })),
        StatusCode::NOT_FOUND,
    )
    .await;

    // Removal: 204, then 404 (no longer a member, or unknown team).
    let (status, body) = srv.delete(key, "/teams/eng/members/zed@example.com").await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(
        member_emails(&srv.get_team(key, "eng").await),
        ["alice@example.com"]
    );
    assert_team_refused(
        &srv,
        key,
        Method::DELETE,
        "/teams/eng/members/zed@example.com",
        None,
        StatusCode::NOT_FOUND,
    )
    .await;
    assert_team_refused(
        &srv,
        key,
        Method::DELETE,
        "/teams/nope/members/alice@example.com",
        None,
        StatusCode::NOT_FOUND,
    )
    .await;

    // Re-adding works.
    srv.add_to_team(key, "eng", "zed@example.com").await;
    assert_eq!(
        srv.get_team(key, "eng").await["members"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
});

backend_tests!(team_tags_flow_into_members_and_claims, |srv| async move {
    let org = org_with_tags(&srv, "dev").await;
    let key = &org.owner_key;
    let alice = srv.add_member(&org, "alice@example.com", "user").await;
    srv.patch_member(key, "alice@example.com", json!({ "profile_tags": ["ui"] }))
        .await;
    srv.create_team(key, json!({ "name": "sec", "tags": ["secure", "ui"] }))
        .await;
    srv.create_team(key, json!({ "name": "core", "tags": ["backend", "ui"] }))
        .await;
    let claim = || srv.claim(&alice, json!({ "include_context": false }));
    let team_tags = || async {
        let m = srv.member(key, "alice@example.com").await;
        assert_eq!(m["profile_tags"], json!(["ui"]), "profile untouched: {m}");
        m["team_tags"].clone()
    };

    let first = srv
        .create_task(key, json!({ "title": "audit", "tags": ["secure"] }))
        .await;
    assert!(claim().await.is_none(), "alice has no `secure` yet");
    assert_eq!(team_tags().await, json!([]));

    // Joining a team: its tags count at once, for listing and for claims.
    srv.add_to_team(key, "sec", "alice@example.com").await;
    assert_eq!(team_tags().await, json!(["secure", "ui"]));
    let got = claim().await.expect("team tag lets alice claim");
    assert_eq!(got["task_id"], first.as_str());

    // A second team: the union, sorted, without duplicates.
    srv.add_to_team(key, "core", "alice@example.com").await;
    assert_eq!(team_tags().await, json!(["backend", "secure", "ui"]));

    // Leaving the team takes the tag away at once.
    let second = srv
        .create_task(key, json!({ "title": "audit again", "tags": ["secure"] }))
        .await;
    let (status, body) = srv
        .delete(key, "/teams/sec/members/alice@example.com")
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(team_tags().await, json!(["backend", "ui"]));
    assert!(claim().await.is_none(), "alice left `sec`");

    // Changing the team's tags applies at once too.
    let (status, body) = srv
        .patch(key, "/teams/core", json!({ "tags": ["backend", "secure"] }))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(team_tags().await, json!(["backend", "secure"]));
    let got = claim().await.expect("`core` now carries `secure`");
    assert_eq!(got["task_id"], second.as_str());

    let third = srv
        .create_task(key, json!({ "title": "third", "tags": ["secure"] }))
        .await;
    let (status, body) = srv.patch(key, "/teams/core", json!({ "tags": [] })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(team_tags().await, json!([]));
    assert!(claim().await.is_none(), "`core` has no tags any more");
    assert_eq!(srv.status_of(key, &third).await, "pending");
});

backend_tests!(deleting_a_team_removes_inherited_tags, |srv| async move {
    let org = org_with_tags(&srv, "dev").await;
    let key = &org.owner_key;
    let alice = srv.add_member(&org, "alice@example.com", "user").await;
    srv.add_member(&org, "bob@example.com", "user").await;
    srv.patch_member(
        key,
        "alice@example.com",
        json!({ "profile_tags": ["backend"] }),
    )
    .await;
    srv.create_team(key, json!({ "name": "sec", "tags": ["secure", "backend"] }))
        .await;
    srv.create_team(key, json!({ "name": "web", "tags": ["ui"] }))
        .await;
    srv.add_to_team(key, "sec", "alice@example.com").await;
    srv.add_to_team(key, "web", "alice@example.com").await;
    srv.add_to_team(key, "sec", "bob@example.com").await;
    assert_eq!(
        srv.member(key, "alice@example.com").await["team_tags"],
        json!(["backend", "secure", "ui"])
    );

    let (status, body) = srv.delete(key, "/teams/sec").await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");

    let alice_m = srv.member(key, "alice@example.com").await;
    assert_eq!(alice_m["team_tags"], json!(["ui"]), "{alice_m}");
    assert_eq!(alice_m["profile_tags"], json!(["backend"]), "{alice_m}");
    let bob_m = srv.member(key, "bob@example.com").await;
    assert_eq!(bob_m["team_tags"], json!([]), "{bob_m}");

    // The strict tag no longer lets alice claim.
    srv.create_task(key, json!({ "title": "audit", "tags": ["secure"] }))
        .await;
    assert!(srv
        .claim(&alice, json!({ "include_context": false }))
        .await
        .is_none());

    // A team recreated under the same name starts empty.
    srv.create_team(key, json!({ "name": "sec", "tags": ["secure"] }))
        .await;
    assert_eq!(srv.get_team(key, "sec").await["members"], json!([]));
    assert_eq!(
        srv.member(key, "alice@example.com").await["team_tags"],
        json!(["ui"])
    );
});
