//! The board (`/board`, CONTRACT.md §8), black-box against the real server.
//!
//! Plain HTTP: sign-in and sign-out and the cookie's attributes, a wrong
//! key, the CSP of every page, writes refused (403, nothing changed)
//! without the session or its CSRF token, another org's task as not found,
//! a `user` key without the admin form (and refused anyway), escaping, and
//! a key that stops working ending its sessions. In headless Chromium
//! (`browser`; skipped with a note unless `TASKQ_TEST_CHROMEDRIVER` names a
//! chromedriver): a graph of three tasks made through the board, one
//! completed through the API and its dependent shown pending without a
//! reload, hostile content in every field shown as text and run nowhere,
//! axe-core on every view (`TASKQ_TEST_AXE_JS`, skipped with a note when
//! unset), and a screenshot of each view.

#[macro_use]
mod common;
mod board {
    pub mod browser;
}

use std::time::{Duration, Instant};

use board::browser::{axe_source, chromedriver, Browser};
use common::*;
use reqwest::header::{CONTENT_SECURITY_POLICY, CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use reqwest::Method;

/// A client that shows redirects and cookies as they come.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("http client")
}

/// `POST /board/login` with `api_key`.
async fn login(srv: &TestServer, key: &str) -> reqwest::Response {
    client()
        .post(format!("{}/board/login", srv.base_url))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("api_key={}", encode_query(key)))
        .send()
        .await
        .expect("POST /board/login")
}

/// Signs in; the `Cookie` header value of the session.
async fn sign_in(srv: &TestServer, key: &str) -> String {
    let resp = login(srv, key).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let set = resp.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    set.split(';').next().unwrap().to_owned()
}

struct Page {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    body: String,
}

async fn get(srv: &TestServer, path: &str, cookie: Option<&str>) -> Page {
    let mut req = client().get(format!("{}{path}", srv.base_url));
    if let Some(c) = cookie {
        req = req.header(COOKIE, c);
    }
    let resp = req.send().await.expect("GET");
    Page {
        status: resp.status(),
        headers: resp.headers().clone(),
        body: resp.text().await.expect("body"),
    }
}

async fn post_form(
    srv: &TestServer,
    path: &str,
    cookie: Option<&str>,
    fields: &[(&str, &str)],
) -> Page {
    let body = fields
        .iter()
        .map(|(k, v)| format!("{k}={}", encode_query(v)))
        .collect::<Vec<_>>()
        .join("&");
    let mut req = client()
        .post(format!("{}{path}", srv.base_url))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(body);
    if let Some(c) = cookie {
        req = req.header(COOKIE, c);
    }
    let resp = req.send().await.expect("POST");
    Page {
        status: resp.status(),
        headers: resp.headers().clone(),
        body: resp.text().await.expect("body"),
    }
}

/// The CSRF token a page's forms carry.
fn csrf_of(html: &str) -> String {
    let start = html
        .find(r#"name="csrf" value=""#)
        .unwrap_or_else(|| panic!("no CSRF field in {html}"))
        + r#"name="csrf" value=""#.len();
    html[start..start + 64].to_owned()
}

/// A page's CSP admits no inline script but by nonce, and no other origin.
fn assert_strict_csp(page: &Page, what: &str) {
    let csp = page
        .headers
        .get(CONTENT_SECURITY_POLICY)
        .unwrap_or_else(|| panic!("{what}: no Content-Security-Policy"))
        .to_str()
        .unwrap();
    assert!(csp.contains("default-src 'none'"), "{what}: {csp}");
    let script = csp
        .split(';')
        .map(str::trim)
        .find(|d| d.starts_with("script-src"))
        .unwrap_or_else(|| panic!("{what}: no script-src: {csp}"));
    let sources: Vec<&str> = script.split_whitespace().skip(1).collect();
    assert!(
        sources
            .iter()
            .all(|s| s.starts_with("'nonce-") || s.starts_with("'sha256-")),
        "{what}: script-src admits more than nonces: {csp}"
    );
    for banned in [
        "unsafe-inline",
        "unsafe-eval",
        "http:",
        "https:",
        "*",
        "data:",
    ] {
        assert!(!csp.contains(banned), "{what}: {banned} in {csp}");
    }
    let ct = page.headers[CONTENT_TYPE].to_str().unwrap();
    assert!(ct.starts_with("text/html"), "{what}: {ct}");
    // Every script element carries the nonce; no other attribute runs code.
    let nonce = sources[0]
        .trim_start_matches("'nonce-")
        .trim_end_matches('\'');
    assert_eq!(
        page.body.matches("<script").count(),
        page.body
            .matches(&format!("<script nonce=\"{nonce}\">"))
            .count(),
        "{what}: a script without the nonce"
    );
}

backend_tests!(sign_in_and_out, |srv| async move {
    let org = srv.create_org("dev").await;

    // The form needs no key.
    let page = get(&srv, "/board", None).await;
    assert_eq!(page.status, StatusCode::OK);
    assert_strict_csp(&page, "GET /board");
    assert!(page.body.contains(r#"name="api_key""#), "{}", page.body);
    assert!(page.body.contains(r#"action="/board/login""#));

    // A wrong key: the form again, with an error, 401, and no cookie.
    let resp = login(&srv, "tq_wrong_key").await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(resp.headers().get(SET_COOKIE).is_none());
    let body = resp.text().await.unwrap();
    assert!(body.contains("invalid api key"), "{body}");
    assert!(body.contains(r#"name="api_key""#), "{body}");

    // The key: a session cookie that is not the key, then the board.
    let resp = login(&srv, &org.owner_key).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(resp.headers()[LOCATION], "/board/tasks");
    let set = resp.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/board"] {
        assert!(set.contains(attribute), "{set}");
    }
    assert!(!set.contains(&org.owner_key), "{set}");
    let value = set.split(';').next().unwrap();
    let key: Vec<char> = org.owner_key.chars().collect();
    assert!(
        key.windows(12)
            .all(|w| !value.contains(&w.iter().collect::<String>())),
        "the cookie carries part of the key: {set}"
    );
    let cookie = set.split(';').next().unwrap().to_owned();

    // Signed in, the form goes to the board; every view answers with the CSP.
    let page = get(&srv, "/board", Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    let task = srv.new_task(&org.owner_key, "a task").await;
    for path in [
        "/board/tasks".to_owned(),
        format!("/board/tasks/{task}"),
        "/board/agents".into(),
        "/board/insights".into(),
        "/board/org".into(),
        "/board/tasks?status=pending&tags=a%2Cb&priority_max=3&q=x".into(),
    ] {
        let page = get(&srv, &path, Some(&cookie)).await;
        assert_eq!(page.status, StatusCode::OK, "{path}: {}", page.body);
        assert_strict_csp(&page, &path);
    }
    let missing = get(&srv, &format!("/board/tasks/{}", new_uuid()), Some(&cookie)).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_strict_csp(&missing, "the 404 page");

    // The pages need the session.
    let page = get(&srv, "/board/tasks", None).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(page.headers[LOCATION], "/board");
    let page = get(&srv, "/board/tasks", Some("taskq_board=forged")).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    let live = get(&srv, "/board/live", None).await;
    assert_eq!(live.status, StatusCode::UNAUTHORIZED);

    // Sign-out is a write: without the token it is refused and the
    // session lives on.
    let board = get(&srv, "/board/tasks", Some(&cookie)).await;
    let token = csrf_of(&board.body);
    let refused = post_form(&srv, "/board/logout", Some(&cookie), &[]).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_strict_csp(&refused, "the 403 page");
    assert_eq!(
        get(&srv, "/board/tasks", Some(&cookie)).await.status,
        StatusCode::OK
    );
    let out = post_form(&srv, "/board/logout", Some(&cookie), &[("csrf", &token)]).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    let cleared = out.headers[SET_COOKIE].to_str().unwrap();
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    // Ended at once, and the cookie is no key anywhere else.
    assert_eq!(
        get(&srv, "/board/tasks", Some(&cookie)).await.status,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        get(&srv, "/board/live", Some(&cookie)).await.status,
        StatusCode::UNAUTHORIZED
    );
    let (status, _) = srv
        .raw(Method::GET, "/tasks", &[("cookie", &cookie)], None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
});

backend_tests!(writes_need_the_session_and_its_token, |srv| async move {
    let org = srv.create_org("dev").await;
    let other = srv.create_org("dev").await;
    let cookie = sign_in(&srv, &org.owner_key).await;
    let token = csrf_of(&get(&srv, "/board/tasks", Some(&cookie)).await.body);
    // A token of another session (another org's) is not this one's.
    let other_cookie = sign_in(&srv, &other.owner_key).await;
    let other_token = csrf_of(&get(&srv, "/board/tasks", Some(&other_cookie)).await.body);
    assert_ne!(token, other_token);

    fn create(token: Option<&str>) -> Vec<(&'static str, &str)> {
        let mut fields = vec![("title", "from the board")];
        if let Some(t) = token {
            fields.push(("csrf", t));
        }
        fields
    }
    for (cookie, fields, what) in [
        (None, create(Some(&token)), "no session"),
        (Some(cookie.as_str()), create(None), "no token"),
        (Some(cookie.as_str()), create(Some("")), "an empty token"),
        (
            Some(cookie.as_str()),
            create(Some(&other_token)),
            "another session's token",
        ),
        (
            Some(cookie.as_str()),
            create(Some(&token[..63])),
            "a cut token",
        ),
    ] {
        let page = post_form(&srv, "/board/tasks", cookie, &fields).await;
        assert_eq!(page.status, StatusCode::FORBIDDEN, "{what}: {}", page.body);
    }
    assert!(
        srv.list_all(&org.owner_key, "").await.is_empty(),
        "a refused create wrote"
    );

    // With both: created, and its page follows.
    let page = post_form(&srv, "/board/tasks", Some(&cookie), &create(Some(&token))).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    let location = page.headers[LOCATION].to_str().unwrap().to_owned();
    let id = location.strip_prefix("/board/tasks/").unwrap().to_owned();
    assert_eq!(
        srv.get_task(&org.owner_key, &id).await["title"],
        "from the board"
    );

    // Updates likewise.
    let path = format!("/board/tasks/{id}/update");
    let change = [("priority", "1"), ("fields", "1"), ("tags", "")];
    for (cookie, token) in [(None, Some(token.as_str())), (Some(cookie.as_str()), None)] {
        let mut fields = change.to_vec();
        if let Some(t) = token {
            fields.push(("csrf", t));
        }
        let page = post_form(&srv, &path, cookie, &fields).await;
        assert_eq!(page.status, StatusCode::FORBIDDEN, "{}", page.body);
    }
    let cancel = [
        ("status", "canceled"),
        ("note", "no"),
        ("assignee", org.owner_email.as_str()),
    ];
    let page = post_form(&srv, &path, Some(&cookie), &cancel).await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
    let task = srv.get_task(&org.owner_key, &id).await;
    assert_eq!(
        (task["priority"].as_u64(), task["status"].as_str()),
        (Some(3), Some("pending"))
    );

    let mut fields = change.to_vec();
    fields.push(("csrf", &token));
    let page = post_form(&srv, &path, Some(&cookie), &fields).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    assert_eq!(srv.get_task(&org.owner_key, &id).await["priority"], 1);

    // The API's rules, as the API applies them: a note is required to cancel.
    let page = post_form(
        &srv,
        &path,
        Some(&cookie),
        &[("status", "canceled"), ("csrf", &token)],
    )
    .await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST, "{}", page.body);
    assert_eq!(srv.status_of(&org.owner_key, &id).await, "pending");
    let mut fields = cancel.to_vec();
    fields.push(("csrf", &token));
    let page = post_form(&srv, &path, Some(&cookie), &fields).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    assert_eq!(srv.status_of(&org.owner_key, &id).await, "canceled");
    // An invalid move says so, and changes nothing.
    let done = [
        ("status", "completed"),
        ("note", "n"),
        ("csrf", token.as_str()),
    ];
    let page = post_form(&srv, &path, Some(&cookie), &done).await;
    assert_eq!(page.status, StatusCode::CONFLICT, "{}", page.body);
    assert!(
        page.body.contains("Invalid status transition"),
        "{}",
        page.body
    );
    // Retry.
    let retry = [("status", "pending"), ("csrf", token.as_str())];
    assert_eq!(
        post_form(&srv, &path, Some(&cookie), &retry).await.status,
        StatusCode::SEE_OTHER
    );
    assert_eq!(srv.status_of(&org.owner_key, &id).await, "pending");
});

backend_tests!(one_org_never_sees_another, |srv| async move {
    let mine = srv.create_org("dev").await;
    let theirs = srv.create_org("dev").await;
    let secret = srv.new_task(&theirs.owner_key, "their secret plans").await;
    srv.new_task(&mine.owner_key, "my own task").await;
    let cookie = sign_in(&srv, &mine.owner_key).await;

    let page = get(&srv, &format!("/board/tasks/{secret}"), Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::NOT_FOUND);
    assert!(!page.body.contains("their secret plans"));
    let board = get(&srv, "/board/tasks", Some(&cookie)).await;
    assert!(board.body.contains("my own task"), "{}", board.body);
    assert!(!board.body.contains("their secret plans"));
    assert!(!board.body.contains(&secret));

    // Nor change it.
    let token = csrf_of(&board.body);
    let fields = [
        ("fields", "1"),
        ("priority", "1"),
        ("tags", ""),
        ("csrf", token.as_str()),
    ];
    let page = post_form(
        &srv,
        &format!("/board/tasks/{secret}/update"),
        Some(&cookie),
        &fields,
    )
    .await;
    assert_eq!(page.status, StatusCode::NOT_FOUND, "{}", page.body);
    assert_eq!(
        srv.get_task(&theirs.owner_key, &secret).await["priority"],
        3
    );
});

backend_tests!(
    a_user_key_has_no_admin_form_and_is_refused_anyway,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let user_key = srv
            .add_member(&org, &format!("{}@example.com", unique("user")), "user")
            .await;
        let user = sign_in(&srv, &user_key).await;
        let page = get(&srv, "/board/org", Some(&user)).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(!page.body.contains(r#"id="create-tag""#), "{}", page.body);
        let token = csrf_of(&page.body);
        let refused = post_form(
            &srv,
            "/board/tags",
            Some(&user),
            &[("name", "sneaky"), ("csrf", &token)],
        )
        .await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
        assert!(srv.list_tags(&org.owner_key).await.is_empty());

        let owner = sign_in(&srv, &org.owner_key).await;
        let page = get(&srv, "/board/org", Some(&owner)).await;
        assert!(page.body.contains(r#"id="create-tag""#), "{}", page.body);
        let token = csrf_of(&page.body);
        let added = post_form(
            &srv,
            "/board/tags",
            Some(&owner),
            &[("name", "urgent"), ("csrf", &token)],
        )
        .await;
        assert_eq!(added.status, StatusCode::SEE_OTHER, "{}", added.body);
        assert_eq!(srv.list_tags(&org.owner_key).await[0]["name"], "urgent");

        // The role is read on every request: promoted, the user sees the form.
        let email = srv
            .list_members(&org.owner_key)
            .await
            .into_iter()
            .map(|m| str_field(&m, "email"))
            .find(|e| e.starts_with("user"))
            .unwrap();
        srv.patch_member(&org.owner_key, &email, json!({ "role": "admin" }))
            .await;
        let page = get(&srv, "/board/org", Some(&user)).await;
        assert!(page.body.contains(r#"id="create-tag""#), "{}", page.body);
    }
);

backend_tests!(a_revoked_key_ends_its_sessions, |srv| async move {
    let org = srv.create_org("dev").await;
    let (key_id, key) = srv.new_key(&org.owner_key, "laptop").await;
    let cookie = sign_in(&srv, &key).await;
    assert_eq!(
        get(&srv, "/board/tasks", Some(&cookie)).await.status,
        StatusCode::OK
    );
    let (status, _) = srv.delete(&org.owner_key, &format!("/keys/{key_id}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        get(&srv, "/board/tasks", Some(&cookie)).await.status,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        get(&srv, "/board/live", Some(&cookie)).await.status,
        StatusCode::UNAUTHORIZED
    );
});

backend_tests!(fields_are_escaped_and_the_mark_moves, |srv| async move {
    let org = srv.create_org("dev").await;
    let hostile = r#"<script>window.__pwned=1</script><img src=x onerror=alert(1)>"#;
    let id = srv
        .create_task(
            &org.owner_key,
            json!({ "title": hostile, "description": hostile,
            "metadata": { "k": hostile }, "tags": [hostile] }),
        )
        .await;
    let cookie = sign_in(&srv, &org.owner_key).await;
    for path in ["/board/tasks".to_owned(), format!("/board/tasks/{id}")] {
        let page = get(&srv, &path, Some(&cookie)).await;
        assert!(
            !page.body.contains("<script>window"),
            "{path}: {}",
            page.body
        );
        assert!(!page.body.contains("<img"), "{path}");
        // Escaped, whichever way the entities are spelt.
        let text = page.body.replace("&#60;", "&lt;").replace("&#62;", "&gt;");
        assert!(
            text.contains("&lt;script&gt;window.__pwned=1&lt;/script&gt;"),
            "{path}: {}",
            page.body
        );
    }

    // The mark the pages poll moves with a change made elsewhere.
    let mark = |srv: &TestServer, cookie: String| {
        let url = format!("{}/board/live", srv.base_url);
        async move {
            let resp = client()
                .get(url)
                .header(COOKIE, cookie)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            let v: Value = resp.json().await.unwrap();
            str_field(&v, "mark")
        }
    };
    let before = mark(&srv, cookie.clone()).await;
    assert_eq!(
        before,
        mark(&srv, cookie.clone()).await,
        "the mark moved by itself"
    );
    srv.update_ok(&org.owner_key, json!({ "task_id": id, "priority": 1 }))
        .await;
    assert_ne!(before, mark(&srv, cookie.clone()).await);
});

// ------------------------------------------------------------------ browser

/// Signs in through the form.
async fn browser_sign_in(browser: &Browser, srv: &TestServer, key: &str) {
    browser.goto(&format!("{}/board", srv.base_url)).await;
    browser.type_into("#api_key", key).await;
    browser.click("#sign-in").await;
    browser
        .wait_for(
            "the board after signing in",
            r#"location.pathname === "/board/tasks""#,
        )
        .await;
}

/// Creates a task through the board's form; its id.
async fn create_through_form(
    browser: &Browser,
    srv: &TestServer,
    title: &str,
    blocked_by: &str,
) -> String {
    browser.goto(&format!("{}/board/tasks", srv.base_url)).await;
    browser
        .script(r#"document.querySelector("details.create").open = true; return true;"#)
        .await;
    browser.type_into("#c-title", title).await;
    if !blocked_by.is_empty() {
        browser.type_into("#c-blocked", blocked_by).await;
    }
    browser.click("#create-submit").await;
    browser
        .wait_for(
            "the new task's page",
            r#"/^\/board\/tasks\/[0-9a-f-]{36}$/.test(location.pathname)"#,
        )
        .await;
    browser.url().await.rsplit('/').next().unwrap().to_owned()
}

async fn assert_accessible(browser: &Browser, axe: Option<&str>, view: &str) {
    let Some(axe) = axe else { return };
    let violations = browser.axe_violations(axe).await;
    assert!(violations.is_empty(), "axe-core on {view}: {violations:#?}");
}

/// A graph of three tasks through the board; the first completed through
/// the API shows its dependent pending without a reload; every view passes
/// axe-core and is kept as a screenshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_board_in_a_browser() {
    let Some(driver) = chromedriver() else { return };
    let axe = axe_source();
    let srv = TestServer::start(Backend::Sqlite).await;
    let org = srv.create_org("pro").await;
    let other = srv.create_org("dev").await;
    srv.new_task(&other.owner_key, "another org's task").await;
    let browser = Browser::start(&driver).await;

    browser.goto(&format!("{}/board", srv.base_url)).await;
    assert_accessible(&browser, axe.as_deref(), "the sign-in form").await;
    browser.screenshot("board-sign-in").await;
    browser_sign_in(&browser, &srv, &org.owner_key).await;

    let a = create_through_form(&browser, &srv, "Collect the logs", "").await;
    let b = create_through_form(&browser, &srv, "Find the cause", &a).await;
    let c = create_through_form(&browser, &srv, "Ship the fix", &b).await;
    assert_eq!(srv.status_of(&org.owner_key, &b).await, "blocked");

    // B's page: A blocks it, it blocks C.
    browser
        .goto(&format!("{}/board/tasks/{b}", srv.base_url))
        .await;
    let graph = browser
        .script(
            r#"return [...document.querySelectorAll("svg.graph a.node")]
        .map(n => [n.dataset.task, n.dataset.status]);"#,
        )
        .await;
    assert_eq!(
        graph,
        json!([[a, "pending"], [b, "blocked"], [c, "blocked"]]),
        "{graph}"
    );
    let edges = browser
        .script(r#"return document.querySelectorAll("svg.graph line").length;"#)
        .await;
    assert_eq!(edges, 2);

    // An agent completes A through the API; B turns pending on the open page.
    browser
        .script("window.__same_page = true; return true;")
        .await;
    let claimed = srv
        .claim(&org.owner_key, json!({}))
        .await
        .expect("A is claimable");
    assert_eq!(claimed["task_id"], a.as_str());
    srv.update_ok(
        &org.owner_key,
        json!({ "task_id": a, "status": "completed", "note": "done", "output": { "logs": 3 } }),
    )
    .await;
    let started = Instant::now();
    browser
        .wait_for(
            "B pending on its open page",
            r#"document.getElementById("task-status").textContent === "pending""#,
        )
        .await;
    let shown_after = started.elapsed();
    assert!(
        shown_after < Duration::from_secs(2),
        "shown after {shown_after:?}"
    );
    assert_eq!(
        browser.script("return window.__same_page === true;").await,
        true,
        "the page reloaded"
    );
    let graph = browser.script(r#"return [...document.querySelectorAll("svg.graph a.node")].map(n => n.dataset.status);"#).await;
    assert_eq!(graph, json!(["completed", "pending", "blocked"]));
    assert_accessible(&browser, axe.as_deref(), "a task's page").await;
    browser.screenshot("board-task").await;
    srv.create_tasks(
        &org.owner_key,
        json!([
            { "title": "Write the postmortem", "priority": 2, "tags": ["docs"] },
            { "title": "Rotate the on-call", "priority": 4 },
        ]),
    )
    .await;

    // A's page: its output, formatted, and its history.
    browser
        .goto(&format!("{}/board/tasks/{a}", srv.base_url))
        .await;
    let output = browser
        .script(r#"return document.getElementById("task-output").textContent;"#)
        .await;
    assert_eq!(output, "{\n  \"logs\": 3\n}");
    let history = browser
        .script(r##"return document.querySelectorAll("#task-history li").length;"##)
        .await;
    assert_eq!(history, 3);

    // The board: columns by status; another org's task nowhere.
    browser.goto(&format!("{}/board/tasks", srv.base_url)).await;
    let columns = browser
        .script(
            r#"const out = {};
        for (const col of document.querySelectorAll(".col")) out[col.dataset.status] =
            [...col.querySelectorAll(".card")].map(c => c.dataset.task);
        return out;"#,
        )
        .await;
    assert_eq!(columns["completed"], json!([a]));
    assert_eq!(columns["pending"].as_array().unwrap().len(), 3, "{columns}");
    assert_eq!(columns["blocked"], json!([c]));
    let text = browser.script("return document.body.textContent;").await;
    assert!(!text.as_str().unwrap().contains("another org's task"));
    assert_accessible(&browser, axe.as_deref(), "the board").await;
    browser.screenshot("board-tasks").await;

    // A task claimed by an agent while the board is open shows up too.
    srv.create_task(&org.owner_key, json!({ "title": "Added by an agent" }))
        .await;
    browser
        .wait_for(
            "a task created elsewhere",
            r#"document.body.textContent.includes("Added by an agent")"#,
        )
        .await;

    // Filters.
    browser
        .goto(&format!("{}/board/tasks?tags=docs", srv.base_url))
        .await;
    let cards = browser
        .script(r#"return document.querySelectorAll(".card").length;"#)
        .await;
    assert_eq!(cards, 1);

    // The other views, with the reports computed.
    srv.claim(&org.owner_key, json!({ "lease_seconds": 600 }))
        .await
        .expect("a claim");
    let (status, body) = srv
        .admin(
            Method::POST,
            &format!("/admin/orgs/{}/recompute", org.org_id),
            Some(json!({ "reports": ["insights", "standup"] })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for (path, name) in [
        ("/board/agents", "board-agents"),
        ("/board/insights", "board-insights"),
        ("/board/org", "board-org"),
    ] {
        browser.goto(&format!("{}{path}", srv.base_url)).await;
        browser
            .wait_for(path, r#"document.querySelector("h1") !== null"#)
            .await;
        assert_accessible(&browser, axe.as_deref(), path).await;
        browser.screenshot(name).await;
    }
    browser
        .goto(&format!("{}/board/insights", srv.base_url))
        .await;
    let charts = browser
        .script(r#"return document.querySelectorAll("figure.chart svg").length;"#)
        .await;
    assert!(charts.as_u64().unwrap() >= 3, "charts: {charts}");
    let leases = browser_leases(&browser, &srv).await;
    assert_eq!(leases, 1);

    // Another org's task by id: not found.
    let theirs = srv.list_ids(&other.owner_key, "").await;
    browser
        .goto(&format!("{}/board/tasks/{}", srv.base_url, theirs[0]))
        .await;
    let heading = browser
        .script(r#"return document.querySelector("h1").textContent;"#)
        .await;
    assert_eq!(heading, "Not found");
    assert_accessible(&browser, axe.as_deref(), "the 404 page").await;

    // Signing out from the page.
    browser.goto(&format!("{}/board/tasks", srv.base_url)).await;
    browser.click("#logout").await;
    browser
        .wait_for(
            "the sign-in form",
            r#"document.getElementById("api_key") !== null"#,
        )
        .await;
    browser.goto(&format!("{}/board/tasks", srv.base_url)).await;
    browser
        .wait_for(
            "the sign-in form again",
            r#"document.getElementById("api_key") !== null"#,
        )
        .await;
    browser.quit().await;
}

async fn browser_leases(browser: &Browser, srv: &TestServer) -> u64 {
    browser
        .goto(&format!("{}/board/agents", srv.base_url))
        .await;
    browser
        .script(r#"return document.querySelectorAll(".holder tbody tr").length;"#)
        .await
        .as_u64()
        .unwrap()
}

/// Payloads that would run script, load something or change the title if
/// any reached the page as markup.
const PAYLOADS: [&str; 9] = [
    r#"<script>window.__pwned=1;document.title="pwned"</script>"#,
    r#"<img src=x onerror="window.__pwned=1;document.title='pwned'">"#,
    r#""><svg onload="window.__pwned=1"><script>window.__pwned=1</script></svg>"#,
    r#"javascript:window.__pwned=1"#,
    r#"<a href="javascript:window.__pwned=1" id="pwn">click</a>"#,
    r#"</textarea></title></style><script>window.__pwned=1</script>"#,
    r#"<iframe srcdoc="<script>parent.__pwned=1</script>"></iframe>"#,
    "\u{202E}evil reversed\u{202C} and \u{2067}isolate",
    r#"{{7*7}} ${7*7} <!-- comment"#,
];

/// Hostile content in every field an agent writes is shown as text and
/// runs nothing; bidi overrides stay inside their own element.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_content_runs_nothing() {
    let Some(driver) = chromedriver() else { return };
    let axe = axe_source();
    let srv = TestServer::start(Backend::Sqlite).await;
    let org = srv.create_org("dev").await;
    let all = PAYLOADS.join(" | ");
    let blocker = srv
        .create_task(
            &org.owner_key,
            json!({ "title": PAYLOADS[2], "tags": [PAYLOADS[0]] }),
        )
        .await;
    let id = srv
        .create_task(
            &org.owner_key,
            json!({
                "title": all,
                "description": all,
                "metadata": { "a": PAYLOADS[0], "b": PAYLOADS[1], PAYLOADS[4]: PAYLOADS[7] },
                "tags": [PAYLOADS[1], PAYLOADS[7]],
                "blocked_by": [blocker],
            }),
        )
        .await;
    srv.create_task(
        &org.owner_key,
        json!({ "title": PAYLOADS[6], "blocked_by": [id] }),
    )
    .await;
    // An agent whose key name is hostile claims the blocker and writes a
    // hostile output and note.
    let (_, agent) = srv
        .new_key(&org.owner_key, "agent <b>bold</b> \"quoted\"")
        .await;
    let claimed = srv
        .claim(&agent, json!({ "lease_seconds": 600 }))
        .await
        .expect("claim");
    assert_eq!(claimed["task_id"], blocker.as_str());
    srv.update_ok(
        &agent,
        json!({ "task_id": blocker, "output": { "html": all } }),
    )
    .await;
    // A note is kept with a move: a task paused with a hostile note.
    let noted = srv
        .create_task(&org.owner_key, json!({ "title": PAYLOADS[7] }))
        .await;
    srv.update_ok(
        &org.owner_key,
        json!({ "task_id": noted, "status": "paused", "note": all,
        "assignee": org.owner_email }),
    )
    .await;

    let browser = Browser::start(&driver).await;
    browser_sign_in(&browser, &srv, &org.owner_key).await;
    let check = r#"
        const bad = [];
        if (window.__pwned !== undefined) bad.push("a payload ran");
        if (!document.title.endsWith("taskq board")) bad.push("title " + document.title);
        for (const el of document.querySelectorAll("img, iframe, object, embed, link, base, meta[http-equiv], form[action^=javascript]"))
            bad.push("element " + el.outerHTML.slice(0, 80));
        if (document.getElementById("pwn")) bad.push("an injected link");
        for (const el of document.querySelectorAll("*")) {
            for (const attr of el.attributes) {
                if (/^on/i.test(attr.name)) bad.push("handler " + attr.name);
                if (["href", "src", "action", "formaction", "xlink:href"].includes(attr.name)
                    && /^\s*javascript:/i.test(attr.value)) bad.push("javascript: link");
            }
        }
        const scripts = document.querySelectorAll("script");
        if (scripts.length > 1) bad.push(scripts.length + " scripts");
        // Every text with a bidi control sits in an isolating element.
        const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
        let shown = 0;
        while (walker.nextNode()) {
            const node = walker.currentNode;
            if (!/[\u202A-\u202E\u2066-\u2069]/.test(node.data)) continue;
            shown += 1;
            let el = node.parentElement, isolated = false;
            while (el && el !== document.body) {
                const ub = getComputedStyle(el).unicodeBidi;
                if (el.tagName === "BDI" || ub === "isolate" || ub === "plaintext" || ub === "isolate-override") { isolated = true; break; }
                el = el.parentElement;
            }
            if (!isolated) bad.push("bidi text not isolated: " + node.data.slice(0, 40));
        }
        return { bad, shown };"#;
    for path in [
        "/board/tasks".to_owned(),
        format!("/board/tasks/{id}"),
        format!("/board/tasks/{blocker}"),
        format!("/board/tasks/{noted}"),
        "/board/agents".into(),
        format!("/board/tasks?tags={}", encode_query(PAYLOADS[1])),
    ] {
        browser.goto(&format!("{}{path}", srv.base_url)).await;
        browser
            .wait_for(&path, r#"document.querySelector("h1") !== null"#)
            .await;
        let found = browser.script(check).await;
        assert_eq!(found["bad"], json!([]), "{path}: {found}");
        assert!(
            found["shown"].as_u64().unwrap() >= 1 || path.contains("agents"),
            "{path}: no bidi text shown: {found}"
        );
        assert_accessible(&browser, axe.as_deref(), &path).await;
    }
    // Shown as the very text the agent wrote.
    browser
        .goto(&format!("{}/board/tasks/{id}", srv.base_url))
        .await;
    let shown = browser
        .script(
            r#"return [document.getElementById("task-title").textContent,
        document.getElementById("task-description").textContent,
        JSON.parse(document.getElementById("task-metadata").textContent)];"#,
        )
        .await;
    assert_eq!(shown[0], all.as_str());
    assert_eq!(shown[1], all.as_str());
    assert_eq!(shown[2]["a"], PAYLOADS[0]);
    browser
        .goto(&format!("{}/board/tasks/{blocker}", srv.base_url))
        .await;
    let shown = browser
        .script(
            r##"return [JSON.parse(document.getElementById("task-output").textContent).html,
        document.getElementById("task-lease").textContent];"##,
        )
        .await;
    assert_eq!(shown[0], all.as_str());
    assert!(
        shown[1]
            .as_str()
            .unwrap()
            .contains("agent <b>bold</b> \"quoted\""),
        "{shown}"
    );
    let found = browser.script(check).await;
    assert_eq!(found["bad"], json!([]), "{found}");
    browser
        .goto(&format!("{}/board/tasks/{noted}", srv.base_url))
        .await;
    let note = browser
        .script(r##"return document.querySelector("#task-history .note-text").textContent;"##)
        .await;
    assert_eq!(note, all.as_str());
    let found = browser.script(check).await;
    assert_eq!(found["bad"], json!([]), "{found}");
    browser.quit().await;
}

/// Page weight of each view and the time to first render of a board of
/// 1,000 tasks (Navigation and Paint Timing), for docs/perf.md. Run by
/// hand: `cargo test --features test-hooks --test board -- --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn measure_the_board() {
    let Some(driver) = chromedriver() else { return };
    let srv = TestServer::start(Backend::Sqlite).await;
    let org = srv.create_org("pro").await;
    for batch in 0..40 {
        let items: Vec<Value> = (0..25)
            .map(|i| {
                json!({ "title": format!("Task {} of the big board", batch * 25 + i),
                              "priority": 1 + (i % 5), "tags": [format!("t{}", i % 4)] })
            })
            .collect();
        srv.create_tasks(&org.owner_key, Value::Array(items)).await;
    }
    let ids = srv.list_ids(&org.owner_key, "").await;
    assert_eq!(ids.len(), 1000);
    for id in ids.iter().take(300) {
        srv.claim(&org.owner_key, json!({})).await;
        let _ = id;
    }
    let cookie = sign_in(&srv, &org.owner_key).await;
    for path in [
        "/board".to_owned(),
        "/board/tasks".into(),
        format!("/board/tasks/{}", ids[0]),
        "/board/agents".into(),
        "/board/insights".into(),
        "/board/org".into(),
    ] {
        let page = get(&srv, &path, Some(&cookie)).await;
        eprintln!(
            "weight {path}: {} bytes (HTML with its inline CSS and script)",
            page.body.len()
        );
    }
    let browser = Browser::start(&driver).await;
    browser_sign_in(&browser, &srv, &org.owner_key).await;
    let mut samples = Vec::new();
    for _ in 0..5 {
        browser.goto(&format!("{}/board/tasks", srv.base_url)).await;
        let t = browser.script(r#"const n = performance.getEntriesByType("navigation")[0];
            const p = performance.getEntriesByName("first-contentful-paint")[0];
            return { response: n.responseEnd - n.startTime, dcl: n.domContentLoadedEventEnd - n.startTime,
                     load: n.loadEventEnd - n.startTime, fcp: p ? p.startTime : null,
                     bytes: n.transferSize, cards: document.querySelectorAll(".card").length };"#).await;
        eprintln!("first render of /board/tasks with 1,000 tasks: {t}");
        samples.push(t);
    }
    browser.quit().await;
}
