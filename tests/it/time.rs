//! Time in the queue (CONTRACT.md §9), through the real server on both
//! backends: tasks that wait for their `run_at`, failures retried with
//! backoff, and schedules that create one task per tick. The server's
//! clock is moved with the test hook, so hours and days pass at once.

use std::time::{Duration, Instant};

use crate::common::*;
use chrono::{DateTime, TimeDelta, Timelike, Utc};

/// The server's clock now (moved by nothing).
async fn server_now(srv: &TestServer) -> DateTime<Utc> {
    advance_clock(srv, 0).await
}

/// Moves the server's clock to `at` (forward only).
async fn clock_to(srv: &TestServer, at: DateTime<Utc>) -> DateTime<Utc> {
    let now = server_now(srv).await;
    let seconds = (at - now).num_milliseconds().div_euclid(1000) + 1;
    assert!(seconds > 0, "the clock only moves forward: {now} to {at}");
    advance_clock(srv, seconds).await
}

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

/// The task a claim returned, by id.
fn claimed_id(claimed: &Option<Value>) -> Option<String> {
    claimed.as_ref().map(|t| str_field(t, "task_id"))
}

/// Nothing is claimable until ten minutes pass; then `id` is.
async fn waits_ten_minutes(srv: &TestServer, key: &str, id: &str, why: &str) {
    assert_eq!(srv.claim(key, json!({})).await, None, "{why}");
    advance_clock(srv, 601).await;
    let claimed = srv.claim(key, json!({})).await;
    assert_eq!(
        claimed_id(&claimed).as_deref(),
        Some(id),
        "due after ten minutes"
    );
}

// ---------------------------------------------------------------- delays

backend_tests!(
    a_claim_skips_a_waiting_task_until_its_run_at,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let created = server_now(&srv).await;
        // Higher priority than the other, and still skipped while it waits.
        let later = srv
            .create_task(
                key,
                json!({"title": "later", "priority": 1, "delay_seconds": 300}),
            )
            .await;
        let now = srv
            .create_task(key, json!({"title": "now", "priority": 5}))
            .await;

        let task = srv.get_task(key, &later).await;
        assert_eq!(
            task["status"], "pending",
            "a waiting task is pending: {task}"
        );
        let run_at = ts(&task, "run_at");
        let ahead = (run_at - created).num_seconds();
        assert!(
            (299..=302).contains(&ahead),
            "run_at is 300 s ahead: {task}"
        );
        let lean = srv.list_all(key, "").await;
        let listed = lean
            .iter()
            .find(|t| t["task_id"] == later.as_str())
            .unwrap();
        assert_eq!(
            listed["run_at"], task["run_at"],
            "a lean item shows its run_at: {listed}"
        );

        let (status, batch) = srv.post(key, "/tasks/claim", json!({"count": 5})).await;
        assert_eq!(status, StatusCode::OK, "{batch}");
        let batch_ids: Vec<&str> = batch["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["task_id"].as_str().unwrap())
            .collect();
        assert_eq!(
            batch_ids,
            [now.as_str()],
            "a batch claim skips the waiting task: {batch}"
        );
        assert_eq!(srv.claim(key, json!({})).await, None, "nothing else is due");

        clock_to(&srv, run_at).await;
        let claimed = srv.claim(key, json!({})).await;
        assert_eq!(
            claimed_id(&claimed),
            Some(later.clone()),
            "due once its run_at passed"
        );
        let lean = srv.list_all(key, "").await;
        let listed = lean
            .iter()
            .find(|t| t["task_id"] == later.as_str())
            .unwrap();
        assert!(
            listed.get("run_at").is_none(),
            "a lean item drops a past run_at: {listed}"
        );
    }
);

backend_tests!(
    a_long_poll_gets_a_waiting_task_within_1_s_of_its_run_at,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = org.owner_key.clone();

        // On the server's own timer, the clock untouched.
        let started = Instant::now();
        let soon = srv
            .create_task(&key, json!({"title": "soon", "delay_seconds": 2}))
            .await;
        let claimed = srv.claim(&key, json!({"wait_seconds": 10})).await;
        let waited = started.elapsed();
        assert_eq!(
            claimed_id(&claimed),
            Some(soon),
            "the long poll got the task"
        );
        assert!(
            waited >= Duration::from_millis(1900) && waited < Duration::from_millis(3000),
            "claimed {waited:?} after a 2 s delay was set"
        );

        // With the clock moved past a run_at an hour ahead.
        let hour = srv
            .create_task(&key, json!({"title": "in an hour", "delay_seconds": 3600}))
            .await;
        let poll = {
            let srv_url = srv.base_url.clone();
            let key = key.clone();
            tokio::spawn(async move {
                let answer = reqwest::Client::new()
                    .post(format!("{srv_url}/tasks/claim"))
                    .header("x-api-key", key)
                    .json(&json!({"wait_seconds": 20}))
                    .send()
                    .await
                    .unwrap();
                (Instant::now(), answer.json::<Value>().await.unwrap())
            })
        };
        // The poll is waiting before the clock moves.
        eventually(Duration::from_secs(10), "the claim is waiting", || async {
            let (_, stats) = srv.admin(reqwest::Method::GET, "/admin/stats", None).await;
            let orgs = stats["orgs"].as_array()?;
            let this = orgs.iter().find(|o| o["org_id"] == org.org_id.as_str())?;
            (this["waiting_claims"] == 1).then_some(())
        })
        .await;
        advance_clock(&srv, 3601).await;
        let moved = Instant::now();
        let (answered, body) = poll.await.unwrap();
        assert_eq!(body["task_id"], hour.as_str(), "{body}");
        assert!(
            answered.duration_since(moved) < Duration::from_secs(1),
            "answered {:?} after the run_at passed",
            answered.duration_since(moved)
        );
    }
);

backend_tests!(
    run_at_null_makes_a_waiting_task_due_and_a_delay_postpones_one,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let waiting = srv
            .create_task(key, json!({"title": "w", "run_at": "2099-01-01T00:00:00Z"}))
            .await;
        assert_eq!(srv.claim(key, json!({})).await, None);
        srv.update_ok(key, json!({"task_id": waiting, "run_at": null}))
            .await;
        let task = srv.get_task(key, &waiting).await;
        assert!(task["run_at"].is_null(), "due now: {task}");
        let claimed = srv.claim(key, json!({})).await;
        assert_eq!(claimed_id(&claimed), Some(waiting));

        let plain = srv.new_task(key, "plain").await;
        srv.update_ok(key, json!({"task_id": plain, "delay_seconds": 600}))
            .await;
        waits_ten_minutes(&srv, key, &plain, "postponed by ten minutes").await;
    }
);

backend_tests!(
    waiting_true_and_false_split_the_pending_tasks,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let waiting = srv
            .create_task(key, json!({"title": "w", "delay_seconds": 900}))
            .await;
        let due = srv.new_task(key, "due").await;
        let done = srv
            .create_task(key, json!({"title": "done", "delay_seconds": 900}))
            .await;
        srv.update_ok(
            key,
            json!({"task_id": done, "status": "canceled", "note": "no", "assignee": org.owner_email}),
        )
        .await;

        assert_eq!(
            srv.list_ids(key, "waiting=true").await,
            std::slice::from_ref(&waiting)
        );
        let mut others = srv.list_ids(key, "waiting=false").await;
        others.sort();
        let mut expected = vec![due.clone(), done.clone()];
        expected.sort();
        assert_eq!(others, expected, "a finished task is never waiting");
        let full = srv.list_all(key, "waiting=true&full=true").await;
        assert_eq!(full.len(), 1);
        assert_eq!(full[0]["status"], "pending");

        let (status, body) = srv.get(key, "/tasks?waiting=maybe").await;
        assert_bad_request(status, &body, "waiting");

        advance_clock(&srv, 901).await;
        assert!(
            srv.list_ids(key, "waiting=true").await.is_empty(),
            "due now"
        );
    }
);

backend_tests!(
    a_blocked_task_keeps_its_run_at_for_when_it_unblocks,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let results = srv
            .create_tasks(
                key,
                json!([
                    {"ref": "first", "title": "first"},
                    {"title": "then, later", "blocked_by": ["ref:first"], "delay_seconds": 600},
                ]),
            )
            .await;
        let first = str_field(&results[0], "task_id");
        let then = str_field(&results[1], "task_id");
        assert_eq!(results[1]["status"], "blocked");
        let claimed = srv.claim(key, json!({})).await.unwrap();
        assert_eq!(claimed["task_id"], first.as_str());
        srv.update_ok(
            key,
            json!({"task_id": first, "status": "completed", "note": "done",
               "lease_id": claimed["lease_id"]}),
        )
        .await;
        let task = srv.get_task(key, &then).await;
        assert_eq!(task["status"], "pending", "{task}");
        assert!(task["run_at"].is_string(), "{task}");
        waits_ten_minutes(&srv, key, &then, "unblocked but still waiting").await;
    }
);

backend_tests!(
    bad_times_and_retry_policies_are_refused_naming_the_field,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let cases = [
            (json!({"title": "t", "run_at": "tomorrow"}), "run_at"),
            (json!({"title": "t", "run_at": 1700000000}), "run_at"),
            (
                json!({"title": "t", "run_at": "2099-01-01T00:00:00Z", "delay_seconds": 5}),
                "delay_seconds",
            ),
            (json!({"title": "t", "delay_seconds": -1}), "delay_seconds"),
            (
                json!({"title": "t", "delay_seconds": 31536001}),
                "delay_seconds",
            ),
            (json!({"title": "t", "delay_seconds": "5"}), "delay_seconds"),
            (
                json!({"title": "t", "retry": {"max_retries": 26}}),
                "max_retries",
            ),
            (
                json!({"title": "t", "retry": {"max_retries": 1, "backoff_seconds": 0}}),
                "backoff_seconds",
            ),
            (
                json!({"title": "t", "retry": {"max_retries": 1, "backoff_seconds": 86401}}),
                "backoff_seconds",
            ),
            (
                json!({"title": "t", "retry": {"max_retries": 1, "backoff_seconds": 60,
                                           "max_backoff_seconds": 59}}),
                "max_backoff_seconds",
            ),
            (
                json!({"title": "t", "retry": {"max_retries": 1, "max_backoff_seconds": 604801}}),
                "max_backoff_seconds",
            ),
        ];
        for (item, field) in cases {
            let (status, body) = srv.post(key, "/tasks", json!({"tasks": [item]})).await;
            assert_bad_request(status, &body, field);
        }
        let id = srv.new_task(key, "t").await;
        let (status, body) = srv
            .update(
                key,
                json!([{"task_id": id, "run_at": "2099-01-01T00:00:00Z", "delay_seconds": 1}]),
            )
            .await;
        assert_bad_request(status, &body, "delay_seconds");
        assert!(
            srv.list_ids(key, "").await == [id],
            "nothing was created by a refusal"
        );
    }
);

// --------------------------------------------------------------- retries

/// The delay a retry's note names (`retry K of N in S s: ...`).
fn retry_delay(note: &str, k: u64, n: u64, why: &str) -> u64 {
    let prefix = format!("retry {k} of {n} in ");
    let rest = note
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{note:?} starts with {prefix:?}"));
    let (seconds, tail) = rest.split_once(" s: ").unwrap();
    assert_eq!(tail, why, "the failure's note follows: {note:?}");
    seconds.parse().unwrap()
}

/// Claims `id`, fails it with `note`, and returns the update's result.
async fn claim_and_fail(srv: &TestServer, key: &str, id: &str, note: &str) -> Value {
    let claimed = srv.claim(key, json!({})).await.expect("the task is due");
    assert_eq!(claimed["task_id"], id, "{claimed}");
    srv.update_ok(
        key,
        json!({"task_id": id, "status": "failed", "note": note,
               "lease_id": claimed["lease_id"], "output": {"tried": note}}),
    )
    .await
}

backend_tests!(
    a_failure_with_retries_left_waits_its_backoff_then_the_last_one_cascades,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let results = srv
            .create_tasks(
                key,
                json!([
                    {"ref": "flaky", "title": "call the upstream",
                     "retry": {"max_retries": 2, "backoff_seconds": 10, "max_backoff_seconds": 15}},
                    {"title": "after it", "blocked_by": ["ref:flaky"]},
                ]),
            )
            .await;
        let flaky = str_field(&results[0], "task_id");
        let after = str_field(&results[1], "task_id");
        let task = srv.get_task(key, &flaky).await;
        assert_eq!(
            task["retry"],
            json!({"max_retries": 2, "backoff_seconds": 10, "max_backoff_seconds": 15})
        );
        assert_eq!(task["retries"], 0);

        // Two retries: 10 s, then min(15, 20) s, each with up to 10% jitter.
        for (k, base) in [(1u64, 10u64), (2, 15)] {
            let why = format!("upstream 429, try {k}");
            let result = claim_and_fail(&srv, key, &flaky, &why).await;
            assert_eq!(
                result["status"], "pending",
                "the result shows the retry: {result}"
            );
            let task = srv.get_task(key, &flaky).await;
            assert_eq!(task["status"], "pending", "{task}");
            assert_eq!(task["retries"], k, "{task}");
            assert!(
                task["assignee"].is_null(),
                "the assignee is cleared: {task}"
            );
            assert_eq!(
                task["output"],
                json!({"tried": why}),
                "the output is kept: {task}"
            );
            let event = history(&task).last().unwrap().clone();
            assert_eq!(event["from_status"], "in_progress", "{event}");
            assert_eq!(event["to_status"], "pending", "{event}");
            let delay = retry_delay(event["note"].as_str().unwrap(), k, 2, &why);
            assert!(
                (base..=base + base / 10).contains(&delay),
                "retry {k}: {delay} s is {base} s with at most 10% jitter"
            );
            let waits = (ts(&task, "run_at") - ts(&task, "updated_at")).num_milliseconds();
            assert!(
                (waits - delay as i64 * 1000).abs() < 1000,
                "run_at is {delay} s after the failure: {task}"
            );
            assert_eq!(
                srv.status_of(key, &after).await,
                "blocked",
                "the dependent waits"
            );
            assert_eq!(
                srv.claim(key, json!({})).await,
                None,
                "waiting out its backoff"
            );
            advance_clock(&srv, delay as i64 + 1).await;
        }

        let result = claim_and_fail(&srv, key, &flaky, "gave up").await;
        assert_eq!(result["status"], "failed", "{result}");
        assert_eq!(srv.status_of(key, &flaky).await, "failed");
        assert_eq!(
            srv.status_of(key, &after).await,
            "failed",
            "the last failure cascades"
        );
    }
);

backend_tests!(
    a_cancel_and_a_task_without_a_policy_never_retry,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let policy = json!({"max_retries": 5});
        let canceled = srv
            .create_task(key, json!({"title": "c", "retry": policy}))
            .await;
        srv.update_ok(
            key,
            json!({"task_id": canceled, "status": "canceled", "note": "not needed", "assignee": org.owner_email}),
        )
        .await;
        let task = srv.get_task(key, &canceled).await;
        assert_eq!(task["status"], "canceled");
        assert_eq!(task["retries"], 0);
        assert_eq!(
            task["retry"]["backoff_seconds"], 30,
            "the default backoff: {task}"
        );
        assert_eq!(
            task["retry"]["max_backoff_seconds"], 3600,
            "the default cap: {task}"
        );

        let plain = srv.new_task(key, "p").await;
        let result = claim_and_fail(&srv, key, &plain, "broken").await;
        assert_eq!(result["status"], "failed");
        let task = srv.get_task(key, &plain).await;
        assert!(task["retry"].is_null(), "{task}");
    }
);

// ------------------------------------------------------------- schedules

async fn create_schedule(srv: &TestServer, key: &str, body: Value) -> Value {
    let (status, schedule) = srv.post(key, "/schedules", body).await;
    assert_eq!(status, StatusCode::CREATED, "POST /schedules: {schedule}");
    schedule
}

/// The tasks a schedule created, oldest tick first.
async fn tasks_of(srv: &TestServer, key: &str, schedule: &Value) -> Vec<Value> {
    let id = &schedule["schedule_id"];
    let mut tasks: Vec<Value> = srv
        .list_all(key, "full=true")
        .await
        .into_iter()
        .filter(|t| &t["schedule_id"] == id)
        .collect();
    tasks.sort_by_key(|t| ts(t, "scheduled_for"));
    tasks
}

/// Waits until the schedule has created `n` tasks, and returns them.
async fn await_tasks(srv: &TestServer, key: &str, schedule: &Value, n: usize) -> Vec<Value> {
    eventually(Duration::from_secs(5), "the schedule's tasks", || async {
        let tasks = tasks_of(srv, key, schedule).await;
        (tasks.len() >= n).then_some(tasks)
    })
    .await
}

fn ticks(tasks: &[Value]) -> Vec<DateTime<Utc>> {
    tasks.iter().map(|t| ts(t, "scheduled_for")).collect()
}

backend_tests!(
    schedules_are_created_read_changed_and_deleted,
    |srv| async move {
        let org = srv.create_org("pro").await;
        let key = &org.owner_key;
        let before = server_now(&srv).await;
        let schedule = create_schedule(
            &srv,
            key,
            json!({"name": "nightly audit", "cron": "0 2 * * *", "timezone": "Europe/Berlin",
               "task": {"title": "Audit the dependencies", "tags": [], "priority": 1}}),
        )
        .await;
        let id = str_field(&schedule, "schedule_id");
        assert!(is_canonical_uuid(&id), "{schedule}");
        assert_eq!(schedule["name"], "nightly audit");
        assert_eq!(schedule["cron"], "0 2 * * *");
        assert_eq!(schedule["timezone"], "Europe/Berlin");
        assert_eq!(schedule["active"], true);
        assert_eq!(schedule["task"]["title"], "Audit the dependencies");
        assert!(schedule["last_run_at"].is_null(), "{schedule}");
        assert_eq!(schedule["created_by"], org.owner_email.as_str());
        let next = ts(&schedule, "next_run_at");
        // 02:00 in Berlin is 00:00 UTC in summer, 01:00 in winter.
        assert!(
            next.hour() <= 1 && next.minute() == 0,
            "02:00 in Berlin: {next}"
        );
        assert!(
            next > before && next - before <= TimeDelta::days(1),
            "{next}"
        );

        let (status, got) = srv.get(key, &format!("/schedules/{id}")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(got, schedule);
        let (status, list) = srv.get(key, "/schedules").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(list["schedules"], json!([schedule]));

        // Paused: no next run. Resumed with a new pattern: its next run.
        let (status, paused) = srv
            .patch(key, &format!("/schedules/{id}"), json!({"active": false}))
            .await;
        assert_eq!(status, StatusCode::OK, "{paused}");
        assert_eq!(paused["active"], false);
        assert!(paused["next_run_at"].is_null(), "{paused}");
        let (status, resumed) = srv
            .patch(
                key,
                &format!("/schedules/{id}"),
                json!({"active": true, "cron": "*/15 * * * *", "timezone": "UTC",
                   "task": {"title": "Every quarter hour"}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{resumed}");
        assert_eq!(resumed["cron"], "*/15 * * * *");
        assert_eq!(resumed["task"], json!({"title": "Every quarter hour"}));
        let next = ts(&resumed, "next_run_at");
        assert_eq!(next.minute() % 15, 0, "{resumed}");
        assert!(
            next - server_now(&srv).await <= TimeDelta::minutes(15),
            "{resumed}"
        );

        // Refusals, each naming what is wrong.
        let refusals = [
            (
                json!({"name": "", "cron": "0 2 * * *", "task": {"title": "t"}}),
                "name",
            ),
            (
                json!({"name": "x".repeat(65), "cron": "0 2 * * *", "task": {"title": "t"}}),
                "name",
            ),
            (
                json!({"name": "n", "cron": "0 2 * * MON", "task": {"title": "t"}}),
                "cron",
            ),
            (
                json!({"name": "n", "cron": "0 2 * *", "task": {"title": "t"}}),
                "cron",
            ),
            (
                json!({"name": "n", "cron": "0 0 31 2 *", "task": {"title": "t"}}),
                "cron",
            ),
            (
                json!({"name": "n", "cron": "0 2 * * *", "timezone": "Mars/Olympus", "task": {"title": "t"}}),
                "timezone",
            ),
            (json!({"name": "n", "cron": "0 2 * * *"}), "task"),
            (
                json!({"name": "n", "cron": "0 2 * * *", "task": {"title": "t", "priority": 9}}),
                "task.priority",
            ),
            (
                json!({"name": "n", "cron": "0 2 * * *", "task": {"title": "t", "ref": "r"}}),
                "task.ref",
            ),
            (
                json!({"name": "n", "cron": "0 2 * * *", "task": {"title": "t", "blocked_by": [new_uuid()]}}),
                "task.blocked_by",
            ),
            (
                json!({"name": "n", "cron": "0 2 * * *", "task": {"title": "t", "task_id": new_uuid()}}),
                "task.task_id",
            ),
        ];
        for (body, field) in refusals {
            let (status, answer) = srv.post(key, "/schedules", body).await;
            assert_bad_request(status, &answer, field);
        }
        let (status, answer) = srv
            .post(
                key,
                "/schedules",
                json!({"name": "nightly audit", "cron": "0 3 * * *", "task": {"title": "t"}}),
            )
            .await;
        assert_error(status, &answer, StatusCode::CONFLICT);
        let (status, answer) = srv.patch(key, &format!("/schedules/{id}"), json!({})).await;
        assert_error(status, &answer, StatusCode::BAD_REQUEST);
        let (status, answer) = srv
            .patch(
                key,
                &format!("/schedules/{id}"),
                json!({"cron": "61 * * * *"}),
            )
            .await;
        assert_bad_request(status, &answer, "cron");

        // Only admins and owners manage schedules.
        let member = srv
            .add_member(&org, &format!("{}@example.com", unique("m")), "user")
            .await;
        let (status, answer) = srv.get(&member, "/schedules").await;
        assert_error(status, &answer, StatusCode::FORBIDDEN);

        // Another org's schedule is not found; so is a deleted one.
        let other = srv.create_org("pro").await;
        for path in [
            format!("/schedules/{id}"),
            format!("/schedules/{}", new_uuid()),
        ] {
            let (status, answer) = srv.get(&other.owner_key, &path).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
            assert_eq!(answer["error"], "schedule not found");
        }
        let (status, answer) = srv
            .patch(
                &other.owner_key,
                &format!("/schedules/{id}"),
                json!({"active": false}),
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
        let (status, _) = srv
            .delete(&other.owner_key, &format!("/schedules/{id}"))
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, _) = srv.delete(key, &format!("/schedules/{id}")).await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        let (status, answer) = srv.get(key, &format!("/schedules/{id}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
        let (_, list) = srv.get(key, "/schedules").await;
        assert_eq!(list["schedules"], json!([]));
    }
);

backend_tests!(
    schedules_are_a_paid_feature_with_a_limit_per_tier,
    |srv| async move {
        let free = srv.create_org("free").await;
        let (status, body) = srv
            .post(
                &free.owner_key,
                "/schedules",
                json!({"name": "n", "cron": "0 2 * * *", "task": {"title": "t"}}),
            )
            .await;
        assert_error(status, &body, StatusCode::FORBIDDEN);
        assert_eq!(body["upgrade"], true, "{body}");

        let dev = srv.create_org("dev").await;
        for i in 0..10 {
            create_schedule(
                &srv,
                &dev.owner_key,
                json!({"name": format!("s{i}"), "cron": "0 2 * * *", "task": {"title": "t"}}),
            )
            .await;
        }
        let (status, body) = srv
            .post(
                &dev.owner_key,
                "/schedules",
                json!({"name": "s10", "cron": "0 2 * * *", "task": {"title": "t"}}),
            )
            .await;
        assert_error(status, &body, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(body["limit_type"], "schedules", "{body}");
        let (_, list) = srv.get(&dev.owner_key, "/schedules").await;
        assert_eq!(list["schedules"].as_array().unwrap().len(), 10);
    }
);

backend_tests!(
    a_schedule_every_minute_creates_one_task_per_tick,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let (_, planner) = srv.new_key(&org.owner_key, "planner").await;
        let key = &planner;
        let schedule = create_schedule(
            &srv,
            key,
            json!({"name": "every minute", "cron": "* * * * *",
               "task": {"title": "Check the mirror", "tags": [], "priority": 1,
                        "metadata": {"source": "cron"}}}),
        )
        .await;
        let first = ts(&schedule, "next_run_at");
        assert_eq!(first.second(), 0, "{schedule}");

        for n in 1..=3usize {
            let tick = first + TimeDelta::minutes(n as i64 - 1);
            clock_to(&srv, tick).await;
            let tasks = await_tasks(&srv, key, &schedule, n).await;
            let expected: Vec<_> = (0..n as i64)
                .map(|i| first + TimeDelta::minutes(i))
                .collect();
            assert_eq!(ticks(&tasks), expected, "one task a tick");
            let task = tasks.last().unwrap();
            assert_eq!(task["title"], "Check the mirror");
            assert_eq!(task["priority"], 1);
            assert_eq!(task["metadata"], json!({"source": "cron"}));
            assert_eq!(task["status"], "pending");
            // Its creation is the key's that made the schedule, as every
            // other event names a key.
            let created = srv.get_task(key, str_field(task, "task_id").as_str()).await;
            let events = history(&created);
            assert_eq!(events[0]["to_status"], "pending", "{created}");
            assert_eq!(events[0]["agent_id"], "planner", "{created}");
        }
        // Ticks fired again (the clock moved within the minute) make nothing.
        advance_clock(&srv, 5).await;
        advance_clock(&srv, 5).await;
        let (status, got) = srv
            .get(
                key,
                &format!("/schedules/{}", schedule["schedule_id"].as_str().unwrap()),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            ts(&got, "last_run_at"),
            first + TimeDelta::minutes(2),
            "{got}"
        );
        assert_eq!(
            ts(&got, "next_run_at"),
            first + TimeDelta::minutes(3),
            "{got}"
        );
        assert_eq!(tasks_of(&srv, key, &schedule).await.len(), 3);
    }
);

backend_tests!(
    ticks_missed_while_the_server_was_down_make_one_catch_up_task,
    |mut srv| async move {
        let org = srv.create_org("dev").await;
        let key = org.owner_key.clone();
        let schedule = create_schedule(
            &srv,
            &key,
            json!({"name": "daily", "cron": "0 12 * * *", "task": {"title": "Daily"}}),
        )
        .await;
        let first = ts(&schedule, "next_run_at");
        let now = server_now(&srv).await;
        let status = srv.stop().await;
        assert!(status.success());
        // Down for three days and an hour past the first missed tick.
        let down = (first - now) + TimeDelta::days(2) + TimeDelta::hours(1);
        srv.set_env(
            "TASKQ_TEST_CLOCK_OFFSET_MS",
            Some(&down.num_milliseconds().to_string()),
        );
        srv.start_again().await;
        let tasks = await_tasks(&srv, &key, &schedule, 1).await;
        assert_eq!(
            ticks(&tasks),
            [first + TimeDelta::days(2)],
            "one task, for the latest missed tick"
        );
        let id = schedule["schedule_id"].as_str().unwrap();
        let (_, got) = srv.get(&key, &format!("/schedules/{id}")).await;
        assert_eq!(ts(&got, "next_run_at"), first + TimeDelta::days(3), "{got}");
        // It stays one after another restart.
        srv.restart().await;
        let (status, _) = srv.get(&key, "/schedules").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(tasks_of(&srv, &key, &schedule).await.len(), 1);
    }
);

/// Steps the clock from `from` to `to` in 20-minute steps, as a server
/// running through the night sees it.
async fn run_through(srv: &TestServer, from: DateTime<Utc>, to: DateTime<Utc>) {
    let mut t = from;
    while t < to {
        t += TimeDelta::minutes(20);
        clock_to(srv, t).await;
    }
}

/// A New York schedule created at `evening` (UTC), then five hours of its
/// night stepped through: the schedule and the tasks it made.
async fn one_night(
    srv: &TestServer,
    key: &str,
    name: &str,
    cron: &str,
    evening: &str,
) -> (Value, Vec<Value>) {
    let evening = at(evening);
    clock_to(srv, evening).await;
    let schedule = create_schedule(
        srv,
        key,
        json!({"name": name, "cron": cron, "timezone": "America/New_York",
               "task": {"title": name}}),
    )
    .await;
    run_through(srv, evening, evening + TimeDelta::hours(5)).await;
    let tasks = await_tasks(srv, key, &schedule, 1).await;
    (schedule, tasks)
}

backend_tests!(
    a_new_york_schedule_runs_once_a_local_day_across_both_dst_changes,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;

        // 14 March 2027: 02:00 EST springs to 03:00 EDT; 02:30 does not exist
        // and runs when the gap ends.
        let spring = one_night(&srv, key, "spring", "30 2 * * *", "2027-03-14T04:00:00Z").await;
        assert_eq!(
            ticks(&spring.1),
            [at("2027-03-14T07:00:00Z")],
            "03:00 EDT, once"
        );

        // 7 November 2027: 02:00 EDT falls back to 01:00 EST; 01:30 exists
        // twice and runs at the first.
        let fall = one_night(&srv, key, "fall", "30 1 * * *", "2027-11-07T03:00:00Z").await;
        assert_eq!(
            ticks(&fall.1),
            [at("2027-11-07T05:30:00Z")],
            "01:30 EDT, once"
        );
        let fall = fall.0;
        let (_, got) = srv
            .get(
                key,
                &format!("/schedules/{}", fall["schedule_id"].as_str().unwrap()),
            )
            .await;
        assert_eq!(
            ts(&got, "next_run_at"),
            at("2027-11-08T06:30:00Z"),
            "01:30 EST next"
        );
    }
);
