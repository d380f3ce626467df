//! The board's figures as people read them, through the real server: the
//! columns' counts say whether they are totals, insights average over the
//! days the org has existed, charts pick their unit and say when they have
//! nothing to draw, attempts and retries say what they count, times read
//! as wall-clock times (a schedule's in its own zone) with the exact
//! instant kept, and the search box is offered only where search works.

use std::time::Duration;

use super::{get, sign_in};
use crate::common::*;
use crate::search::stub::Stub;
use reqwest::Method;

/// The text a reader sees of the element that starts at the first `open`
/// of `body`: its tags dropped, and whatever is `hidden` left out.
fn seen(body: &str, open: &str) -> String {
    let start = body
        .find(open)
        .unwrap_or_else(|| panic!("no {open} in {body}"));
    let mut text = String::new();
    // For each open element, whether it (or one around it) is hidden.
    let mut hidden: Vec<bool> = Vec::new();
    let mut rest = &body[start..];
    while let Some(lt) = rest.find('<') {
        if !hidden.last().copied().unwrap_or(false) {
            text.push_str(&rest[..lt]);
        }
        let gt = lt + rest[lt..].find('>').expect("a closed tag");
        let tag = &rest[lt + 1..gt];
        if tag.starts_with('/') {
            hidden.pop();
            if hidden.is_empty() {
                break;
            }
        } else {
            let within = hidden.last().copied().unwrap_or(false);
            let attrs: Vec<&str> = tag.split_whitespace().collect();
            hidden.push(within || attrs.contains(&"hidden"));
        }
        rest = &rest[gt + 1..];
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn column(body: &str, status: &str) -> String {
    seen(body, &format!("<h2 id=\"col-{status}\""))
}

/// Creates `n` tasks of `title`, 25 a call; their ids.
async fn tasks(srv: &TestServer, key: &str, title: &str, n: usize) -> Vec<String> {
    let mut made = Vec::with_capacity(n);
    while made.len() < n {
        let batch = (n - made.len()).min(25);
        let items: Vec<Value> = (0..batch).map(|_| json!({ "title": title })).collect();
        made.extend(ids(&srv.create_tasks(key, Value::Array(items)).await));
    }
    made
}

/// Claims as many tasks as `done` holds (25 a claim), which are those
/// when they are all the org's pending ones, and completes them.
async fn complete(srv: &TestServer, key: &str, done: &[String]) {
    for chunk in done.chunks(25) {
        let (status, claimed) = srv
            .post(key, "/tasks/claim", json!({ "count": chunk.len() }))
            .await;
        assert_eq!(status, StatusCode::OK, "{claimed}");
        let claimed: Vec<Value> = claimed["tasks"].as_array().cloned().unwrap_or_default();
        let items: Vec<Value> = ids(&claimed)
            .into_iter()
            .map(|id| json!({ "task_id": id, "status": "completed", "note": "done" }))
            .collect();
        let (status, body) = srv.update(key, Value::Array(items)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
}

backend_tests!(
    a_columns_count_says_whether_it_is_the_total,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        // 205 completed and 5 pending: the first page of 200 holds the 5
        // pending tasks (open work first) and 195 of the completed ones.
        let done = tasks(&srv, key, "Done", 205).await;
        complete(&srv, key, &done).await;
        tasks(&srv, key, "Waiting", 5).await;
        let cookie = sign_in(&srv, key).await;

        let first = get(&srv, "/board/tasks", Some(&cookie)).await;
        assert_eq!(first.status, StatusCode::OK, "{}", first.body);
        assert_eq!(column(&first.body, "pending"), "Pending 5");
        assert_eq!(
            column(&first.body, "completed"),
            "Completed 195 on this page",
            "the page's completed tasks are not all the org's"
        );
        assert_eq!(column(&first.body, "failed"), "Failed 0 on this page");

        // The next page: no pending task of the org's five, the rest of
        // the completed ones.
        let next = first
            .body
            .split("id=\"next-page\"")
            .next()
            .and_then(|before| before.rsplit("href=\"").next())
            .and_then(|href| href.split('"').next())
            .expect("a next page")
            .replace("&#38;", "&")
            .replace("&amp;", "&");
        let second = get(&srv, &next, Some(&cookie)).await;
        assert_eq!(second.status, StatusCode::OK, "{}", second.body);
        assert_eq!(column(&second.body, "pending"), "Pending 0 shown of 5");
        assert_eq!(
            column(&second.body, "completed"),
            "Completed 10 on this page"
        );

        // Filtered to the pending: the org's count is the column's, and
        // the statuses left out have none.
        let pending = get(&srv, "/board/tasks?status=pending", Some(&cookie)).await;
        assert_eq!(column(&pending.body, "pending"), "Pending 5");
        assert_eq!(column(&pending.body, "completed"), "Completed 0");

        // A tag narrows the list below what the org's counts count: a
        // whole list's columns are their own totals.
        srv.create_tags(key, json!([{ "name": "ops" }])).await;
        srv.create_task(key, json!({ "title": "Tagged", "tags": ["ops"] }))
            .await;
        let tagged = get(&srv, "/board/tasks?tags=ops", Some(&cookie)).await;
        assert_eq!(column(&tagged.body, "pending"), "Pending 1");
        assert_eq!(column(&tagged.body, "completed"), "Completed 0");
    }
);

/// Computes the org's insights now.
async fn recompute(srv: &TestServer, org: &Org) {
    let (status, body) = srv
        .admin(
            Method::POST,
            &format!("/admin/orgs/{}/recompute", org.org_id),
            Some(json!({ "reports": ["insights"] })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

backend_tests!(
    insights_average_over_the_days_the_org_has_existed_in_a_fitting_unit,
    |srv| async move {
        // An org with nothing done yet: its charts say so.
        let empty = srv.create_org("pro").await;
        recompute(&srv, &empty).await;
        let cookie = sign_in(&srv, &empty.owner_key).await;
        let page = get(&srv, "/board/insights", Some(&cookie)).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let insights = page.body.split("id=\"h-standup\"").next().unwrap();
        assert_eq!(insights.matches("No data yet").count(), 2, "{insights}");
        assert!(!insights.contains("<svg"), "an empty frame: {insights}");
        assert!(
            insights.contains("0 completed, 0 failed (0.0 a day)"),
            "{insights}"
        );

        // Three tasks done in 30 seconds each, on the org's first day;
        // a day later its insights are over its two days.
        let org = srv.create_org("pro").await;
        let key = &org.owner_key;
        let made = tasks(&srv, key, "Quick", 3).await;
        let (status, claimed) = srv.post(key, "/tasks/claim", json!({ "count": 3 })).await;
        assert_eq!(status, StatusCode::OK, "{claimed}");
        advance_clock(&srv, 30).await;
        let items: Vec<Value> = made
            .iter()
            .map(|id| json!({ "task_id": id, "status": "completed", "note": "done" }))
            .collect();
        let (status, body) = srv.update(key, Value::Array(items)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        recompute(&srv, &org).await;
        let cookie = sign_in(&srv, key).await;
        let page = get(&srv, "/board/insights", Some(&cookie)).await;
        assert!(
            page.body
                .contains("over the org's first day: 3 completed, 0 failed (3.0 a day)"),
            "{}",
            page.body
        );
        // The cycles drawn in seconds, not as 0.0 hours (30, and what the
        // requests took).
        assert!(
            page.body.contains("Cycle time (seconds): median"),
            "{}",
            page.body
        );
        let bars: Vec<&str> = page
            .body
            .split("class=\"value\">")
            .skip(1)
            .take(3)
            .map(|v| v.split('<').next().unwrap())
            .collect();
        assert!(
            bars.len() == 3 && bars.iter().all(|v| *v == "30" || *v == "31"),
            "{bars:?}"
        );
        assert!(page.body.contains("No task failed in the window"));

        advance_clock(&srv, 24 * 3600).await;
        recompute(&srv, &org).await;
        let cookie = sign_in(&srv, key).await;
        let page = get(&srv, "/board/insights", Some(&cookie)).await;
        assert!(
            page.body.contains(
                "over the 2 days since the org was created: 3 completed, 0 failed (1.5 a day)"
            ),
            "{}",
            page.body
        );
    }
);

/// The `<time>` of the instant `iso` on a page, as the server writes it.
fn time_of(body: &str, iso: &str) -> String {
    let open = format!("<time datetime=\"{iso}\" title=\"{iso}\"");
    let start = body
        .find(&open)
        .unwrap_or_else(|| panic!("no <time> of {iso} with its exact title in {body}"));
    let end = start + body[start..].find("</time>").unwrap() + "</time>".len();
    body[start..end].to_owned()
}

backend_tests!(
    times_read_as_wall_clock_times_and_a_schedules_in_its_zone,
    |srv| async move {
        let org = srv.create_org("pro").await;
        let key = &org.owner_key;
        let cookie = sign_in(&srv, key).await;
        let task = srv.new_task(key, "Timed").await;
        let created = str_field(&srv.get_task(key, &task).await, "created_at");
        let page = get(&srv, &format!("/board/tasks/{task}"), Some(&cookie)).await;
        let shown = time_of(&page.body, &created);
        let minute = format!("{} {} UTC", &created[..10], &created[11..16]);
        assert!(shown.ends_with(&format!(">{minute}</time>")), "{shown}");

        // At 03:00 in Berlin, shown at 03:00 there, whatever the offset.
        let (status, schedule) = srv
            .post(
                key,
                "/schedules",
                json!({ "name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Berlin",
                        "task": { "title": "Nightly" } }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{schedule}");
        let next = str_field(&schedule, "next_run_at");
        let page = get(&srv, "/board/schedules", Some(&cookie)).await;
        let shown = time_of(&page.body, &next);
        assert!(shown.contains("data-zone=\"Europe/Berlin\""), "{shown}");
        let day = &next[..10];
        assert!(
            shown.ends_with(&format!(">{day} 03:00 CET</time>"))
                || shown.ends_with(&format!(">{day} 03:00 CEST</time>")),
            "{shown}"
        );
    }
);

backend_tests!(attempts_and_retries_say_what_they_count, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let id = srv
        .create_task(
            key,
            json!({ "title": "Flaky", "max_attempts": 3, "retry": { "max_retries": 2 } }),
        )
        .await;
    let cookie = sign_in(&srv, key).await;
    let attempts = |body: &str| seen(body, "<span id=\"task-attempts\"");
    let retries = |body: &str| seen(body, "<dd id=\"task-retries\"");

    // A lease that runs out uses an attempt.
    srv.claim(key, json!({ "lease_seconds": 1 }))
        .await
        .expect("the task");
    eventually(Duration::from_secs(15), "the lease to run out", || async {
        let task = srv.get_task(key, &id).await;
        (task["status"] == "pending").then_some(())
    })
    .await;
    let page = get(&srv, &format!("/board/tasks/{id}"), Some(&cookie)).await;
    assert_eq!(
        attempts(&page.body),
        "Attempts 1 of 3 (leases that ran out since it was created or last retried; at 3 it fails)"
    );
    assert!(retries(&page.body).starts_with("0 so far; up to 2 retries"));

    // A failure its policy retries: one retry, the attempts start again.
    srv.claim(key, json!({})).await.expect("the task again");
    srv.update_ok(
        key,
        json!({ "task_id": id, "status": "failed", "note": "boom" }),
    )
    .await;
    let page = get(&srv, &format!("/board/tasks/{id}"), Some(&cookie)).await;
    assert!(
        attempts(&page.body).starts_with("Attempts 0 of 3 "),
        "{}",
        page.body
    );
    assert_eq!(
        retries(&page.body),
        "1 so far; up to 2 retries, 30 s doubling to at most 3600 s \
             (a retry is a failure its policy sent back to wait; it starts the attempts again)"
    );
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_search_box_is_offered_only_where_search_works() {
    // No embedder: no box, and a search asked anyway says why.
    let srv = TestServer::start(Backend::Sqlite).await;
    let org = srv.create_org("dev").await;
    let cookie = sign_in(&srv, &org.owner_key).await;
    let page = get(&srv, "/board/tasks", Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(!page.body.contains("id=\"f-q\""), "{}", page.body);
    let page = get(&srv, "/board/tasks?q=anything", Some(&cookie)).await;
    assert!(
        page.body.contains("id=\"search-unavailable\""),
        "{}",
        page.body
    );
    assert!(page.body.contains("not_configured"), "{}", page.body);
    drop(srv);

    // An embedder: the box for a managed org, none for a BYOK one.
    let stub = Stub::start().await;
    let srv = TestServer::builder(Backend::Sqlite)
        .env("TASKQ_EMBEDDINGS", &stub.url)
        .env("TASKQ_EMBEDDINGS_MODEL", "stub-model")
        .env("TASKQ_EMBEDDINGS_API_KEY", "stub-secret")
        .start()
        .await;
    let managed = srv.create_org("dev").await;
    let cookie = sign_in(&srv, &managed.owner_key).await;
    let page = get(&srv, "/board/tasks", Some(&cookie)).await;
    assert!(page.body.contains("id=\"f-q\""), "{}", page.body);
    let byok = srv
        .create_org_with(json!({ "tier": "dev", "encryption": "byok" }))
        .await;
    let cookie = sign_in(&srv, &byok.owner_key).await;
    let page = get(&srv, "/board/tasks", Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(!page.body.contains("id=\"f-q\""), "{}", page.body);
}
