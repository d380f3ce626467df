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

mod chromium;
mod figures;

use crate::common::sse::{SseEvent, SseItem, SseStream};
use crate::common::*;
use reqwest::header::{CONTENT_SECURITY_POLICY, CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use reqwest::Method;

/// `POST /board/login` with `api_key`.
async fn login(srv: &TestServer, key: &str) -> reqwest::Response {
    page_client()
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
    let mut req = page_client().get(format!("{}{path}", srv.base_url));
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
    let mut req = page_client()
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
            let resp = page_client()
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

/// Two nodes on one PostgreSQL: a session opened on one works on the
/// other (a board request goes to the owner of its org), writes through
/// either apply once, and a sign-out through one ends the session on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn sessions_work_on_every_node() {
    use base64::Engine as _;
    let key: Vec<u8> = (0..32).map(|_| rand_byte()).collect();
    let key = base64::engine::general_purpose::STANDARD.encode(key);
    let first = TestServer::builder(Backend::Postgres)
        .nodes(2)
        .env("TASKQ_MASTER_KEY", &key)
        .start()
        .await;
    let second = TestServer::builder(Backend::Postgres)
        .joining(&first)
        .env("TASKQ_MASTER_KEY", &key)
        .start()
        .await;
    let org = first.create_org("dev").await;
    let id = first.new_task(&org.owner_key, "seen from both nodes").await;

    let cookie = sign_in(&first, &org.owner_key).await;
    for node in [&first, &second] {
        let page = get(node, &format!("/board/tasks/{id}"), Some(&cookie)).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(page.body.contains("seen from both nodes"));
    }
    let token = csrf_of(&get(&second, "/board/tasks", Some(&cookie)).await.body);
    let fields = [
        ("fields", "1"),
        ("priority", "2"),
        ("tags", ""),
        ("csrf", token.as_str()),
    ];
    let page = post_form(
        &second,
        &format!("/board/tasks/{id}/update"),
        Some(&cookie),
        &fields,
    )
    .await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    assert_eq!(first.get_task(&org.owner_key, &id).await["priority"], 2);

    let out = post_form(&second, "/board/logout", Some(&cookie), &[("csrf", &token)]).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    for node in [&first, &second] {
        assert_eq!(
            get(node, "/board/tasks", Some(&cookie)).await.status,
            StatusCode::SEE_OTHER
        );
    }
}

fn rand_byte() -> u8 {
    uuid::Uuid::new_v4().as_bytes()[0]
}

backend_tests!(
    schedules_are_managed_on_the_board_and_their_tasks_show,
    |srv| async move {
        let org = srv.create_org("pro").await;
        let key = &org.owner_key;
        let cookie = sign_in(&srv, key).await;
        let page = get(&srv, "/board/schedules", Some(&cookie)).await;
        assert_eq!(page.status, StatusCode::OK);
        assert_strict_csp(&page, "the schedules page");
        assert!(
            page.body.contains("id=\"schedules-empty\""),
            "{}",
            page.body
        );
        let token = csrf_of(&page.body);

        let form = [
            ("csrf", token.as_str()),
            ("name", "standup prep"),
            ("cron", "* * * * *"),
            ("timezone", "Europe/Berlin"),
            ("title", "Prepare the <standup>"),
            ("priority", "2"),
            ("tags", ""),
        ];
        let created = post_form(&srv, "/board/schedules", Some(&cookie), &form).await;
        assert_eq!(created.status, StatusCode::SEE_OTHER, "{}", created.body);
        let (_, list) = srv.get(key, "/schedules").await;
        let schedule = list["schedules"][0].clone();
        assert_eq!(schedule["name"], "standup prep", "{list}");
        assert_eq!(
            schedule["task"],
            json!({"title": "Prepare the <standup>", "priority": 2})
        );
        let id = str_field(&schedule, "schedule_id");
        let next = str_field(&schedule, "next_run_at");
        let page = get(&srv, "/board/schedules", Some(&cookie)).await;
        assert!(
            page.body.contains(&format!("data-schedule=\"{id}\"")),
            "{}",
            page.body
        );
        assert!(
            page.body.contains(&next),
            "the next run is shown: {}",
            page.body
        );
        assert!(
            page.body.contains("Prepare the &#60;standup&#62;"),
            "escaped: {}",
            page.body
        );

        // A bad pattern is the operation's refusal, on a page.
        let mut bad = form.to_vec();
        bad[1] = ("name", "bad");
        bad[2] = ("cron", "every day");
        let refused = post_form(&srv, "/board/schedules", Some(&cookie), &bad).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
        assert!(refused.body.contains("cron"), "{}", refused.body);

        // Its tick's task is on the board, with the schedule on its page.
        let now = advance_clock(&srv, 0).await;
        advance_clock(&srv, (ts(&schedule, "next_run_at") - now).num_seconds() + 1).await;
        let task = eventually(
            std::time::Duration::from_secs(5),
            "the tick's task",
            || async {
                let tasks = srv.list_all(key, "full=true").await;
                tasks.into_iter().find(|t| t["schedule_id"] == id.as_str())
            },
        )
        .await;
        let task_id = str_field(&task, "task_id");
        let board = get(&srv, "/board/tasks", Some(&cookie)).await;
        assert!(
            board.body.contains(&format!("data-task=\"{task_id}\"")),
            "{}",
            board.body
        );
        let page = get(&srv, &format!("/board/tasks/{task_id}"), Some(&cookie)).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(
            page.body.contains(&format!("/board/schedules#s-{id}")),
            "{}",
            page.body
        );
        assert!(page.body.contains(&next), "the tick's time: {}", page.body);
        let page = get(&srv, "/board/schedules", Some(&cookie)).await;
        assert!(page.body.contains(&next), "the last run: {}", page.body);

        // Paused, then deleted, from their forms.
        let path = format!("/board/schedules/{id}/update");
        let paused = post_form(
            &srv,
            &path,
            Some(&cookie),
            &[("csrf", &token), ("active", "false")],
        )
        .await;
        assert_eq!(paused.status, StatusCode::SEE_OTHER, "{}", paused.body);
        let (_, got) = srv.get(key, &format!("/schedules/{id}")).await;
        assert_eq!(got["active"], false);
        assert!(get(&srv, "/board/schedules", Some(&cookie))
            .await
            .body
            .contains("paused"));
        let refused = post_form(&srv, &path, None, &[("active", "true")]).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        let path = format!("/board/schedules/{id}/delete");
        let deleted = post_form(&srv, &path, Some(&cookie), &[("csrf", &token)]).await;
        assert_eq!(deleted.status, StatusCode::SEE_OTHER, "{}", deleted.body);
        let (status, _) = srv.get(key, &format!("/schedules/{id}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        // A waiting task is marked in the pending column; a retry policy is
        // on its page.
        let waiting = srv
            .create_task(
                key,
                json!({"title": "later", "delay_seconds": 600, "retry": {"max_retries": 2}}),
            )
            .await;
        let board = get(&srv, "/board/tasks", Some(&cookie)).await;
        assert!(board.body.contains("waits until"), "{}", board.body);
        let page = get(&srv, &format!("/board/tasks/{waiting}"), Some(&cookie)).await;
        assert!(
            page.body.contains("0 so far; up to 2 retries"),
            "{}",
            page.body
        );

        // A free plan's members see why there are no schedules.
        let free = srv.create_org("free").await;
        let cookie = sign_in(&srv, &free.owner_key).await;
        let page = get(&srv, "/board/schedules", Some(&cookie)).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(
            page.body.contains("id=\"schedules-unavailable\""),
            "{}",
            page.body
        );
    }
);

/// `GET /board/live` as an `EventSource` asks for it: the board's stream.
async fn board_stream(srv: &TestServer, cookie: &str, mark: Option<&str>) -> SseStream {
    let query = mark.map_or(String::new(), |m| format!("?mark={}", encode_query(m)));
    let resp = page_client()
        .get(format!("{}/board/live{query}", srv.base_url))
        .header(COOKIE, cookie)
        .header("accept", "text/event-stream")
        .timeout(std::time::Duration::from_secs(120))
        .send()
        .await
        .expect("GET /board/live");
    assert_eq!(resp.status(), StatusCode::OK);
    let kind = resp.headers()[CONTENT_TYPE].to_str().unwrap().to_owned();
    assert!(kind.starts_with("text/event-stream"), "{kind}");
    SseStream::of(resp)
}

fn changed_ids(event: &SseEvent) -> Vec<String> {
    assert_eq!(event.event.as_deref(), Some("changed"), "{event:?}");
    event.data["tasks"]
        .as_array()
        .expect("the changed tasks")
        .iter()
        .map(|id| id.as_str().expect("an id").to_owned())
        .collect()
}

backend_tests!(
    the_board_stream_names_changes_coalesced_and_is_quiet_without,
    |srv| async move {
        use std::collections::HashSet;
        use std::time::{Duration, Instant};
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let burst = ids(&srv
            .create_tasks(
                key,
                Value::Array(
                    (0..20)
                        .map(|i| json!({ "title": format!("t{i}") }))
                        .collect(),
                ),
            )
            .await);
        let watched = srv.new_task(key, "watched").await;
        let cookie = sign_in(&srv, key).await;
        let mut stream = board_stream(&srv, &cookie, None).await;

        // One change: a `changed` event naming it, with the open counts.
        srv.update_ok(
            key,
            json!({ "task_id": watched, "status": "paused", "assignee": org.owner_email }),
        )
        .await;
        let event = stream
            .next_event(Duration::from_secs(10))
            .await
            .expect("a changed event");
        assert_eq!(changed_ids(&event), std::slice::from_ref(&watched));
        assert_eq!(event.data["more"], false);
        assert_eq!(event.data["counts"]["pending"], 20, "{:?}", event.data);
        assert_eq!(event.data["counts"]["paused"], 1);
        let mark = str_field(&event.data, "mark");

        // A burst of twenty commits: few events, at most one each half
        // second, naming every task of the burst.
        let started = Instant::now();
        for id in &burst {
            srv.update_ok(key, json!({ "task_id": id, "priority": 1 }))
                .await;
        }
        let (mut seen, mut events) = (HashSet::new(), 0u128);
        while seen.len() < burst.len() {
            let event = stream
                .next_event(Duration::from_secs(10))
                .await
                .expect("changed events");
            events += 1;
            seen.extend(changed_ids(&event));
        }
        let elapsed = started.elapsed().as_millis();
        assert_eq!(seen, burst.iter().cloned().collect::<HashSet<_>>());
        assert!(
            events <= 1 + elapsed / 500 + 1 && events < burst.len() as u128,
            "{events} events in {elapsed} ms"
        );

        // Nothing changes: a keep-alive when the clock has moved past it,
        // and no event before it.
        advance_clock(&srv, 16).await;
        match stream.next(Duration::from_secs(10)).await {
            Some(SseItem::Comment(c)) => assert_eq!(c, "keep-alive"),
            other => panic!("expected only a keep-alive: {other:?}"),
        }

        // A page made at an older mark is told at once that it missed
        // changes; one made at the current mark is not.
        let mut late = board_stream(&srv, &cookie, Some(&mark)).await;
        let event = late
            .next_event(Duration::from_secs(10))
            .await
            .expect("the missed changes");
        assert_eq!(
            (changed_ids(&event).len(), &event.data["more"]),
            (0, &json!(true))
        );
        let current = str_field(&event.data, "mark");
        let mut current_stream = board_stream(&srv, &cookie, Some(&current)).await;
        advance_clock(&srv, 16).await;
        assert!(
            matches!(
                current_stream.next(Duration::from_secs(10)).await,
                Some(SseItem::Comment(_))
            ),
            "a page at the current mark missed nothing"
        );

        // Without the session: refused, as the mark is.
        let resp = page_client()
            .get(format!("{}/board/live", srv.base_url))
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    }
);

/// The page as the script fetches it again on the stream, naming the
/// last notice heard.
async fn page_for_notice(srv: &TestServer, cookie: &str, mark: &str) -> Page {
    let resp = page_client()
        .get(format!("{}/board/tasks", srv.base_url))
        .header(COOKIE, cookie)
        .header("x-board-mark", mark)
        .send()
        .await
        .expect("GET /board/tasks");
    Page {
        status: resp.status(),
        headers: resp.headers().clone(),
        body: resp.text().await.expect("body"),
    }
}

/// The next notice naming `task`: its mark.
async fn notice_naming(stream: &mut SseStream, task: &str) -> String {
    loop {
        let event = stream
            .next_event(std::time::Duration::from_secs(10))
            .await
            .expect("a changed event");
        if changed_ids(&event).iter().any(|id| id == task) {
            return str_field(&event.data, "mark");
        }
    }
}

backend_tests!(
    boards_fetching_for_one_notice_share_a_read_that_shows_it,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let a = srv.new_task(key, "A").await;
        let b = srv.new_task(key, "B").await;
        let (one, two) = (sign_in(&srv, key).await, sign_in(&srv, key).await);
        let mut stream = board_stream(&srv, &one, None).await;
        let shared = || async { srv.metric("taskq_board_pages_shared_total").await };
        let paused = |id: &str| format!("data-task=\"{id}\" data-status=\"paused\"");

        // Two boards fetch for the notice naming A's change: both show it,
        // and the second page is made from the first one's read.
        srv.update_ok(
            key,
            json!({ "task_id": a, "status": "paused", "assignee": org.owner_email }),
        )
        .await;
        let mark = notice_naming(&mut stream, &a).await;
        let before = shared().await.expect("the shared pages' counter");
        for cookie in [&one, &two] {
            let page = page_for_notice(&srv, cookie, &mark).await;
            assert_eq!(page.status, StatusCode::OK, "{}", page.body);
            assert_strict_csp(&page, "the tasks");
            assert!(page.body.contains(&paused(&a)), "{}", page.body);
        }
        assert_eq!(shared().await, Some(before + 1));

        // A later notice is not answered by the earlier read.
        srv.update_ok(
            key,
            json!({ "task_id": b, "status": "paused", "assignee": org.owner_email }),
        )
        .await;
        let later = notice_naming(&mut stream, &b).await;
        let page = page_for_notice(&srv, &two, &later).await;
        assert!(page.body.contains(&paused(&b)), "{}", page.body);
        assert_eq!(shared().await, Some(before + 1));

        // Nor is a mark no notice had yet, nor one that is not a mark.
        let (actor, version) = later.rsplit_once('.').expect("a mark");
        let ahead = format!("{actor}.{}", version.parse::<u64>().unwrap() + 1000);
        srv.update_ok(key, json!({ "task_id": a, "status": "pending" }))
            .await;
        let page = page_for_notice(&srv, &one, &ahead).await;
        assert!(!page.body.contains(&paused(&a)), "{}", page.body);
        let page = page_for_notice(&srv, &two, "garbage").await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(!page.body.contains(&paused(&a)), "{}", page.body);
        assert_eq!(shared().await, Some(before + 1));
    }
);

backend_tests!(
    changed_cards_come_alone_and_only_while_the_filters_keep_them,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let a = srv
            .create_task(key, json!({ "title": "<b>A</b>", "tags": ["ui"] }))
            .await;
        let b = srv.new_task(key, "B").await;
        let cookie = sign_in(&srv, key).await;
        let cards = |query: String| {
            let cookie = cookie.clone();
            let srv = &srv;
            async move { get(srv, &format!("/board/cards?{query}"), Some(&cookie)).await }
        };
        let page = cards(format!("ids={a},{b}")).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert_strict_csp(&page, "the cards");
        assert_eq!(
            page.body.matches("<li class=\"card\"").count(),
            2,
            "{}",
            page.body
        );
        assert!(page
            .body
            .contains(&format!("data-task=\"{a}\" data-status=\"pending\"")));
        assert!(
            page.body.contains("&#60;b&#62;A&#60;/b&#62;"),
            "{}",
            page.body
        );
        assert!(!page.body.contains("<html"), "a fragment: {}", page.body);

        // The page's filters: B has no tag ui, and in progress is not pending.
        let page = cards(format!("ids={a},{b}&tags=ui")).await;
        assert_eq!(page.body.matches("<li class=\"card\"").count(), 1);
        assert!(page.body.contains(&a));
        srv.claim(key, json!({})).await.expect("a claim");
        let page = cards(format!("ids={a},{b}&status=pending")).await;
        assert_eq!(
            page.body.matches("<li class=\"card\"").count(),
            1,
            "{}",
            page.body
        );
        assert!(page.body.contains("data-status=\"pending\""));

        // Another org's task is not there; nothing asked or too much: 400.
        let other = srv.create_org("dev").await;
        let theirs = srv.new_task(&other.owner_key, "theirs").await;
        let page = cards(format!("ids={theirs}")).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(!page.body.contains(&theirs));
        assert_eq!(cards("ids=".into()).await.status, StatusCode::BAD_REQUEST);
        let many: Vec<String> = (0..101).map(|_| new_uuid()).collect();
        assert_eq!(
            cards(format!("ids={}", many.join(","))).await.status,
            StatusCode::BAD_REQUEST
        );
        let anonymous = get(&srv, &format!("/board/cards?ids={a}"), None).await;
        assert_eq!(anonymous.status, StatusCode::SEE_OTHER);
    }
);
