//! Reports and the planner through the real server: insights, failure
//! clusters, runbooks (and the runbook in claim context), standups, the
//! operator's recompute, the schedule, and `POST /tasks/plan` against an
//! OpenAI-compatible chat stub started here.
//!
//! Histories are seeded with known answers and time is moved with the
//! test clock, so each test checks the numbers, not just the keys.

mod chat_stub;

use crate::search::stub as search_stub;

use std::time::{Duration, Instant};

use crate::common::*;
use chat_stub::ChatStub;
use chrono::{TimeZone, Utc};

const HOUR: i64 = 3600;
const DAY: i64 = 24 * HOUR;

/// The server's clock, moved forward by the test hook, which answers the
/// server's new time; a test reaches a known time of day through it.
struct Clock {
    now: chrono::DateTime<Utc>,
}

impl Clock {
    fn new() -> Self {
        Clock { now: Utc::now() }
    }

    async fn advance(&mut self, srv: &TestServer, seconds: i64) {
        self.now = advance_clock(srv, seconds).await;
    }

    /// Moves to 01:00 UTC of the next day.
    async fn next_morning(&mut self, srv: &TestServer) {
        self.advance(srv, 0).await;
        let day = self.now.date_naive() + chrono::Days::new(1);
        let target = Utc.from_utc_datetime(&day.and_hms_opt(1, 0, 0).unwrap());
        self.advance(srv, (target - self.now).num_seconds() + 1)
            .await;
    }

    fn day(&self) -> String {
        self.now.format("%Y-%m-%d").to_string()
    }
}

async fn recompute(srv: &TestServer, org: &Org, reports: &[&str]) -> Value {
    let (status, body) = srv
        .admin(
            reqwest::Method::POST,
            &format!("/admin/orgs/{}/recompute", org.org_id),
            Some(json!({ "reports": reports })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "recompute: {body}");
    body
}

async fn get_ok(srv: &TestServer, key: &str, path: &str) -> Value {
    let (status, body) = srv.get(key, path).await;
    assert_eq!(status, StatusCode::OK, "GET {path}: {body}");
    body
}

/// Creates a task and has `worker` claim it (it is the only one pending).
async fn claimed(
    srv: &TestServer,
    owner: &str,
    worker: &str,
    title: &str,
    tags: &[&str],
) -> String {
    let id = srv
        .create_task(owner, json!({ "title": title, "tags": tags }))
        .await;
    let task = srv
        .claim(worker, json!({ "lease_seconds": 259_200 }))
        .await
        .expect("the task just created");
    assert_eq!(task["task_id"], id.as_str());
    id
}

async fn finish(srv: &TestServer, key: &str, id: &str, status: &str, output: Value) {
    srv.update_ok(
        key,
        json!({ "task_id": id, "status": status, "note": "done", "output": output }),
    )
    .await;
}

async fn tags(srv: &TestServer, key: &str, names: &[&str]) {
    let items: Vec<Value> = names.iter().map(|n| json!({ "name": n })).collect();
    srv.create_tags(key, json!(items)).await;
}

fn signal_ids(v: &Value) -> Vec<String> {
    v["task_ids"]
        .as_array()
        .unwrap_or_else(|| panic!("task_ids: {v}"))
        .iter()
        .map(|x| x.as_str().unwrap().to_owned())
        .collect()
}

backend_tests!(
    insights_count_stuck_churning_failures_and_agents,
    |backend: Backend| async move {
        let mut srv = TestServer::start(backend).await;
        let mut clock = Clock::new();
        let free = srv.create_org("free").await;
        let (status, body) = srv.get(&free.owner_key, "/insights").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["upgrade"], true, "{body}");

        let org = srv.create_org("pro").await;
        let owner = &org.owner_key;
        tags(&srv, owner, &["build", "deploy"]).await;
        let (_, worker) = srv.new_key(owner, "worker-1").await;
        let answer = get_ok(&srv, owner, "/insights").await;
        assert_eq!(
            answer,
            json!({ "available": false, "reason": "not_computed_yet" })
        );

        // Three builds claimed now and completed 1, 2 and 3 hours later.
        let a = claimed(&srv, owner, &worker, "Build A", &["build"]).await;
        let b = claimed(&srv, owner, &worker, "Build B", &["build"]).await;
        let c = claimed(&srv, owner, &worker, "Build C", &["build"]).await;
        let stuck = claimed(&srv, owner, &worker, "Stuck S", &[]).await;
        for id in [&a, &b, &c] {
            clock.advance(&srv, HOUR).await;
            finish(&srv, owner, id, "completed", json!({})).await;
        }
        // A deploy fails, one completes at once; a build fails.
        let d = claimed(&srv, owner, &worker, "Deploy D", &["deploy"]).await;
        finish(&srv, owner, &d, "failed", json!({})).await;
        let e = claimed(&srv, owner, &worker, "Deploy E", &["deploy"]).await;
        finish(&srv, owner, &e, "completed", json!({})).await;
        let f = claimed(&srv, owner, &worker, "Build F", &["build"]).await;
        finish(&srv, owner, &f, "failed", json!({})).await;
        // One task goes back to pending twice.
        let churn = claimed(&srv, owner, &worker, "Churn K", &[]).await;
        srv.update_ok(owner, json!({ "task_id": churn, "status": "pending" }))
            .await;
        srv.claim(&worker, json!({}))
            .await
            .expect("the churning task");
        srv.update_ok(owner, json!({ "task_id": churn, "status": "pending" }))
            .await;
        // Four hours on, the task claimed at the start is stuck (cycle
        // times 0, 1, 2, 3 hours: median 1 hour, stuck past 3); one claimed
        // now is not.
        clock.advance(&srv, 4 * HOUR).await;
        srv.update_ok(
            owner,
            json!({ "task_id": churn, "status": "paused", "assignee": "worker-1" }),
        )
        .await;
        let fresh = claimed(&srv, owner, &worker, "Fresh N", &[]).await;

        let done = recompute(&srv, &org, &["insights"]).await;
        assert_eq!(done, json!({ "computed": ["insights"] }));
        let ins = get_ok(&srv, owner, "/insights").await;
        assert_eq!(ins["available"], true, "{ins}");
        // The org was created hours ago: its first day is the window.
        assert_eq!(ins["window_days"], 1, "{ins}");
        assert_eq!(signal_ids(&ins["stuck"]), vec![stuck.clone()], "{ins}");
        assert_eq!(ins["stuck"]["count"], 1);
        assert_eq!(signal_ids(&ins["churning"]), vec![churn.clone()], "{ins}");
        assert_eq!(ins["churning"]["count"], 1);
        assert_eq!(
            ins["throughput"],
            json!({ "completed": 4, "failed": 2, "retried": 0, "per_day": 4.0 })
        );
        assert_eq!(
            ins["cycle_times"],
            json!({ "count": 4, "p50_hours": 1.0, "p90_hours": 3.0, "mean_hours": 1.5 })
        );
        assert_eq!(
            ins["failure_rates"],
            json!([
                { "tag": "deploy", "failed": 1, "total": 2, "rate": 0.5 },
                { "tag": "build", "failed": 1, "total": 4, "rate": 0.25 },
            ])
        );
        // Every claim was the worker's: ten of them, with the churning
        // task's two; the owner's updates finished the work it took.
        assert_eq!(
            ins["agents"],
            json!([{ "agent_id": "worker-1", "claimed": 10, "completed": 4,
                     "failed": 2, "median_cycle_hours": 1.0 }])
        );
        assert!(!signal_ids(&ins["stuck"]).contains(&fresh));
        // Failure clusters come weekly: absent until computed.
        assert!(ins.get("failure_clusters").is_none(), "{ins}");
        recompute(&srv, &org, &["failure_clusters"]).await;
        let ins = get_ok(&srv, owner, "/insights").await;
        assert_eq!(
            ins["failure_clusters"],
            json!([]),
            "two unlike failures: {ins}"
        );

        // Stored: a restart serves the same report.
        srv.restart().await;
        let again = get_ok(&srv, owner, "/insights").await;
        assert_eq!(again, ins);

        // A dev org has insights but never failure clusters.
        let dev = srv.create_org("dev").await;
        srv.new_task(&dev.owner_key, "something").await;
        let done = recompute(&srv, &dev, &["insights", "failure_clusters", "runbooks"]).await;
        assert_eq!(done, json!({ "computed": ["insights"] }));
        let ins = get_ok(&srv, &dev.owner_key, "/insights").await;
        assert_eq!(ins["available"], true);
        assert!(ins.get("failure_clusters").is_none(), "{ins}");
    }
);

/// Failed tasks about two things, and one about something else.
const FAILURES: [(&str, &str); 6] = [
    ("Database connection timeout in billing", "db"),
    ("Database connection timeout in search", "db"),
    ("Database connection timeout in reports", "db"),
    ("npm install fails with 404 for left-pad", "ci"),
    ("npm install fails with 404 for lodash", "ci"),
    ("Translate onboarding emails to Spanish", "docs"),
];

async fn seed_failures(srv: &TestServer, org: &Org) {
    let owner = &org.owner_key;
    tags(srv, owner, &["db", "ci", "docs"]).await;
    for (title, tag) in FAILURES {
        let id = srv
            .create_task(owner, json!({ "title": title, "tags": [tag] }))
            .await;
        srv.update_ok(
            owner,
            json!({ "task_id": id, "status": "failed", "note": "broke",
                    "assignee": org.owner_key_name }),
        )
        .await;
    }
}

fn clusters(ins: &Value) -> Vec<(String, u64, f64)> {
    ins["failure_clusters"]
        .as_array()
        .unwrap_or_else(|| panic!("failure_clusters: {ins}"))
        .iter()
        .map(|c| {
            (
                str_field(c, "label"),
                c["count"].as_u64().unwrap(),
                c["share_pct"].as_f64().unwrap(),
            )
        })
        .collect()
}

backend_tests!(
    failure_clusters_group_failures_by_their_words,
    |backend: Backend| async move {
        let srv = TestServer::start(backend).await;
        let org = srv.create_org("pro").await;
        seed_failures(&srv, &org).await;
        recompute(&srv, &org, &["insights", "failure_clusters"]).await;
        let ins = get_ok(&srv, &org.owner_key, "/insights").await;
        let got = clusters(&ins);
        assert_eq!(got.len(), 2, "{ins}");
        assert_eq!((got[0].1, got[0].2), (3, 50.0), "{ins}");
        assert_eq!((got[1].1, got[1].2), (2, 33.3), "{ins}");
        // Without a language model, the label is the words they share.
        assert_eq!(got[0].0, "database connection timeout [db]", "{ins}");
        assert!(got[1].0.starts_with("npm install fails 404"), "{ins}");
    }
);

backend_tests!(
    failure_clusters_by_meaning_are_labelled_by_the_model_or_the_template,
    |backend: Backend| async move {
        let embed = search_stub::Stub::start().await;
        let chat = ChatStub::start().await;
        chat.answer_by(|prompt| {
            if prompt.contains("Database") {
                "Database timeouts".to_owned()
            } else {
                "\"npm registry 404s\"".to_owned()
            }
        });
        let srv = TestServer::builder(backend)
            .env("TASKQ_EMBEDDINGS", &embed.url)
            .env("TASKQ_LLM_URL", &chat.url)
            .env("TASKQ_LLM_MODEL", "stub-chat")
            .env("TASKQ_LLM_API_KEY", "chat-secret")
            .env("TASKQ_LLM_TIMEOUT_SECS", "2")
            .start()
            .await;
        let org = srv.create_org("enterprise").await;
        seed_failures(&srv, &org).await;
        recompute(&srv, &org, &["insights", "failure_clusters"]).await;
        let ins = get_ok(&srv, &org.owner_key, "/insights").await;
        let got = clusters(&ins);
        assert_eq!(
            got,
            vec![
                ("Database timeouts".to_owned(), 3, 50.0),
                ("npm registry 404s".to_owned(), 2, 33.3)
            ],
            "{ins}"
        );
        assert!(embed.texts() >= FAILURES.len(), "grouped by their vectors");
        assert_eq!(chat.authorization().as_deref(), Some("Bearer chat-secret"));
        assert_eq!(chat.requests()[0]["model"], "stub-chat");

        // A model that is down, or too slow, delays nothing and breaks
        // nothing: the labels come from the template.
        chat.down(true);
        recompute(&srv, &org, &["failure_clusters"]).await;
        let ins = get_ok(&srv, &org.owner_key, "/insights").await;
        assert_eq!(clusters(&ins)[0].0, "database connection timeout [db]");
        chat.down(false);
        chat.delay(Duration::from_secs(5));
        let started = Instant::now();
        recompute(&srv, &org, &["failure_clusters"]).await;
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "each call times out"
        );
        let ins = get_ok(&srv, &org.owner_key, "/insights").await;
        assert_eq!(clusters(&ins)[1].1, 2, "{ins}");
    }
);

backend_tests!(
    runbooks_are_distilled_from_completed_work_and_reach_claims,
    |backend: Backend| async move {
        let srv = TestServer::start(backend).await;
        let dev = srv.create_org("dev").await;
        let (status, body) = srv.get(&dev.owner_key, "/runbooks").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["upgrade"], true);
        let byok = srv
            .create_org_with(json!({ "tier": "pro", "encryption": "byok" }))
            .await;
        assert_eq!(
            get_ok(&srv, &byok.owner_key, "/runbooks").await,
            json!({ "available": false, "reason": "byok" })
        );

        let org = srv.create_org("pro").await;
        let owner = &org.owner_key;
        assert_eq!(
            get_ok(&srv, owner, "/runbooks").await,
            json!({ "runbooks": [] })
        );
        let mut rotated = Vec::new();
        for host in ["web-1", "web-2", "web-3"] {
            let id = srv
                .new_task(owner, &format!("Rotate TLS certificate on {host}"))
                .await;
            srv.claim(owner, json!({})).await.expect("the rotation");
            finish(
                &srv,
                owner,
                &id,
                "completed",
                json!({ "summary": format!("renewed {host} with certbot") }),
            )
            .await;
            rotated.push(id);
        }
        for title in ["Write release notes", "Plan the offsite"] {
            let id = srv.new_task(owner, title).await;
            srv.claim(owner, json!({})).await.expect("a task");
            finish(&srv, owner, &id, "completed", json!({})).await;
        }
        assert_eq!(
            recompute(&srv, &org, &["runbooks"]).await,
            json!({ "computed": ["runbooks"] })
        );
        let answer = get_ok(&srv, owner, "/runbooks").await;
        let books = answer["runbooks"].as_array().expect("runbooks");
        assert_eq!(books.len(), 1, "one cluster of three: {answer}");
        let book = &books[0];
        assert_eq!(book["topic"], "Rotate tls certificate web", "{book}");
        assert_eq!(book["member_count"], 3);
        rotated.reverse();
        assert_eq!(book["source_task_ids"], json!(rotated), "newest first");
        let body = str_field(book, "body");
        assert!(body.contains("Distilled from 3 completed tasks"), "{body}");
        assert!(body.contains("renewed web-3 with certbot"), "{body}");
        assert!(is_canonical_uuid(&str_field(book, "runbook_id")));

        // A new rotation is claimed with the runbook in its context.
        srv.new_task(owner, "Rotate TLS certificate on web-9").await;
        let claim = srv
            .claim(owner, json!({ "include_context": true }))
            .await
            .expect("the new rotation");
        let runbook = &claim["context"]["runbook"];
        assert_eq!(runbook["topic"], book["topic"], "{claim}");
        assert_eq!(runbook["body"], book["body"]);
        assert!(runbook["score"].as_f64().unwrap() > 0.2, "{runbook}");
        // Unrelated work gets none.
        srv.new_task(owner, "Order new office chairs").await;
        let claim = srv
            .claim(owner, json!({ "include_context": true }))
            .await
            .expect("the chairs");
        assert!(claim["context"].get("runbook").is_none(), "{claim}");
    }
);

fn headline_numbers(report: &Value) -> Value {
    let h = &report["headline"];
    json!({
        "completed": h["completed"], "failed": h["failed"], "open": h["open"],
        "stuck_count": h["stuck_count"], "top_failure_tag": h["top_failure_tag"],
        "delta": h["delta"],
    })
}

backend_tests!(
    standups_cover_periods_with_deltas_history_and_team_scopes,
    |backend: Backend| async move {
        let srv = TestServer::start(backend).await;
        let mut clock = Clock::new();
        let free = srv.create_org("free").await;
        let (status, _) = srv.get(&free.owner_key, "/standup").await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let byok = srv
            .create_org_with(json!({ "tier": "dev", "encryption": "byok" }))
            .await;
        assert_eq!(
            get_ok(&srv, &byok.owner_key, "/standup").await,
            json!({ "available": false, "reason": "byok" })
        );

        let org = srv.create_org("dev").await;
        let owner = &org.owner_key;
        tags(&srv, owner, &["ops", "ci"]).await;
        srv.create_team(owner, json!({ "name": "ops", "tags": ["ops"] }))
            .await;
        let member = srv.add_member(&org, "member@example.com", "user").await;
        let outsider = srv.add_member(&org, "outsider@example.com", "user").await;
        srv.add_to_team(owner, "ops", "member@example.com").await;
        assert_eq!(
            get_ok(&srv, owner, "/standup").await,
            json!({ "available": false, "reason": "not_computed_yet" })
        );

        // Day one: two completed (one of the team's), one failed, one open.
        clock.next_morning(&srv).await;
        let day_one = clock.day();
        let t1 = srv
            .create_task(
                owner,
                json!({ "title": "Restart the ops queue", "tags": ["ops"] }),
            )
            .await;
        let t2 = srv.new_task(owner, "Update the changelog").await;
        let t3 = srv
            .create_task(
                owner,
                json!({ "title": "Fix the flaky CI job", "tags": ["ci"] }),
            )
            .await;
        srv.create_task(
            owner,
            json!({ "title": "Tune the ops alerts", "tags": ["ops"] }),
        )
        .await;
        for (id, status) in [(&t1, "completed"), (&t2, "completed"), (&t3, "failed")] {
            srv.update_ok(
                owner,
                json!({ "task_id": id, "status": status, "note": "n",
                        "assignee": org.owner_key_name }),
            )
            .await;
        }
        clock.next_morning(&srv).await;
        let day_two = clock.day();
        assert_eq!(
            recompute(&srv, &org, &["standup"]).await,
            json!({ "computed": ["standup"] })
        );
        let report = get_ok(&srv, owner, "/standup?cadence=daily").await;
        assert_eq!(report["available"], true);
        assert_eq!(report["period"], day_one.as_str(), "{report}");
        assert_eq!(report["scope"], "org");
        assert_eq!(report["cadence"], "daily");
        assert_eq!(
            headline_numbers(&report),
            json!({ "completed": 2, "failed": 1, "open": 1, "stuck_count": 0,
                    "top_failure_tag": "ci",
                    "delta": { "completed": null, "failed": null, "open": null, "stuck_count": null } })
        );
        assert_eq!(report["history"], json!([]));
        let body = str_field(&report, "body");
        assert!(body.contains("2 completed"), "{body}");
        assert!(body.contains("Fix the flaky CI job"), "{body}");

        // Day two: one of the team's completed.
        let t5 = srv
            .create_task(
                owner,
                json!({ "title": "Rotate the ops keys", "tags": ["ops"] }),
            )
            .await;
        srv.update_ok(
            owner,
            json!({ "task_id": t5, "status": "completed", "note": "n",
                    "assignee": "member@example.com" }),
        )
        .await;
        clock.next_morning(&srv).await;
        recompute(&srv, &org, &["standup"]).await;
        // The most recent report of any cadence: the day's.
        let report = get_ok(&srv, owner, "/standup").await;
        assert_eq!(report["period"], day_two.as_str(), "{report}");
        assert_eq!(
            headline_numbers(&report),
            json!({ "completed": 1, "failed": 0, "open": 1, "stuck_count": 0,
                    "top_failure_tag": null,
                    "delta": { "completed": -1, "failed": -1, "open": 0, "stuck_count": 0 } })
        );
        let history = report["history"].as_array().expect("history");
        assert!(
            history.iter().any(|h| h["period"] == day_one.as_str()),
            "{report}"
        );
        let daily = get_ok(&srv, owner, "/standup?cadence=daily").await;
        assert_eq!(daily["history"].as_array().unwrap().len(), 1, "{daily}");
        assert_eq!(daily["history"][0]["period"], day_one.as_str());

        // An earlier period, by name.
        let first = get_ok(&srv, owner, &format!("/standup?period={day_one}")).await;
        assert_eq!(first["headline"]["completed"], 2, "{first}");
        let weekly = get_ok(&srv, owner, "/standup?cadence=weekly").await;
        let week = str_field(&weekly, "period");
        assert!(
            week.len() == 8 && &week[4..6] == "-W",
            "an ISO week: {week}"
        );
        for bad in [
            "period=yesterday",
            "period=2026-02-30",
            "cadence=daily&period=2026-11",
            "scope=everyone",
        ] {
            let (status, body) = srv.get(owner, &format!("/standup?{bad}")).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        }
        let (status, _) = srv.get(owner, "/standup?period=1999-01-01").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            get_ok(&srv, owner, "/standup?period=1999-01-01").await["reason"],
            "not_computed_yet"
        );

        // The team's report: its tagged tasks, for members and admins.
        let team = get_ok(&srv, &member, "/standup?scope=team:ops&cadence=daily").await;
        assert_eq!(team["scope"], "team:ops");
        assert_eq!(team["headline"]["completed"], 1, "{team}");
        assert_eq!(team["headline"]["open"], 1, "{team}");
        get_ok(&srv, owner, "/standup?scope=team:ops").await;
        let (status, body) = srv.get(&outsider, "/standup?scope=team:ops").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        let (status, _) = srv.get(owner, "/standup?scope=team:nobody").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
);

const PLAN: &str = r#"{"tasks": [
  {"ref": "schema", "title": "Design the schema", "description": "tables", "blocked_by": [], "suggested_tags": ["db", "unknown"], "priority": 3},
  {"ref": "api", "title": "Build the API", "description": "routes", "blocked_by": ["ref:schema"], "suggested_tags": [], "priority": 2},
  {"ref": "docs", "title": "Document it", "description": "", "blocked_by": ["ref:api"], "suggested_tags": [], "priority": 1}
]}"#;

async fn plan(srv: &TestServer, key: &str, body: Value) -> (StatusCode, Value) {
    srv.post(key, "/tasks/plan", body).await
}

backend_tests!(
    the_planner_is_gated_and_needs_a_model,
    |backend: Backend| async move {
        let srv = TestServer::start(backend).await;
        let dev = srv.create_org("dev").await;
        let (status, body) = plan(&srv, &dev.owner_key, json!({ "goal": "g" })).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["upgrade"], true);
        let pro = srv.create_org("pro").await;
        let (status, body) = plan(&srv, &pro.owner_key, json!({ "goal": "g" })).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body, json!({ "available": false, "reason": "not_enabled" }));
        for bad in [
            json!({}),
            json!({ "goal": "g", "create": "yes" }),
            json!({ "goal": "g", "max_tasks": 0 }),
        ] {
            let (status, body) = plan(&srv, &pro.owner_key, bad.clone()).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        }
    }
);

async fn planner(backend: Backend) -> (TestServer, ChatStub) {
    let chat = ChatStub::start().await;
    let srv = TestServer::builder(backend)
        .env("TASKQ_LLM_URL", &chat.url)
        .env("TASKQ_LLM_TIMEOUT_SECS", "1")
        .start()
        .await;
    (srv, chat)
}

backend_tests!(
    plans_are_parsed_grounded_and_charged,
    |backend: Backend| async move {
        let (srv, chat) = planner(backend).await;
        let byok = srv
            .create_org_with(json!({ "tier": "pro", "encryption": "byok" }))
            .await;
        let (_, body) = plan(&srv, &byok.owner_key, json!({ "goal": "g" })).await;
        assert_eq!(body, json!({ "available": false, "reason": "byok" }));
        assert_eq!(chat.calls(), 0, "a byok org's goal never reaches the model");

        let org = srv.create_org("pro").await;
        let owner = &org.owner_key;
        srv.set_limits(&org, json!({ "plans_per_month": 8 })).await;
        tags(&srv, owner, &["db", "deploy"]).await;
        // History: a deploy that failed, a task completed in two hours.
        let failed = srv
            .create_task(owner, json!({ "title": "Ship it", "tags": ["deploy"] }))
            .await;
        srv.update_ok(
            owner,
            json!({ "task_id": failed, "status": "failed", "note": "n",
                    "assignee": org.owner_key_name }),
        )
        .await;

        chat.answer(PLAN);
        let goal = "g".repeat(2_500);
        let (status, body) = plan(
            &srv,
            owner,
            json!({ "goal": goal, "context": "Postgres shop" }),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["plan_calls_remaining"], 7);
        assert_eq!(body["created"], Value::Null);
        let p = &body["plan"];
        assert_eq!(str_field(p, "goal").len(), 2_000, "the goal is clipped");
        assert_eq!(p["tasks"].as_array().unwrap().len(), 3);
        assert_eq!(p["tasks"][0]["ref"], "schema");
        assert_eq!(
            p["tasks"][0]["suggested_tags"],
            json!(["db"]),
            "only the vocabulary's tags"
        );
        assert_eq!(p["tasks"][1]["blocked_by"], json!(["ref:schema"]));
        assert_eq!(p["grounded_on"]["top_failure_tag"], "deploy", "{p}");
        assert_eq!(p["grounded_on"]["similar_tasks"], json!([]));
        let prompt = chat.requests().last().unwrap().to_string();
        assert!(prompt.contains("Postgres shop"), "the context is sent");
        assert!(prompt.contains("deploy"), "the grounding is sent: {prompt}");

        // Fenced answers are read too; max_tasks trims the plan.
        chat.answer(format!(
            "Here is the plan:\n```json\n{PLAN}\n```\nGood luck."
        ));
        let (status, body) = plan(&srv, owner, json!({ "goal": "g", "max_tasks": 2 })).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["plan"]["tasks"].as_array().unwrap().len(), 2);
        assert_eq!(body["plan_calls_remaining"], 6);

        // No usable plan: 502, still charged.
        let cycle = r#"{"tasks": [
          {"ref": "a", "title": "A", "blocked_by": ["ref:b"]},
          {"ref": "b", "title": "B", "blocked_by": ["ref:a"]}]}"#;
        let dangling = r#"{"tasks": [{"ref": "a", "title": "A", "blocked_by": ["ref:zzz"]}]}"#;
        let mut remaining = 6;
        for answer in [cycle, dangling, "I cannot help with that."] {
            chat.answer(answer);
            let (status, body) = plan(&srv, owner, json!({ "goal": "g" })).await;
            remaining -= 1;
            assert_eq!(status, StatusCode::BAD_GATEWAY, "{answer}: {body}");
            assert_eq!(body["plan_calls_remaining"], remaining, "{body}");
            assert!(str_field(&body, "error").contains("no usable plan"));
        }
        chat.answer(PLAN);
        chat.down(true);
        let (status, _) = plan(&srv, owner, json!({ "goal": "g" })).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        chat.down(false);
        chat.delay(Duration::from_secs(3));
        let started = Instant::now();
        let (status, body) = plan(&srv, owner, json!({ "goal": "g" })).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the model's time is bounded"
        );
        assert_eq!(body["plan_calls_remaining"], 1);
        chat.delay(Duration::ZERO);
        let (status, _) = plan(&srv, owner, json!({ "goal": "g" })).await;
        assert_eq!(status, StatusCode::OK);
        let (status, body) = plan(&srv, owner, json!({ "goal": "g" })).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert_eq!(body["limit_type"], "plan", "{body}");
    }
);

backend_tests!(
    plans_create_their_tasks_through_the_create_rules,
    |backend: Backend| async move {
        let (srv, chat) = planner(backend).await;
        let org = srv.create_org("enterprise").await;
        let owner = &org.owner_key;
        tags(&srv, owner, &["db"]).await;
        chat.answer(PLAN);
        let (status, body) = plan(&srv, owner, json!({ "goal": "ship", "create": true })).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let created = body["created"].as_array().expect("created");
        assert_eq!(created.len(), 3, "{body}");
        let id_of = |r: &str| -> String {
            str_field(created.iter().find(|c| c["ref"] == r).unwrap(), "task_id")
        };
        let api = srv.get_task(owner, &id_of("api")).await;
        assert_eq!(api["status"], "blocked", "{api}");
        assert_eq!(api["blocked_by"], json!([id_of("schema")]));
        let schema = srv.get_task(owner, &id_of("schema")).await;
        assert_eq!(schema["tags"], json!(["db"]));
        assert_eq!(schema["priority"], 3);
        assert!(body.get("partial").is_none(), "{body}");

        // A draft that breaks the create rules is left out, with the drafts
        // it blocks; the rest are created.
        let long = "t".repeat(1_200);
        chat.answer(
            json!({ "tasks": [
                { "ref": "ok", "title": "Fine", "blocked_by": [] },
                { "ref": "bad", "title": long, "blocked_by": ["ref:ok"] },
                { "ref": "after", "title": "After", "blocked_by": ["ref:bad"] },
            ]})
            .to_string(),
        );
        let (status, body) = plan(&srv, owner, json!({ "goal": "ship", "create": true })).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["partial"], true, "{body}");
        assert_eq!(body["created"].as_array().unwrap().len(), 1);
        assert_eq!(body["created"][0]["ref"], "ok");
        let failed: Vec<String> = body["failed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| str_field(f, "ref"))
            .collect();
        assert_eq!(failed, vec!["bad", "after"], "{body}");
        assert!(
            str_field(&body["failed"][0], "error").contains("title"),
            "{body}"
        );

        // Over the task quota: nothing created, and the reason.
        srv.set_limits(&org, json!({ "tasks_per_month": 1 })).await;
        chat.answer(PLAN);
        let (status, body) = plan(&srv, owner, json!({ "goal": "ship", "create": true })).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["created"], Value::Null, "{body}");
        assert!(body["not_created"]["reason"].is_string(), "{body}");
    }
);

backend_tests!(
    recompute_checks_its_org_and_body,
    |backend: Backend| async move {
        let srv = TestServer::start(backend).await;
        let org = srv.create_org("free").await;
        assert_eq!(
            recompute(&srv, &org, &["insights"]).await,
            json!({ "computed": [] }),
            "a free org has no reports"
        );
        let path = format!("/admin/orgs/{}/recompute", org.org_id);
        for bad in [json!({ "reports": [] }), json!({ "reports": ["weather"] })] {
            let (status, body) = srv
                .admin(reqwest::Method::POST, &path, Some(bad.clone()))
                .await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        }
        let (status, _) = srv
            .admin(
                reqwest::Method::POST,
                &format!("/admin/orgs/{}/recompute", new_uuid()),
                Some(json!({})),
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
);

backend_tests!(
    reports_are_computed_on_their_schedule,
    |backend: Backend| async move {
        let srv = TestServer::builder(backend)
            .env("TASKQ_REPORTS_SCHEDULE", "on")
            .start()
            .await;
        let mut clock = Clock::new();
        let org = srv.create_org("dev").await;
        let id = srv.new_task(&org.owner_key, "Scheduled work").await;
        srv.claim(&org.owner_key, json!({}))
            .await
            .expect("the task");
        finish(&srv, &org.owner_key, &id, "completed", json!({})).await;
        // Every org's first run falls within its period; a week on, all
        // are due.
        clock.advance(&srv, 8 * DAY).await;
        let key = org.owner_key.clone();
        let ins = eventually(Duration::from_secs(60), "scheduled insights", || {
            let (srv, key) = (&srv, &key);
            async move {
                let (_, body) = srv.get(key, "/insights").await;
                (body["available"] == true).then_some(body)
            }
        })
        .await;
        assert_eq!(ins["throughput"]["completed"], 1, "{ins}");
        eventually(Duration::from_secs(60), "a scheduled standup", || {
            let (srv, key) = (&srv, &key);
            async move {
                let (_, body) = srv.get(key, "/standup?cadence=daily").await;
                (body["available"] == true).then_some(())
            }
        })
        .await;
    }
);

backend_tests!(
    insights_count_the_tasks_a_failure_retried,
    |srv| async move {
        let org = srv.create_org("pro").await;
        let owner = &org.owner_key;
        let retried = srv
            .create_task(
                owner,
                json!({"title": "flaky", "retry": {"max_retries": 3}}),
            )
            .await;
        srv.new_task(owner, "steady").await;
        for _ in 0..2 {
            let claimed = srv.claim(owner, json!({})).await.expect("a task");
            if claimed["task_id"] != retried.as_str() {
                finish(
                    &srv,
                    owner,
                    claimed["task_id"].as_str().unwrap(),
                    "completed",
                    json!({}),
                )
                .await;
                continue;
            }
            srv.update_ok(
                owner,
                json!({"task_id": retried, "status": "failed", "note": "upstream down",
                   "lease_id": claimed["lease_id"]}),
            )
            .await;
        }
        assert_eq!(srv.get_task(owner, &retried).await["retries"], 1);
        recompute(&srv, &org, &["insights"]).await;
        let ins = get_ok(&srv, owner, "/insights").await;
        assert_eq!(ins["throughput"]["retried"], 1, "{ins}");
        assert_eq!(
            ins["throughput"]["failed"], 0,
            "a retried failure is not a failure: {ins}"
        );
        assert_eq!(ins["throughput"]["completed"], 1, "{ins}");
    }
);
