//! Operator API, API keys, authentication statuses, routing errors and org
//! isolation.

use crate::common::*;
use reqwest::Method;

backend_tests!(admin_routes_need_the_operator_token, |srv| async move {
    let body = json!({ "name": "acme", "owner_email": "o@acme.test" });

    let (status, resp) = srv
        .raw(Method::POST, "/admin/orgs", &[], Some(body.to_string()))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "no token: {resp}");

    let (status, resp) = srv
        .raw(
            Method::POST,
            "/admin/orgs",
            &[("authorization", "Bearer not-the-token")],
            Some(body.to_string()),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "wrong token: {resp}");

    // An API key is not an operator token.
    let org = srv.create_org("dev").await;
    let (status, resp) = srv
        .raw(
            Method::GET,
            &format!("/admin/orgs/{}", org.org_id),
            &[("authorization", &format!("Bearer {}", org.owner_key))],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "api key as token: {resp}");

    let (status, resp) = srv
        .admin(Method::GET, &format!("/admin/orgs/{}", org.org_id), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(resp["org_id"], org.org_id.as_str());
});

backend_tests!(created_org_returns_a_working_owner_key, |srv| async move {
    let (status, org) = srv
        .admin(
            Method::POST,
            "/admin/orgs",
            Some(json!({ "name": "acme", "tier": "dev", "owner_email": "founder@acme.test" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{org}");
    assert!(is_canonical_uuid(org["org_id"].as_str().unwrap()), "{org}");
    assert_eq!(org["name"], "acme");
    assert_eq!(org["tier"], "dev");
    assert_eq!(
        org["encryption"], "managed",
        "managed is the default: {org}"
    );
    assert_eq!(org["owner"]["email"], "founder@acme.test");
    assert_eq!(org["owner"]["role"], "owner");
    let key = str_field(&org["owner"], "api_key");

    let (status, body) = srv.get(&key, "/tasks").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["tasks"], json!([]));

    let id = srv.new_task(&key, "first task").await;
    assert_eq!(srv.get_task(&key, &id).await["title"], "first task");
});

backend_tests!(missing_or_unknown_key_is_401, |srv| async move {
    let org = srv.create_org("dev").await;
    srv.new_task(&org.owner_key, "secret work").await;

    let (status, body) = srv.raw(Method::GET, "/tasks", &[], None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let body: Value = serde_json::from_str(&body).expect("JSON error body");
    assert_eq!(body["error"], "invalid api key");

    for bad in ["nope", "", &format!("{}x", org.owner_key)] {
        let (status, body) = srv.get(bad, "/tasks").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "key {bad:?}: {body}");
        assert_eq!(body["error"], "invalid api key");
    }

    // Writes are refused too, and write nothing.
    let (status, body) = srv
        .post(
            "nope",
            "/tasks",
            json!({ "tasks": [{ "title": "sneaky" }] }),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"], "invalid api key");
    assert_eq!(srv.list_all(&org.owner_key, "").await.len(), 1);
});

backend_tests!(
    keys_name_their_org_and_one_naming_another_is_refused_as_a_wrong_secret,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let other = srv.create_org("dev").await;
        let hex = |id: &str| id.replace('-', "");
        let prefix = format!("tq_{}_", hex(&org.org_id));
        // Every way a key is issued names the org first.
        let member = srv.add_member(&org, "dana@example.com", "user").await;
        let (_, created) = srv.new_key(&org.owner_key, "bot").await;
        let (status, reset) = srv
            .admin(
                Method::POST,
                &format!("/admin/orgs/{}/members/dana@example.com/keys", org.org_id),
                Some(json!({ "key_name": "dana-laptop" })),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{reset}");
        let reset = str_field(&reset, "api_key");
        for key in [&org.owner_key, &member, &created, &reset] {
            assert!(
                key.starts_with(&prefix),
                "{key} does not name {}",
                org.org_id
            );
            let (status, body) = srv.get(key, "/tasks").await;
            assert_eq!(status, StatusCode::OK, "{key}: {body}");
        }
        let rest = &org.owner_key[prefix.len()..];
        let (key_id, secret) = rest.split_once('_').expect("key id, then secret");
        // The same key with another secret, and with another org.
        let wrong_secret = format!("{prefix}{key_id}_{}", "A".repeat(secret.len()));
        let (status, refused) = srv.get(&wrong_secret, "/tasks").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{refused}");
        for forged_org in [hex(&other.org_id), "0".repeat(32)] {
            let forged = format!("tq_{forged_org}_{rest}");
            let (status, body) = srv.get(&forged, "/tasks").await;
            assert_eq!(
                (status, &body),
                (StatusCode::UNAUTHORIZED, &refused),
                "{forged}"
            );
        }
        // A key as it was written before keys named their org still works.
        let (status, body) = srv.get(&format!("tq_{rest}"), "/tasks").await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
);

backend_tests!(
    keys_are_shown_once_listed_and_revoked_at_once,
    |srv| async move {
        let org = srv.create_org("dev").await;

        let (status, created) = srv
            .post(&org.owner_key, "/keys", json!({ "name": "ci-bot" }))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        assert_eq!(created["name"], "ci-bot");
        let key_id = str_field(&created, "key_id");
        let secret = str_field(&created, "api_key");
        assert_ne!(secret, org.owner_key);

        let (status, _) = srv.get(&secret, "/tasks").await;
        assert_eq!(status, StatusCode::OK, "the new key works");

        let (status, listed) = srv.get(&org.owner_key, "/keys").await;
        assert_eq!(status, StatusCode::OK, "{listed}");
        let keys = listed["keys"].as_array().expect("keys array");
        let entry = keys
            .iter()
            .find(|k| k["key_id"] == key_id.as_str())
            .unwrap_or_else(|| panic!("new key not listed: {listed}"));
        assert_eq!(entry["name"], "ci-bot");
        assert_eq!(entry["active"], true);
        ts(entry, "created_at");
        let text = listed.to_string();
        assert!(!text.contains(&secret), "GET /keys leaks a secret: {text}");
        assert!(
            !text.contains(&org.owner_key),
            "GET /keys leaks a secret: {text}"
        );
        assert!(keys.iter().all(|k| k.get("api_key").is_none()), "{listed}");

        let (status, body) = srv.delete(&org.owner_key, &format!("/keys/{key_id}")).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");

        let (status, body) = srv.get(&secret, "/tasks").await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "revoked key still works: {body}"
        );
        assert_eq!(body["error"], "invalid api key");
        let (status, body) = srv
            .post(&secret, "/keys", json!({ "name": "revival" }))
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");

        // The owner key is unaffected; a revoked key no longer lists as active.
        let (status, listed) = srv.get(&org.owner_key, "/keys").await;
        assert_eq!(status, StatusCode::OK, "{listed}");
        for k in listed["keys"].as_array().unwrap() {
            if k["key_id"] == key_id.as_str() {
                assert_eq!(k["active"], false, "{listed}");
            }
        }
    }
);

backend_tests!(
    a_member_cannot_revoke_another_members_key,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let alice = srv.add_member(&org, "alice@example.com", "user").await;
        let (owner_key_id, _) = srv.new_key(&org.owner_key, "owner-second").await;

        // Alice does not see the owner's keys and cannot revoke them.
        let (status, listed) = srv.get(&alice, "/keys").await;
        assert_eq!(status, StatusCode::OK, "{listed}");
        assert!(
            listed["keys"]
                .as_array()
                .unwrap()
                .iter()
                .all(|k| k["key_id"] != owner_key_id.as_str()),
            "another member's key is listed: {listed}"
        );
        let (status, _) = srv.delete(&alice, &format!("/keys/{owner_key_id}")).await;
        assert!(
            status.is_client_error(),
            "revoking someone else's key: {status}"
        );
        let (status, listed) = srv.get(&org.owner_key, "/keys").await;
        assert_eq!(status, StatusCode::OK);
        let entry = listed["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["key_id"] == owner_key_id.as_str())
            .cloned()
            .unwrap_or_else(|| panic!("owner key vanished: {listed}"));
        assert_eq!(entry["active"], true, "{listed}");
    }
);

backend_tests!(suspended_org_gets_403, |srv| async move {
    let org = srv.create_org("dev").await;
    let other = srv.create_org("dev").await;
    let path = format!("/admin/orgs/{}", org.org_id);

    let (status, body) = srv
        .admin(Method::PATCH, &path, Some(json!({ "suspended": true })))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let (status, body) = srv.get(&org.owner_key, "/tasks").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"], "organization suspended");
    let (status, body) = srv
        .post(
            &org.owner_key,
            "/tasks",
            json!({ "tasks": [{ "title": "x" }] }),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"], "organization suspended");

    // Other orgs are unaffected.
    let (status, _) = srv.get(&other.owner_key, "/tasks").await;
    assert_eq!(status, StatusCode::OK);

    let (status, body) = srv
        .admin(Method::PATCH, &path, Some(json!({ "suspended": false })))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = srv.get(&org.owner_key, "/tasks").await;
    assert_eq!(status, StatusCode::OK, "lifting the suspension: {body}");
    assert_eq!(
        body["tasks"],
        json!([]),
        "nothing was written while suspended"
    );
});

backend_tests!(adding_an_existing_member_is_409, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = srv.add_member(&org, "bob@example.com", "user").await;
    let path = format!("/admin/orgs/{}/members", org.org_id);

    let (status, body) = srv
        .admin(
            Method::POST,
            &path,
            Some(json!({ "email": "bob@example.com", "role": "admin" })),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["error"].is_string(), "{body}");

    let (status, body) = srv
        .admin(
            Method::POST,
            &path,
            Some(json!({ "email": org.owner_email, "role": "user" })),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "owner re-added: {body}");

    // Bob's original key still works.
    let (status, _) = srv.get(&key, "/tasks").await;
    assert_eq!(status, StatusCode::OK);
});

backend_tests!(operator_key_reset_issues_a_working_key, |srv| async move {
    let org = srv.create_org("dev").await;
    let first = srv.add_member(&org, "carol@example.com", "user").await;
    let (status, body) = srv
        .admin(
            Method::POST,
            &format!("/admin/orgs/{}/members/carol@example.com/keys", org.org_id),
            Some(json!({ "key_name": "carol-laptop" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["key_name"], "carol-laptop");
    let second = str_field(&body, "api_key");
    assert_ne!(first, second);
    let (status, _) = srv.get(&second, "/tasks").await;
    assert_eq!(status, StatusCode::OK);
});

backend_tests!(healthz_needs_no_key, |srv| async move {
    let (status, body) = srv.raw(Method::GET, "/healthz", &[], None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let body: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(body, json!({ "status": "ok" }));
});

backend_tests!(unknown_route_and_wrong_method, |srv| async move {
    let org = srv.create_org("dev").await;

    let (status, body) = srv.get(&org.owner_key, "/no/such/route").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(
        body["error"].is_string(),
        "404 must be a JSON error: {body}"
    );

    let (status, body) = srv.delete(&org.owner_key, "/tasks").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{body}");
    assert!(
        body["error"].is_string(),
        "405 must be a JSON error: {body}"
    );

    let (status, body) = srv.get(&org.owner_key, "/tasks/claim").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{body}");
});

backend_tests!(other_orgs_ids_read_as_nonexistent, |srv| async move {
    let a = srv.create_org("dev").await;
    let b = srv.create_org("dev").await;
    let id = srv
        .create_task(
            &a.owner_key,
            json!({ "title": "a's secret", "assignee": a.owner_email }),
        )
        .await;

    let (status, body) = srv
        .post(&b.owner_key, "/tasks/get", json!({ "task_ids": [id] }))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["count"], 0, "{body}");
    assert_eq!(body["tasks"], json!([]));
    assert_eq!(body["not_found"], json!([id]));
    assert!(!body.to_string().contains("a's secret"));

    let error = srv
        .update_item_error(&b.owner_key, json!({ "task_id": id, "title": "hijacked" }))
        .await;
    assert_eq!(error, "task not found");

    assert!(srv.list_all(&b.owner_key, "").await.is_empty());

    // Claims never cross orgs.
    assert!(srv.claim(&b.owner_key, json!({})).await.is_none());

    // Another org's task cannot be used as a blocker.
    let (status, body) = srv
        .post(
            &b.owner_key,
            "/tasks",
            json!({ "tasks": [{ "title": "x", "blocked_by": [id] }] }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    let task = srv.get_task(&a.owner_key, &id).await;
    assert_eq!(task["title"], "a's secret");
    assert_eq!(task["status"], "pending");
});

backend_tests!(operator_and_key_bodies_are_validated, |srv| async move {
    let cases = [
        (
            json!({ "name": "x", "owner_email": "a@x.test", "tier": "platinum" }),
            "tier",
        ),
        (
            json!({ "name": "x", "owner_email": "b@x.test", "encryption": "rot13" }),
            "encryption",
        ),
        (json!({ "name": "x" }), "owner_email"),
    ];
    for (body, field) in cases {
        let (status, resp) = srv.admin(Method::POST, "/admin/orgs", Some(body)).await;
        assert_bad_request(status, &resp, field);
    }
    let org = srv.create_org("dev").await;
    let (status, resp) = srv
        .admin(
            Method::POST,
            &format!("/admin/orgs/{}/members", org.org_id),
            Some(json!({ "email": "z@x.test", "role": "emperor" })),
        )
        .await;
    assert_bad_request(status, &resp, "role");
    let (status, resp) = srv.post(&org.owner_key, "/keys", json!({})).await;
    assert_bad_request(status, &resp, "name");
    let (status, resp) = srv
        .post(&org.owner_key, "/keys", json!({ "name": 7 }))
        .await;
    assert_bad_request(status, &resp, "name");

    // Nothing was created by the refused calls.
    let (status, listed) = srv.get(&org.owner_key, "/keys").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["keys"].as_array().unwrap().len(), 1, "{listed}");
    let (status, _) = srv
        .admin(
            Method::POST,
            &format!("/admin/orgs/{}/members", org.org_id),
            Some(json!({ "email": "z@x.test", "role": "user" })),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "the refused member was not added"
    );
});

/// A client whose connections come from `local`: every 127.x.y.z address
/// is this machine, so each stands for another client address.
fn client_from(local: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(local))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("http client")
}

/// `GET /admin/feedback` with `token` from `client`: status, `Retry-After`
/// and body.
async fn operator_get(
    srv: &TestServer,
    client: &reqwest::Client,
    token: &str,
) -> (StatusCode, Option<u64>, String) {
    let resp = client
        .get(format!("{}/admin/feedback", srv.base_url))
        .bearer_auth(token)
        .send()
        .await
        .expect("GET /admin/feedback");
    let retry_after = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().expect("whole seconds"));
    (resp.status(), retry_after, resp.text().await.expect("body"))
}

/// `POST /admin/ui/login` with `token` from `client`.
async fn operator_login(
    srv: &TestServer,
    client: &reqwest::Client,
    token: &str,
) -> reqwest::Response {
    client
        .post(format!("{}/admin/ui/login", srv.base_url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .expect("POST /admin/ui/login")
}

backend_tests!(
    an_address_that_guesses_the_operator_token_is_refused_for_a_while,
    |srv| async move {
        let guesser = client_from([127, 0, 0, 2]);
        let operator = client_from([127, 0, 0, 3]);
        let typist = client_from([127, 0, 0, 4]);

        // Ten wrong tokens are answered as wrong.
        for i in 0..10 {
            let (status, _, body) = operator_get(&srv, &guesser, &format!("guess-{i}")).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "guess {i}: {body}");
        }
        // The eleventh, and then even the right token, are refused with a
        // wait, in the API's error shape.
        for token in ["guess-10", srv.admin_token.as_str()] {
            let (status, retry_after, body) = operator_get(&srv, &guesser, token).await;
            assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
            let retry_after = retry_after.expect("Retry-After");
            assert!((1..=60).contains(&retry_after), "{retry_after}");
            let body: Value = serde_json::from_str(&body).expect("a JSON error");
            assert!(
                body["error"].as_str().unwrap().contains("too many wrong"),
                "{body}"
            );
        }
        // The sign-in form refuses that address too, and opens no session.
        let resp = operator_login(&srv, &guesser, &srv.admin_token).await;
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(resp.headers().get("set-cookie").is_none());
        assert!(resp.headers().get("retry-after").is_some());
        assert!(resp.text().await.unwrap().contains("too many wrong"));

        // Another address is served as usual.
        let (status, _, body) = operator_get(&srv, &operator, &srv.admin_token).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let resp = operator_login(&srv, &operator, &srv.admin_token).await;
        assert_eq!(resp.status(), StatusCode::SEE_OTHER);

        // Wrong tokens typed into the form count the same way; a request
        // without a token guesses nothing and does not count.
        for _ in 0..20 {
            let (status, _, body) = operator_get(&srv, &typist, "").await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        }
        for i in 0..10 {
            let resp = operator_login(&srv, &typist, &format!("typo-{i}")).await;
            assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "typo {i}");
        }
        let resp = operator_login(&srv, &typist, "typo-10").await;
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        let (status, _, body) = operator_get(&srv, &typist, &srv.admin_token).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    }
);

/// `GET /admin/feedback` with a wrong or right `token` from `client`,
/// through a proxy that says it forwards for `forwarded_for`.
async fn operator_get_for(
    srv: &TestServer,
    client: &reqwest::Client,
    forwarded_for: &str,
    token: &str,
) -> StatusCode {
    client
        .get(format!("{}/admin/feedback", srv.base_url))
        .header("x-forwarded-for", forwarded_for)
        .bearer_auth(token)
        .send()
        .await
        .expect("GET /admin/feedback")
        .status()
}

/// Behind a proxy named in `TASKQ_TRUSTED_PROXIES` each forwarded client
/// has its own count, so one guesser does not lock out the operator who
/// comes through the same proxy; a client that is not a trusted proxy
/// cannot spread its guesses over forwarded addresses it makes up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxy_names_the_client_whose_guesses_count() {
    let srv = TestServer::builder(Backend::Sqlite)
        .env("TASKQ_TRUSTED_PROXIES", "127.0.0.5, 10.0.0.0/8")
        .start()
        .await;
    let proxy = client_from([127, 0, 0, 5]);
    let elsewhere = client_from([127, 0, 0, 6]);

    for i in 0..10 {
        let status = operator_get_for(&srv, &proxy, "203.0.113.9", &format!("guess-{i}")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "guess {i}");
    }
    for token in ["guess-10", srv.admin_token.as_str()] {
        assert_eq!(
            operator_get_for(&srv, &proxy, "203.0.113.9", token).await,
            StatusCode::TOO_MANY_REQUESTS,
            "the guesser behind the proxy is refused"
        );
    }
    // The operator behind the same proxy is served, also through a second
    // trusted hop, and so is the proxy's own request without the header.
    assert_eq!(
        operator_get_for(&srv, &proxy, "198.51.100.4", &srv.admin_token).await,
        StatusCode::OK
    );
    assert_eq!(
        operator_get_for(&srv, &proxy, "198.51.100.4, 10.1.1.1", &srv.admin_token).await,
        StatusCode::OK
    );
    let (status, _, body) = operator_get(&srv, &proxy, &srv.admin_token).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The guesser's forwarded address stays refused through another hop.
    assert_eq!(
        operator_get_for(&srv, &proxy, "203.0.113.9, 10.2.2.2", &srv.admin_token).await,
        StatusCode::TOO_MANY_REQUESTS
    );

    // An untrusted peer is counted by its own address whatever it forwards.
    for i in 0..10 {
        let status = operator_get_for(
            &srv,
            &elsewhere,
            &format!("192.0.2.{i}"),
            &format!("guess-{i}"),
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "guess {i}");
    }
    for token in ["guess-10", srv.admin_token.as_str()] {
        assert_eq!(
            operator_get_for(&srv, &elsewhere, "192.0.2.200", token).await,
            StatusCode::TOO_MANY_REQUESTS
        );
    }
}

/// A list that does not parse keeps the server from starting, naming the
/// item, rather than trusting nothing (or everything) in silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_trusted_proxy_list_is_refused_at_start() {
    let stderr = refused_at_start(&[("TASKQ_TRUSTED_PROXIES", "10.0.0.0/8, proxy.internal")]).await;
    assert!(
        stderr.contains("proxy.internal") && stderr.contains("TASKQ_TRUSTED_PROXIES"),
        "{stderr}"
    );
}
