//! The operator page (`/admin/ui`) and its figures (`/admin/stats`).
//!
//! Plain HTTP: the login form, the session cookie, who may read the
//! figures, and escaping. In a browser: headless Chromium, driven over
//! WebDriver (plain JSON over HTTP to `chromedriver`), signs in through the
//! form, waits until the page shows what the API says about a seeded
//! server, and keeps a screenshot (`TASKQ_TEST_ARTIFACTS`, default
//! `target/test-artifacts`). The browser test runs when
//! `TASKQ_TEST_CHROMEDRIVER` names a chromedriver (`.ci/run` installs
//! Debian's); `TASKQ_TEST_CHROMIUM` names the browser (default
//! `/usr/bin/chromium`). Skipped with a note otherwise.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common::browser::{chromedriver, Browser};
use crate::common::*;
use reqwest::header::{CONTENT_SECURITY_POLICY, CONTENT_TYPE, COOKIE, SET_COOKIE};
use reqwest::Method;

/// `POST /admin/ui/login` with `token`; the raw answer.
async fn login(srv: &TestServer, token: &str) -> reqwest::Response {
    page_client()
        .post(format!("{}/admin/ui/login", srv.base_url))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("token={}", encode_query(token)))
        .send()
        .await
        .expect("POST /admin/ui/login")
}

/// Signs in and answers the `Cookie` header value of the session.
async fn session_cookie(srv: &TestServer) -> String {
    let resp = login(srv, &srv.admin_token).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let set = resp.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    set.split(';').next().unwrap().to_owned()
}

/// GET with optional `Cookie` and bearer token: status, headers, body.
async fn get(
    srv: &TestServer,
    path: &str,
    cookie: Option<&str>,
    bearer: Option<&str>,
) -> (StatusCode, reqwest::header::HeaderMap, String) {
    let mut req = page_client().get(format!("{}{path}", srv.base_url));
    if let Some(c) = cookie {
        req = req.header(COOKIE, c);
    }
    if let Some(t) = bearer {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.expect("GET");
    let status = resp.status();
    let headers = resp.headers().clone();
    (status, headers, resp.text().await.expect("body"))
}

fn json_body(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

backend_tests!(the_page_needs_a_session, |srv| async move {
    // Without a session: the form, and no figures.
    let (status, headers, body) = get(&srv, "/admin/ui", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(headers[CONTENT_TYPE]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let csp = headers[CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(body.contains(r#"name="token""#), "{body}");
    assert!(!body.contains("data-stat"), "{body}");

    // A wrong token: the form again with an error, and no cookie.
    let resp = login(&srv, "not-the-token").await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(resp.headers().get(SET_COOKIE).is_none());
    let body = resp.text().await.unwrap();
    assert!(body.contains("invalid operator token"), "{body}");
    assert!(body.contains(r#"name="token""#), "{body}");

    // The right token: a session cookie that is not the token.
    let resp = login(&srv, &srv.admin_token).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(resp.headers()["location"], "/admin/ui");
    let set = resp.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/admin"] {
        assert!(set.contains(attribute), "{set}");
    }
    assert!(!set.contains(&srv.admin_token), "{set}");
    assert!(!set.contains("Secure"), "plain HTTP: {set}");
    let cookie = set.split(';').next().unwrap().to_owned();

    let (status, _, body) = get(&srv, "/admin/ui", Some(&cookie), None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(r#"data-stat="actors.alive""#), "{body}");

    // The figures: with the token or the session, not without.
    let (status, _, with_bearer) = get(&srv, "/admin/stats", None, Some(&srv.admin_token)).await;
    assert_eq!(status, StatusCode::OK, "{with_bearer}");
    let stats = json_body(&with_bearer);
    assert!(stats["orgs"].is_array(), "{stats}");
    assert!(stats["writer"]["commits"].is_u64(), "{stats}");
    let (status, _, body) = get(&srv, "/admin/stats", Some(&cookie), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for (cookie, bearer) in [
        (None, None),
        (Some("taskq_operator=forged"), None),
        (None, Some("wrong")),
    ] {
        let (status, headers, body) = get(&srv, "/admin/stats", cookie, bearer).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert!(headers[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("application/json"));
        assert_error(status, &json_body(&body), StatusCode::UNAUTHORIZED);
    }
    // The session cookie is no operator token elsewhere.
    let (status, _, _) = get(&srv, "/metrics", Some(&cookie), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Logout ends the session and clears the cookie.
    let resp = page_client()
        .post(format!("{}/admin/ui/logout", srv.base_url))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let cleared = resp.headers()[SET_COOKIE].to_str().unwrap();
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    let (status, _, _) = get(&srv, "/admin/stats", Some(&cookie), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, body) = get(&srv, "/admin/ui", Some(&cookie), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body.contains(r#"name="token""#));
});

backend_tests!(
    over_tls_the_session_cookie_is_secure,
    |backend: Backend| async move {
        let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()])
            .expect("a self-signed certificate");
        let pem = cert.cert.pem();
        let dir = tempfile::tempdir().expect("temp dir");
        let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert_path, &pem).unwrap();
        std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
        let srv = TestServer::builder(backend)
            .env("TASKQ_TLS_CERT", cert_path.to_str().unwrap())
            .env("TASKQ_TLS_KEY", key_path.to_str().unwrap())
            .trust(pem.as_bytes())
            .start()
            .await;
        let resp = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).unwrap())
            .build()
            .unwrap()
            .post(format!("{}/admin/ui/login", srv.base_url))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(format!("token={}", encode_query(&srv.admin_token)))
            .send()
            .await
            .expect("POST /admin/ui/login over TLS");
        assert_eq!(resp.status(), StatusCode::SEE_OTHER);
        let set = resp.headers()[SET_COOKIE].to_str().unwrap();
        assert!(set.ends_with("; Secure"), "{set}");
    }
);

backend_tests!(org_names_are_escaped, |srv| async move {
    let name = r#"<script>alert("x")</script> & co"#;
    let org = srv.create_org_with(json!({ "name": name })).await;
    srv.new_task(&org.owner_key, "load the org").await;
    let cookie = session_cookie(&srv).await;
    let (status, _, body) = get(&srv, "/admin/ui", Some(&cookie), None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!body.contains("<script>alert"), "{body}");
    assert!(
        body.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co"),
        "{body}"
    );
    // The JSON carries the name as it is.
    let (_, stats) = srv.admin(Method::GET, "/admin/stats", None).await;
    let listed = stats["orgs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["org_id"] == org.org_id.as_str())
        .unwrap_or_else(|| panic!("org not listed: {stats}"));
    assert_eq!(listed["name"], name);
});

/// A seeded server: what each org holds, as the API tells it.
struct Seeded {
    orgs: Vec<Org>,
    /// 429s the limited org was answered.
    refused: u64,
}

/// Three orgs: tasks pending, claimed (leases of 600 s, and one of 45 s)
/// and blocked; one org with a write limit of 1 a minute that refused
/// requests; one org whose actor crashed (with the test hooks).
async fn seed(srv: &TestServer) -> Seeded {
    let alpha = srv.create_org_with(json!({ "name": "alpha" })).await;
    let bravo = srv
        .create_org_with(json!({ "name": "bravo", "tier": "pro" }))
        .await;
    let limited = srv.create_org_with(json!({ "name": "charlie" })).await;

    let key = &alpha.owner_key;
    let ids = ids(&srv
        .create_tasks(
            key,
            json!([
                { "title": "a1", "priority": 1 },
                { "title": "a2", "priority": 1 },
                { "title": "a3" }, { "title": "a4" }, { "title": "a5" },
            ]),
        )
        .await);
    srv.create_task(key, json!({ "title": "a-blocked", "blocked_by": [ids[4]] }))
        .await;
    for _ in 0..2 {
        srv.claim(key, json!({ "lease_seconds": 600 }))
            .await
            .unwrap();
    }

    let key = &bravo.owner_key;
    srv.create_tasks(
        key,
        json!([{ "title": "b1" }, { "title": "b2" }, { "title": "b3" }]),
    )
    .await;
    srv.claim(key, json!({ "lease_seconds": 45 }))
        .await
        .unwrap();

    let (status, body) = srv
        .admin(
            Method::PATCH,
            &format!("/admin/orgs/{}", bravo.org_id),
            Some(json!({ "retention_days": 30 })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    srv.set_limits(&limited, json!({ "writes_per_minute": 1 }))
        .await;
    let mut refused = 0;
    for i in 0..3 {
        let (status, body) = srv
            .post(
                &limited.owner_key,
                "/tasks",
                json!({ "tasks": [{ "title": format!("c{i}") }] }),
            )
            .await;
        match status {
            StatusCode::CREATED => {}
            StatusCode::TOO_MANY_REQUESTS => refused += 1,
            other => panic!("create in the limited org: {other} {body}"),
        }
    }
    assert!(refused >= 1, "the write limit refused nothing");
    // A claim is a write too, and its refusal counts like any other.
    let (status, body) = srv
        .post(&limited.owner_key, "/tasks/claim", json!({}))
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    refused += 1;

    #[cfg(feature = "test-hooks")]
    {
        let (status, body) = srv
            .admin(
                Method::POST,
                &format!("/admin/orgs/{}/crash", bravo.org_id),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    Seeded {
        orgs: vec![alpha, bravo, limited],
        refused,
    }
}

/// What the page should show for one org, from the API: open tasks by
/// status listed with the org's key, and the engine's own figures.
async fn expected_org(srv: &TestServer, org: &Org, stats: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for status in ["pending", "in_progress", "blocked"] {
        let n = srv
            .list_all(&org.owner_key, &format!("status={status}"))
            .await
            .len();
        out.insert(status.to_owned(), n.to_string());
    }
    let listed = stats["orgs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["org_id"] == org.org_id.as_str())
        .unwrap_or_else(|| panic!("org {} not in /admin/stats: {stats}", org.org_id));
    for (status, n) in &out {
        assert_eq!(
            listed["tasks"][status].to_string(),
            *n,
            "/admin/stats and GET /tasks disagree on {status}: {listed}"
        );
    }
    for field in [
        "leases",
        "leases_expiring",
        "waiting_claims",
        "restarts",
        "refusals",
    ] {
        out.insert(field.to_owned(), listed[field].to_string());
    }
    out.insert("name".into(), str_field(listed, "name"));
    // Counted now, which the page's next figures show too.
    let (status, detail) = srv
        .admin(Method::GET, &format!("/admin/orgs/{}", org.org_id), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    for (field, count) in [("stored_tasks", "tasks"), ("stored_events", "events")] {
        out.insert(field.to_owned(), detail["stored"][count].to_string());
    }
    let retention = match detail["retention_days"].as_i64() {
        Some(days) => format!("{days} days"),
        None => "forever".to_owned(),
    };
    out.insert("retention_days".into(), retention);
    out
}

backend_tests!(the_figures_match_the_api, |srv| async move {
    let seeded = seed(&srv).await;
    let (status, stats) = srv.admin(Method::GET, "/admin/stats", None).await;
    assert_eq!(status, StatusCode::OK, "{stats}");
    let [alpha, bravo, limited] = [0, 1, 2].map(|i| expected_org(&srv, &seeded.orgs[i], &stats));
    let (alpha, bravo, limited) = (alpha.await, bravo.await, limited.await);
    assert_eq!(
        (&alpha["pending"], &alpha["in_progress"], &alpha["blocked"]),
        (&"3".to_owned(), &"2".to_owned(), &"1".to_owned())
    );
    assert_eq!(
        (&alpha["leases"], &alpha["leases_expiring"]),
        (&"2".into(), &"0".into())
    );
    assert_eq!(
        (&bravo["leases"], &bravo["leases_expiring"]),
        (&"1".into(), &"1".into())
    );
    assert_eq!(limited["refusals"], seeded.refused.to_string());
    // Every task of an org is stored, each with at least its creation.
    assert_eq!(
        (&alpha["stored_tasks"], &bravo["stored_tasks"]),
        (&"6".into(), &"3".into())
    );
    for org in [&alpha, &bravo] {
        let events: u64 = org["stored_events"].parse().unwrap();
        assert!(events >= org["stored_tasks"].parse().unwrap(), "{org:?}");
    }
    assert_eq!(
        (&alpha["retention_days"], &bravo["retention_days"]),
        (&"forever".into(), &"30 days".into())
    );
    // The operator's figures show the counts just taken, and the retention.
    let (_, counted) = srv.admin(Method::GET, "/admin/stats", None).await;
    for (org, expected) in seeded.orgs.iter().zip([&alpha, &bravo, &limited]) {
        let listed = counted["orgs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["org_id"] == org.org_id.as_str())
            .unwrap();
        assert_eq!(
            listed["stored"]["tasks"].to_string(),
            expected["stored_tasks"],
            "{listed}"
        );
        assert_eq!(
            listed["stored"]["events"].to_string(),
            expected["stored_events"],
            "{listed}"
        );
    }
    assert_eq!(
        counted["orgs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["org_id"] == seeded.orgs[1].org_id.as_str())
            .unwrap()["retention_days"],
        30
    );
    assert_eq!(stats["refusals_total"], seeded.refused);
    let commits = stats["writer"]["commits"].as_u64().unwrap();
    assert!(commits > 0, "{stats}");
    assert!(
        stats["writer"]["rows"].as_u64().unwrap() >= commits,
        "{stats}"
    );
    assert!(
        stats["writer"]["latency_ms_p99"].as_f64().unwrap() > 0.0,
        "{stats}"
    );

    // The same figures as /metrics.
    let (_, _, metrics) = get(&srv, "/metrics", None, Some(&srv.admin_token)).await;
    let gauge = |line_start: &str| -> String {
        metrics
            .lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap_or_else(|| panic!("{line_start} not in /metrics:\n{metrics}"))
            .to_owned()
    };
    for (org, expected) in seeded.orgs.iter().zip([&alpha, &bravo, &limited]) {
        let depth = gauge(&format!("taskq_queue_depth{{org_id=\"{}\"}}", org.org_id));
        assert_eq!(depth, expected["pending"]);
    }
    assert_eq!(
        gauge("taskq_rate_limit_refusals_total "),
        seeded.refused.to_string()
    );
    // The writers' counters, read after /admin/stats: at least its totals.
    let counter = |name: &str| -> f64 { gauge(&format!("{name} ")).parse().unwrap() };
    assert!(counter("taskq_commits_total") >= commits as f64);
    assert!(counter("taskq_commit_rows_total") >= counter("taskq_commits_total"));
    assert!(counter("taskq_commit_batches_total") >= counter("taskq_commits_total"));
    assert!(counter("taskq_commit_seconds_total") > 0.0);
    assert_eq!(counter("taskq_commit_failures_total"), 0.0);
    assert_eq!(
        counter("taskq_claims_kept_total") + counter("taskq_claims_read_total"),
        (stats["claim_cache"]["claims_kept"].as_u64().unwrap()
            + stats["claim_cache"]["claims_read"].as_u64().unwrap()) as f64
    );
    assert_eq!(
        counter("taskq_claim_cache_refilled_total"),
        stats["claim_cache"]["tasks_refilled"].as_u64().unwrap() as f64
    );

    #[cfg(feature = "test-hooks")]
    {
        assert_eq!(bravo["restarts"], "1");
        let listed = stats["orgs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["org_id"] == seeded.orgs[1].org_id.as_str())
            .unwrap();
        let error = str_field(listed, "last_restart_error");
        assert!(error.contains("crash"), "{listed}");
        assert_eq!(stats["actors"]["last_restart"]["error"], error);
        assert_eq!(gauge("taskq_actor_restarts_total "), "1");
    }
});

/// Every figure the page shows: org fields by org id, and the engine-wide
/// ones under `""` by their `data-stat` path.
const READ_PAGE: &str = r#"
const out = { "": {} };
for (const el of document.querySelectorAll("[data-stat]")) out[""][el.dataset.stat] = el.textContent;
for (const tr of document.querySelectorAll("tr[data-org]")) {
  const row = {};
  for (const cell of tr.querySelectorAll("[data-field]")) row[cell.dataset.field] = cell.textContent;
  out[tr.dataset.org] = row;
}
out[""].refreshes = document.body.dataset.refreshes || "";
return out;
"#;

backend_tests!(
    the_page_shows_what_the_api_says,
    needs(
        "chromedriver",
        "needs TASKQ_TEST_CHROMEDRIVER (Chromium's chromedriver)"
    ),
    |srv| async move {
        let chromedriver = chromedriver();
        let seeded = seed(&srv).await;
        let browser = Browser::start(&chromedriver).await;

        browser.goto(&format!("{}/admin/ui", srv.base_url)).await;
        browser.type_into("#token", &srv.admin_token).await;
        browser.click("#sign-in").await;

        // A task created after the page loaded must show up by polling.
        srv.new_task(&seeded.orgs[0].owner_key, "after the page loaded")
            .await;
        let (_, stats) = srv.admin(Method::GET, "/admin/stats", None).await;
        let mut expected = BTreeMap::new();
        for org in &seeded.orgs {
            expected.insert(org.org_id.clone(), expected_org(&srv, org, &stats).await);
        }
        assert_eq!(expected[&seeded.orgs[0].org_id]["pending"], "4");

        let deadline = Instant::now() + Duration::from_secs(30);
        let page = loop {
            let page = browser.script(READ_PAGE).await;
            let refreshed = page[""]["refreshes"]
                .as_str()
                .and_then(|s| s.parse::<u64>().ok())
                .is_some_and(|n| n >= 1);
            let shown = expected.iter().all(|(org, fields)| {
                fields
                    .iter()
                    .all(|(field, value)| page[org.as_str()][field.as_str()] == value.as_str())
            });
            if refreshed && shown {
                break page;
            }
            if Instant::now() >= deadline {
                panic!(
                "the page does not show what the API says.\nexpected {expected:#?}\npage {page:#}"
            );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let globals = &page[""];
        assert_eq!(globals["refusals_total"], seeded.refused.to_string());
        assert_eq!(
            globals["orgs.length"],
            stats["orgs"].as_array().unwrap().len().to_string()
        );
        let commits: u64 = globals["writer.commits"].as_str().unwrap().parse().unwrap();
        assert!(
            commits >= stats["writer"]["commits"].as_u64().unwrap(),
            "{page:#}"
        );
        assert_ne!(globals["writer.latency_ms_p99.2"], "—", "{page:#}");
        #[cfg(feature = "test-hooks")]
        assert!(
            globals["actors.last_restart.error"]
                .as_str()
                .unwrap()
                .contains("crash"),
            "{page:#}"
        );

        let backend = format!("{:?}", srv.backend).to_lowercase();
        browser.screenshot(&format!("operator-ui-{backend}")).await;

        // Signing out from the page ends the session.
        browser.click("#logout").await;
        eventually(
            Duration::from_secs(10),
            "the login form after signing out",
            || async {
                let shown = browser
                    .script(r#"return document.getElementById("token") !== null;"#)
                    .await;
                (shown == true).then_some(())
            },
        )
        .await;
        browser.quit().await;
    }
);
