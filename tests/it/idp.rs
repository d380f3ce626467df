//! The identity provider: enrollment, sync (sources, removal, deletion of
//! memberships left with no source), idp_only teams, and the manual and idp
//! sources side by side.

use crate::common::*;
use reqwest::Method;

/// A dev org with tags (`secure` strict), members alice, bob and carol, and
/// teams `eng` (tagged `secure`) and `ops`.
async fn org_with_teams(srv: &TestServer) -> Org {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    srv.create_tags(
        key,
        json!([
            { "name": "ui" },
            { "name": "secure", "strict": true, "description": "cleared staff" },
        ]),
    )
    .await;
    for who in ["alice", "bob", "carol"] {
        srv.add_member(&org, &format!("{who}@example.com"), "user")
            .await;
    }
    srv.create_team(key, json!({ "name": "eng", "tags": ["secure"] }))
        .await;
    srv.create_team(key, json!({ "name": "ops", "tags": ["ui"] }))
        .await;
    org
}

/// `{email: sorted sources}` of a team's memberships.
async fn sources(srv: &TestServer, key: &str, team: &str) -> Value {
    let team = srv.get_team(key, team).await;
    let mut out = serde_json::Map::new();
    for m in team["members"]
        .as_array()
        .unwrap_or_else(|| panic!("expected `members` in {team}"))
    {
        out.insert(str_field(m, "email"), json!(sorted_strings(&m["sources"])));
    }
    Value::Object(out)
}

/// Every team's memberships, to check that refused calls write nothing.
async fn all_sources(srv: &TestServer, key: &str) -> Value {
    json!({
        "eng": sources(srv, key, "eng").await,
        "ops": sources(srv, key, "ops").await,
    })
}

async fn sync_ok(srv: &TestServer, org: &Org, teams: Value) -> Value {
    let (status, body) = srv.idp_sync(org, teams.clone()).await;
    assert_eq!(status, StatusCode::OK, "sync {teams}: {body}");
    body
}

backend_tests!(enrollment_is_an_operator_switch, |srv| async move {
    let org = srv.create_org("dev").await;
    let path = format!("/admin/orgs/{}/idp", org.org_id);
    srv.idp_enroll(&org, true).await;
    srv.idp_enroll(&org, true).await;
    srv.idp_enroll(&org, false).await;

    // An API key is not the operator token.
    for auth in [format!("Bearer {}", org.owner_key), "Bearer nope".into()] {
        let (status, text) = srv
            .raw(
                Method::POST,
                &path,
                &[("authorization", &auth)],
                Some(json!({ "enrolled": true }).to_string()),
            )
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{text}");
        let (status, text) = srv
            .raw(
                Method::POST,
                &format!("{path}/sync"),
                &[("authorization", &auth)],
                Some(json!({ "teams": {} }).to_string()),
            )
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{text}");
    }
    let (status, text) = srv
        .send_raw(
            Method::POST,
            &org.owner_key,
            &path,
            &json!({ "enrolled": true }).to_string(),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "api key header: {text}");

    // Bad bodies.
    for body in [
        json!({}),
        json!({ "enrolled": "yes" }),
        json!({ "enrolled": 1 }),
    ] {
        let (status, resp) = srv.admin(Method::POST, &path, Some(body.clone())).await;
        assert_bad_request(status, &resp, "enrolled");
    }
    let auth = format!("Bearer {}", srv.admin_token);
    for raw in ["{\"enrolled\": ", "true", ""] {
        let (status, text) = srv
            .raw(
                Method::POST,
                &path,
                &[("authorization", &auth)],
                Some(raw.to_string()),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{raw:?}: {text}");
    }

    // Still not enrolled: sync is refused.
    let (status, body) = srv.idp_sync(&org, json!({})).await;
    assert_error(status, &body, StatusCode::CONFLICT);
});

backend_tests!(sync_needs_an_active_enrollment, |srv| async move {
    let org = org_with_teams(&srv).await;
    let key = &org.owner_key;
    let teams = json!({ "eng": ["alice@example.com"] });

    let (status, body) = srv.idp_sync(&org, teams.clone()).await;
    assert_error(status, &body, StatusCode::CONFLICT);
    assert_eq!(
        sources(&srv, key, "eng").await,
        json!({}),
        "nothing written"
    );

    srv.idp_enroll(&org, true).await;
    sync_ok(&srv, &org, teams.clone()).await;
    assert_eq!(
        sources(&srv, key, "eng").await,
        json!({ "alice@example.com": ["idp"] })
    );

    // After unenrolling, the provider can no longer sync.
    srv.idp_enroll(&org, false).await;
    let (status, body) = srv.idp_sync(&org, json!({ "eng": [] })).await;
    assert_error(status, &body, StatusCode::CONFLICT);
    assert_eq!(
        sources(&srv, key, "eng").await,
        json!({ "alice@example.com": ["idp"] })
    );
});

backend_tests!(sync_is_the_providers_whole_view, |srv| async move {
    let org = org_with_teams(&srv).await;
    let key = &org.owner_key;
    srv.idp_enroll(&org, true).await;
    srv.add_to_team(key, "eng", "alice@example.com").await;

    let body = sync_ok(
        &srv,
        &org,
        json!({ "eng": ["bob@example.com"], "ops": ["carol@example.com"] }),
    )
    .await;
    assert_eq!(body, json!({ "added": 2, "removed": 0 }));
    assert_eq!(
        all_sources(&srv, key).await,
        json!({
            "eng": { "alice@example.com": ["manual"], "bob@example.com": ["idp"] },
            "ops": { "carol@example.com": ["idp"] },
        })
    );
    let team = srv.get_team(key, "eng").await;
    let bob = team["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["email"] == "bob@example.com")
        .unwrap();
    ts(bob, "added_at");

    // The same view again changes nothing.
    let body = sync_ok(
        &srv,
        &org,
        json!({ "eng": ["bob@example.com"], "ops": ["carol@example.com"] }),
    )
    .await;
    assert_eq!(body, json!({ "added": 0, "removed": 0 }));

    // A team the provider no longer lists loses its idp members; a manual
    // member listed gains the idp source.
    let body = sync_ok(
        &srv,
        &org,
        json!({ "eng": ["alice@example.com", "bob@example.com"] }),
    )
    .await;
    assert_eq!(body, json!({ "added": 1, "removed": 1 }));
    assert_eq!(
        all_sources(&srv, key).await,
        json!({
            "eng": {
                "alice@example.com": ["idp", "manual"],
                "bob@example.com": ["idp"],
            },
            "ops": {},
        })
    );

    // Nobody listed: idp sources go; the membership left with no source is
    // deleted, the manual one stays.
    let body = sync_ok(&srv, &org, json!({ "eng": [] })).await;
    assert_eq!(body, json!({ "added": 0, "removed": 2 }));
    assert_eq!(
        all_sources(&srv, key).await,
        json!({ "eng": { "alice@example.com": ["manual"] }, "ops": {} })
    );
    // Bob is still an org member, just in no team.
    let bob = srv.member(key, "bob@example.com").await;
    assert_eq!(bob["team_tags"], json!([]), "{bob}");
});

backend_tests!(sync_is_validated_and_writes_nothing, |srv| async move {
    let org = org_with_teams(&srv).await;
    let key = &org.owner_key;
    srv.idp_enroll(&org, true).await;
    sync_ok(&srv, &org, json!({ "ops": ["carol@example.com"] })).await;
    let before = all_sources(&srv, key).await;

    let cases = [
        // An unknown team refuses the whole view.
        json!({ "eng": ["alice@example.com"], "nope": ["bob@example.com"] }),
        // So does an email that is not an org member.
        json!({ "eng": ["alice@example.com", "ghost@example.com"] }),
    ];
    for teams in cases {
        let (status, body) = srv.idp_sync(&org, teams.clone()).await;
        assert_error(status, &body, StatusCode::BAD_REQUEST);
        assert_eq!(all_sources(&srv, key).await, before, "{teams} wrote");
    }
    let (status, body) = srv
        .idp_sync(&org, json!({ "eng": ["alice@example.com"], "nope": [] }))
        .await;
    assert_error(status, &body, StatusCode::BAD_REQUEST);

    let path = format!("/admin/orgs/{}/idp/sync", org.org_id);
    for body in [
        json!({}),
        json!({ "teams": [] }),
        json!({ "teams": "eng" }),
        json!({ "teams": { "eng": "alice@example.com" } }),
        json!({ "teams": { "eng": [7] } }),
    ] {
        let (status, resp) = srv.admin(Method::POST, &path, Some(body.clone())).await;
        assert_error(status, &resp, StatusCode::BAD_REQUEST);
        assert_eq!(all_sources(&srv, key).await, before, "{body} wrote");
    }
    let (status, resp) = srv
        .admin(Method::POST, &path, Some(json!({ "teams": [] })))
        .await;
    assert_bad_request(status, &resp, "teams");
    let auth = format!("Bearer {}", srv.admin_token);
    for raw in ["{\"teams\": {", "nope", ""] {
        let (status, text) = srv
            .raw(
                Method::POST,
                &path,
                &[("authorization", &auth)],
                Some(raw.to_string()),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{raw:?}: {text}");
    }
    assert_eq!(all_sources(&srv, key).await, before);
});

backend_tests!(manual_and_idp_sources_side_by_side, |srv| async move {
    let org = org_with_teams(&srv).await;
    let key = &org.owner_key;
    srv.idp_enroll(&org, true).await;
    sync_ok(&srv, &org, json!({ "eng": ["bob@example.com"] })).await;

    // A manual add on top of the idp's: both sources.
    let m = srv.add_to_team(key, "eng", "bob@example.com").await;
    assert_eq!(m["email"], "bob@example.com");
    assert_eq!(sorted_strings(&m["sources"]), ["idp", "manual"], "{m}");
    let (status, body) = srv
        .post(
            key,
            "/teams/eng/members",
            json!({ "email": "bob@example.com" }),
        )
        .await;
    assert_error(status, &body, StatusCode::CONFLICT);

    // Removing the manual source leaves the idp one.
    let (status, body) = srv.delete(key, "/teams/eng/members/bob@example.com").await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(
        sources(&srv, key, "eng").await,
        json!({ "bob@example.com": ["idp"] })
    );

    // A membership that only the idp gave cannot be removed by hand.
    let (status, body) = srv.delete(key, "/teams/eng/members/bob@example.com").await;
    assert_error(status, &body, StatusCode::BAD_REQUEST);
    assert_eq!(
        sources(&srv, key, "eng").await,
        json!({ "bob@example.com": ["idp"] })
    );

    // Manual, then idp: removing the manual source leaves the idp one, and
    // the idp dropping it then deletes the membership.
    srv.add_to_team(key, "eng", "alice@example.com").await;
    sync_ok(
        &srv,
        &org,
        json!({ "eng": ["alice@example.com", "bob@example.com"] }),
    )
    .await;
    let (status, body) = srv
        .delete(key, "/teams/eng/members/alice@example.com")
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(
        sources(&srv, key, "eng").await,
        json!({ "alice@example.com": ["idp"], "bob@example.com": ["idp"] })
    );
    sync_ok(&srv, &org, json!({ "eng": ["bob@example.com"] })).await;
    assert_eq!(
        sources(&srv, key, "eng").await,
        json!({ "bob@example.com": ["idp"] })
    );
});

backend_tests!(
    idp_memberships_carry_team_tags_into_claims,
    |srv| async move {
        let org = org_with_teams(&srv).await;
        let key = &org.owner_key;
        let bob = srv.add_member(&org, "dave@example.com", "user").await;
        srv.idp_enroll(&org, true).await;

        let first = srv
            .create_task(key, json!({ "title": "audit", "tags": ["secure"] }))
            .await;
        assert!(srv
            .claim(&bob, json!({ "include_context": false }))
            .await
            .is_none());

        sync_ok(&srv, &org, json!({ "eng": ["dave@example.com"] })).await;
        assert_eq!(
            srv.member(key, "dave@example.com").await["team_tags"],
            json!(["secure"])
        );
        let got = srv
            .claim(&bob, json!({ "include_context": false }))
            .await
            .expect("the idp membership carries `secure`");
        assert_eq!(got["task_id"], first.as_str());

        // The idp drops him: the tag goes with the membership.
        srv.create_task(key, json!({ "title": "audit 2", "tags": ["secure"] }))
            .await;
        sync_ok(&srv, &org, json!({ "eng": [] })).await;
        assert_eq!(
            srv.member(key, "dave@example.com").await["team_tags"],
            json!([])
        );
        assert!(srv
            .claim(&bob, json!({ "include_context": false }))
            .await
            .is_none());
    }
);

backend_tests!(idp_only_teams, |srv| async move {
    let org = org_with_teams(&srv).await;
    let owner = &org.owner_key;
    let admin = srv.add_member(&org, "admin@example.com", "admin").await;
    let create = json!({ "name": "sso", "idp_only": true });

    // Without an enrollment, even the owner cannot create one.
    let (status, body) = srv.post(owner, "/teams", create.clone()).await;
    assert_error(status, &body, StatusCode::FORBIDDEN);
    let (status, body) = srv.get(owner, "/teams/sso").await;
    assert_error(status, &body, StatusCode::NOT_FOUND);

    srv.idp_enroll(&org, true).await;
    // An admin cannot, enrolled or not.
    let (status, body) = srv.post(&admin, "/teams", create.clone()).await;
    assert_error(status, &body, StatusCode::FORBIDDEN);
    let (status, body) = srv.get(owner, "/teams/sso").await;
    assert_error(status, &body, StatusCode::NOT_FOUND);
    let team = srv.create_team(owner, create.clone()).await;
    assert_eq!(team["idp_only"], true, "{team}");

    // Manual membership changes are refused; the idp manages it.
    for key in [owner, &admin] {
        let (status, body) = srv
            .post(
                key,
                "/teams/sso/members",
                json!({ "email": "alice@example.com" }),
            )
            .await;
        assert_error(status, &body, StatusCode::BAD_REQUEST);
    }
    assert_eq!(srv.get_team(owner, "sso").await["members"], json!([]));
    sync_ok(&srv, &org, json!({ "sso": ["alice@example.com"] })).await;
    assert_eq!(
        sources(&srv, owner, "sso").await,
        json!({ "alice@example.com": ["idp"] })
    );
    let (status, body) = srv
        .delete(owner, "/teams/sso/members/alice@example.com")
        .await;
    assert_error(status, &body, StatusCode::BAD_REQUEST);
    assert_eq!(
        sources(&srv, owner, "sso").await,
        json!({ "alice@example.com": ["idp"] })
    );

    // Other fields of an idp_only team are ordinary admin business.
    let (status, body) = srv
        .patch(&admin, "/teams/sso", json!({ "description": "from okta" }))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["idp_only"], true);

    // Changing idp_only: owner only.
    let (status, body) = srv
        .patch(&admin, "/teams/sso", json!({ "idp_only": false }))
        .await;
    assert_error(status, &body, StatusCode::FORBIDDEN);
    assert_eq!(srv.get_team(owner, "sso").await["idp_only"], true);
    let (status, body) = srv
        .patch(owner, "/teams/sso", json!({ "idp_only": false }))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["idp_only"], false);
    let m = srv.add_to_team(&admin, "sso", "alice@example.com").await;
    assert_eq!(sorted_strings(&m["sources"]), ["idp", "manual"]);

    let (status, body) = srv
        .patch(&admin, "/teams/ops", json!({ "idp_only": true }))
        .await;
    assert_error(status, &body, StatusCode::FORBIDDEN);
    let (status, body) = srv
        .patch(owner, "/teams/ops", json!({ "idp_only": true }))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["idp_only"], true);

    // Without an enrollment the owner cannot change it either.
    srv.idp_enroll(&org, false).await;
    let (status, body) = srv
        .patch(owner, "/teams/ops", json!({ "idp_only": false }))
        .await;
    assert_error(status, &body, StatusCode::FORBIDDEN);
    assert_eq!(srv.get_team(owner, "ops").await["idp_only"], true);
    let (status, body) = srv
        .post(owner, "/teams", json!({ "name": "sso2", "idp_only": true }))
        .await;
    assert_error(status, &body, StatusCode::FORBIDDEN);
});
