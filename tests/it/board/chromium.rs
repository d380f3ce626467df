//! The board in headless Chromium: a graph of tasks kept live, hostile
//! content in every field, axe-core on every view, screenshots, and the
//! measurements of docs/perf.md (run by hand).

use std::time::{Duration, Instant};

use reqwest::Method;

use super::{get, sign_in};
use crate::common::browser::{axe_source, chromedriver, Browser};
use crate::common::*;

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

async fn assert_accessible(browser: &Browser, axe: &str, view: &str) {
    let violations = browser.axe_violations(axe).await;
    assert!(violations.is_empty(), "axe-core on {view}: {violations:#?}");
}

/// A graph of three tasks through the board; the first completed through
/// the API shows its dependent pending without a reload; every view passes
/// axe-core and is kept as a screenshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(taskq_test_env = "chromedriver", taskq_test_env = "axe")),
    ignore = "needs TASKQ_TEST_CHROMEDRIVER (Chromium's chromedriver) and TASKQ_TEST_AXE_JS (axe-core)"
)]
async fn the_board_in_a_browser() {
    let driver = chromedriver();
    let axe = axe_source();
    let srv = TestServer::start(Backend::Sqlite).await;
    let org = srv.create_org("pro").await;
    let other = srv.create_org("dev").await;
    srv.new_task(&other.owner_key, "another org's task").await;
    let browser = Browser::start(&driver).await;

    browser.goto(&format!("{}/board", srv.base_url)).await;
    assert_accessible(&browser, &axe, "the sign-in form").await;
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
    assert_accessible(&browser, &axe, "a task's page").await;
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
    assert_accessible(&browser, &axe, "the board").await;
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

    // A day of work for the reports (the server's clock moved by the test
    // hook): tagged tasks claimed, then completed or failed hours later.
    #[cfg(feature = "test-hooks")]
    {
        let tags = ["api", "api", "api", "ui", "ui", "docs"];
        let items: Vec<Value> = tags
            .iter()
            .map(|t| json!({ "title": format!("Work on {t}"), "tags": [t], "priority": 1 }))
            .collect();
        let worked = ids(&srv.create_tasks(&org.owner_key, Value::Array(items)).await);
        let (_, claimed) = srv
            .post(
                &org.owner_key,
                "/tasks/claim",
                json!({ "count": 6, "lease_seconds": 86_400 }),
            )
            .await;
        assert_eq!(
            claimed["tasks"].as_array().map(Vec::len),
            Some(6),
            "{claimed}"
        );
        for (i, id) in worked.iter().enumerate() {
            advance_clock(&srv, 3600 * (i as i64 + 1)).await;
            let status = if i == 1 || i == 3 {
                "failed"
            } else {
                "completed"
            };
            srv.update_ok(
                &org.owner_key,
                json!({ "task_id": id, "status": status, "note": "done" }),
            )
            .await;
        }
        advance_clock(&srv, 86_400).await;
        // Past its 12 hours the session has expired: sign in again.
        browser.goto(&format!("{}/board/tasks", srv.base_url)).await;
        browser
            .wait_for(
                "the sign-in form after the session expired",
                r#"document.getElementById("api_key") !== null"#,
            )
            .await;
        browser_sign_in(&browser, &srv, &org.owner_key).await;
    }

    // The org's vocabulary, a member and a team.
    srv.create_tags(
        &org.owner_key,
        json!([
            { "name": "api", "description": "The HTTP API" },
            { "name": "ui", "strict": true, "description": "Only the front-end team claims these" },
            { "name": "docs", "default": true, "description": "Written for people" },
        ]),
    )
    .await;
    srv.add_member(&org, &format!("{}@example.com", unique("dana")), "admin")
        .await;
    srv.create_team(
        &org.owner_key,
        json!({ "name": "front-end", "tags": ["ui"], "description": "Pages and charts" }),
    )
    .await;

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
        assert_accessible(&browser, &axe, path).await;
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
    assert_accessible(&browser, &axe, "the 404 page").await;

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
#[cfg_attr(
    not(all(taskq_test_env = "chromedriver", taskq_test_env = "axe")),
    ignore = "needs TASKQ_TEST_CHROMEDRIVER (Chromium's chromedriver) and TASKQ_TEST_AXE_JS (axe-core)"
)]
async fn hostile_content_runs_nothing() {
    let driver = chromedriver();
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
        assert_accessible(&browser, &axe, &path).await;
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
/// hand: `cargo test --features test-hooks --test it board::chromium::measure_the_board -- --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn measure_the_board() {
    let driver = chromedriver();
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
    let form = get(&srv, "/board", None).await;
    eprintln!(
        "weight /board (the sign-in form): {} bytes",
        form.body.len()
    );
    let cookie = sign_in(&srv, &org.owner_key).await;
    for path in [
        "/board/tasks".to_owned(),
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
            const p = performance.getEntriesByType("paint").find(e => e.name === "first-contentful-paint");
            return { response: n.responseEnd - n.startTime, dcl: n.domContentLoadedEventEnd - n.startTime,
                     load: n.loadEventEnd - n.startTime, fcp: p ? p.startTime : null,
                     bytes: n.transferSize, cards: document.querySelectorAll(".card").length };"#).await;
        eprintln!("first render of /board/tasks with 1,000 tasks: {t}");
        samples.push(t);
    }
    browser.quit().await;
}

/// A board open on the stream: a task completed through the API moves to
/// its column without a reload, by fetching its card alone, and the page
/// never polls the mark; the columns' totals follow the org's counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "chromedriver"),
    ignore = "needs TASKQ_TEST_CHROMEDRIVER (Chromium's chromedriver)"
)]
async fn a_card_moves_on_the_stream_without_polling() {
    let driver = chromedriver();
    let srv = TestServer::start(Backend::Sqlite).await;
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let done = srv.new_task(key, "Finish me").await;
    srv.new_task(key, "Stay pending").await;
    let claimed = srv.claim(key, json!({})).await.expect("a claim");
    assert_eq!(claimed["task_id"], done.as_str());
    let browser = Browser::start(&driver).await;
    browser_sign_in(&browser, &srv, key).await;
    browser
        .wait_for(
            "the stream open",
            r#"document.body.dataset.live === "stream""#,
        )
        .await;
    browser
        .script("window.__same_page = true; return true;")
        .await;
    let column_of = format!(
        r#"const c = document.querySelector('.card[data-task="{done}"]');
        return c && c.closest(".col").dataset.status;"#
    );
    assert_eq!(browser.script(&column_of).await, "in_progress");

    srv.update_ok(
        key,
        json!({ "task_id": done, "status": "completed", "note": "done" }),
    )
    .await;
    browser
        .wait_for(
            "the card in the completed column",
            &format!(
                r#"document.querySelector('.col[data-status="completed"] .card[data-task="{done}"]') !== null"#
            ),
        )
        .await;
    let seen = browser
        .script(
            r#"const counts = {};
        for (const col of document.querySelectorAll(".col"))
            counts[col.dataset.status] = col.querySelector(".count").textContent;
        const total = s => { const t = document.querySelector(`[data-count="${s}"]`); return t && t.textContent; };
        const fetched = performance.getEntriesByType("resource")
            .filter(e => e.initiatorType === "fetch").map(e => new URL(e.name).pathname);
        return { same: window.__same_page === true, counts, fetched,
                 in_progress: total("in_progress"), pending: total("pending"),
                 cards: document.body.dataset.cardFetches || "0",
                 refreshes: document.body.dataset.refreshes || "0",
                 copies: document.querySelectorAll('.card[data-task="DONE"]').length };"#
                .replace("DONE", &done)
                .as_str(),
        )
        .await;
    assert_eq!(seen["same"], true, "the page reloaded: {seen}");
    assert_eq!(seen["fetched"], json!(["/board/cards"]), "{seen}");
    assert_eq!(
        (&seen["cards"], &seen["refreshes"]),
        (&json!("1"), &json!("0"))
    );
    assert_eq!(seen["copies"], 1, "{seen}");
    assert_eq!(seen["counts"]["in_progress"], "0", "{seen}");
    assert_eq!(seen["counts"]["completed"], "1", "{seen}");
    assert_eq!(
        (&seen["in_progress"], &seen["pending"]),
        (&json!("0"), &json!("1"))
    );

    // A task this page does not show: the page fetches itself, once.
    srv.new_task(key, "Added by an agent").await;
    browser
        .wait_for(
            "the new task on the page",
            r#"document.body.textContent.includes("Added by an agent")"#,
        )
        .await;
    let fetched = browser
        .script(
            r#"return performance.getEntriesByType("resource")
            .filter(e => e.initiatorType === "fetch" && new URL(e.name).pathname === "/board/live").length;"#,
        )
        .await;
    assert_eq!(fetched, 0, "the page polled the mark");
    assert_eq!(
        browser.script("return window.__same_page === true;").await,
        true
    );
    browser.quit().await;
}
