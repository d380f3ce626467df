//! Waiting for tasks (`POST /tasks/wait`, CONTRACT §10): released the
//! moment all (or any) of the tasks are finished, by a member or by the
//! system; `done: false` when the time runs out; unknown and other orgs'
//! ids in `not_found`; what is finished already answers at once; every
//! bound refused with 400.

use std::time::{Duration, Instant};

use crate::common::*;

/// Waits until the server holds `n` waits, so what follows happens while
/// they wait.
async fn until_waiting(srv: &TestServer, n: u64) {
    eventually(Duration::from_secs(20), "the wait to be held", || async {
        (srv.metric("taskq_task_waits").await == Some(n)).then_some(())
    })
    .await;
}

async fn wait(srv: &TestServer, key: &str, body: Value) -> (Value, Duration) {
    let started = Instant::now();
    let (status, answer) = srv.post(key, "/tasks/wait", body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    (answer, started.elapsed())
}

fn statuses(answer: &Value) -> Vec<(String, String)> {
    answer["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| (str_field(t, "task_id"), str_field(t, "status")))
        .collect()
}

/// A task of the org's owner, which the owner may finish without a claim.
async fn owned(srv: &TestServer, org: &Org, title: &str) -> String {
    let item = json!({ "title": title, "assignee": org.owner_email });
    srv.create_task(&org.owner_key, item).await
}

async fn finish(srv: &TestServer, key: &str, id: &str, status: &str) {
    let item = json!({ "task_id": id, "status": status, "note": "finished" });
    srv.update_ok(key, item).await;
}

backend_tests!(
    all_is_released_when_the_last_task_finishes,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let a = owned(&srv, &org, "a").await;
        let b = owned(&srv, &org, "b").await;
        let waiting = wait(&srv, key, json!({ "task_ids": [a, b], "wait_seconds": 30 }));
        let finishing = async {
            until_waiting(&srv, 1).await;
            finish(&srv, key, &a, "completed").await;
            // Still held: one of two is finished.
            assert_eq!(srv.metric("taskq_task_waits").await, Some(1));
            finish(&srv, key, &b, "canceled").await;
        };
        let ((answer, took), ()) = tokio::join!(waiting, finishing);
        assert_eq!(answer["done"], true, "{answer}");
        assert_eq!(
            statuses(&answer),
            [
                (a.clone(), "completed".into()),
                (b.clone(), "canceled".into())
            ]
        );
        assert_eq!(answer["not_found"], json!([]));
        let read = srv.get_task(key, &b).await;
        assert_eq!(answer["tasks"][1]["updated_at"], read["updated_at"]);
        assert!(
            took < Duration::from_secs(25),
            "released at once, not at the end: {took:?}"
        );
        assert_eq!(srv.metric("taskq_task_waits").await, Some(0));
    }
);

backend_tests!(any_is_released_by_the_first_to_finish, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let a = owned(&srv, &org, "a").await;
    let b = owned(&srv, &org, "b").await;
    let body = json!({ "task_ids": [a, b], "until": "any" });
    let waiting = wait(&srv, key, body);
    let finishing = async {
        until_waiting(&srv, 1).await;
        srv.claim(key, json!({})).await.expect("a task to claim");
        assert_eq!(
            srv.metric("taskq_task_waits").await,
            Some(1),
            "a claim finishes nothing"
        );
        let claimed = srv.status_of(key, &a).await;
        let (first, second) = if claimed == "in_progress" {
            (&a, &b)
        } else {
            (&b, &a)
        };
        finish(&srv, key, first, "failed").await;
        (first.clone(), second.clone())
    };
    let ((answer, took), (failed, open)) = tokio::join!(waiting, finishing);
    assert_eq!(answer["done"], true, "{answer}");
    let got = statuses(&answer);
    assert!(got.contains(&(failed, "failed".into())), "{answer}");
    assert!(got.contains(&(open, "pending".into())), "{answer}");
    assert!(took < Duration::from_secs(25), "{took:?}");
});

backend_tests!(
    a_lease_that_runs_out_for_the_last_time_releases_the_wait,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let id = srv
            .create_task(key, json!({ "title": "fragile", "max_attempts": 1 }))
            .await;
        srv.claim(key, json!({ "lease_seconds": 1 }))
            .await
            .expect("the task to claim");
        let waiting = wait(&srv, key, json!({ "task_ids": [id] }));
        let expiring = async {
            until_waiting(&srv, 1).await;
            advance_clock(&srv, 5).await;
        };
        let ((answer, _), ()) = tokio::join!(waiting, expiring);
        assert_eq!(answer["done"], true, "{answer}");
        assert_eq!(statuses(&answer), [(id, "failed".into())]);
    }
);

backend_tests!(a_wait_that_runs_out_answers_done_false, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let id = owned(&srv, &org, "never done").await;
    let (answer, took) = wait(&srv, key, json!({ "task_ids": [id], "wait_seconds": 1 })).await;
    assert_eq!(answer["done"], false, "{answer}");
    assert_eq!(statuses(&answer), [(id.clone(), "pending".into())]);
    assert!(
        took >= Duration::from_secs(1),
        "held for its second: {took:?}"
    );
    assert_eq!(srv.metric("taskq_task_waits").await, Some(0));

    // Without wait_seconds' time, it only looks.
    let (answer, _) = wait(&srv, key, json!({ "task_ids": [id], "wait_seconds": 0 })).await;
    assert_eq!(answer["done"], false, "{answer}");
});

backend_tests!(
    finished_tasks_answer_at_once_and_unknown_ids_do_not_count,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let other = srv.create_org("dev").await;
        let key = &org.owner_key;
        let done = owned(&srv, &org, "done").await;
        finish(&srv, key, &done, "completed").await;
        let theirs = srv.new_task(&other.owner_key, "theirs").await;
        let unknown = new_uuid();

        let body = json!({ "task_ids": [theirs, done, unknown, done] });
        let (answer, took) = wait(&srv, key, body).await;
        assert_eq!(answer["done"], true, "{answer}");
        assert_eq!(statuses(&answer), [(done.clone(), "completed".into())]);
        assert_eq!(answer["not_found"], json!([theirs, unknown]));
        assert!(took < Duration::from_secs(10), "answered at once: {took:?}");

        // Nothing of the org: all of none is done, any of none never will
        // be; neither waits.
        let (answer, _) = wait(&srv, key, json!({ "task_ids": [unknown] })).await;
        assert_eq!(
            (answer["done"].clone(), answer["tasks"].clone()),
            (json!(true), json!([]))
        );
        let (answer, took) =
            wait(&srv, key, json!({ "task_ids": [unknown], "until": "any" })).await;
        assert_eq!(answer["done"], false, "{answer}");
        assert!(took < Duration::from_secs(10), "{took:?}");
    }
);

backend_tests!(every_bound_is_refused_naming_its_field, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let id = owned(&srv, &org, "a").await;
    let many: Vec<String> = (0..26).map(|_| new_uuid()).collect();
    for (body, field) in [
        (json!({ "task_ids": [] }), "task_ids"),
        (json!({ "task_ids": many }), "task_ids"),
        (json!({}), "task_ids"),
        (json!({ "task_ids": ["not-an-id"] }), "task_ids"),
        (json!({ "task_ids": [id], "until": "some" }), "until"),
        (
            json!({ "task_ids": [id], "wait_seconds": 31 }),
            "wait_seconds",
        ),
        (
            json!({ "task_ids": [id], "wait_seconds": -1 }),
            "wait_seconds",
        ),
        (json!({ "task_ids": [id], "colour": 1 }), "colour"),
    ] {
        let (status, answer) = srv.post(key, "/tasks/wait", body.clone()).await;
        assert_bad_request(status, &answer, field);
    }
    let (status, _) = srv
        .post("tq_not_a_key", "/tasks/wait", json!({ "task_ids": [id] }))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
});

backend_tests!(a_key_holds_at_most_25_waits_at_once, |srv| async move {
    let org = srv.create_org("pro").await;
    let key = &org.owner_key;
    let id = owned(&srv, &org, "long").await;
    let (_, other_key) = srv.new_key(key, "second").await;
    let body = json!({ "task_ids": [id], "wait_seconds": 30 });
    let held = futures_util::future::join_all((0..25).map(|_| wait(&srv, key, body.clone())));
    let checks = async {
        until_waiting(&srv, 25).await;
        let (status, refused) = srv.post(key, "/tasks/wait", body.clone()).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");
        assert_eq!(refused["limit_type"], "waits", "{refused}");
        assert_eq!(refused["limit"], 25, "{refused}");
        // Another key of the org still waits; the task's end releases all.
        let theirs = wait(&srv, &other_key, body.clone());
        let finishing = async {
            until_waiting(&srv, 26).await;
            finish(&srv, key, &id, "completed").await;
        };
        let ((answer, _), ()) = tokio::join!(theirs, finishing);
        assert_eq!(answer["done"], true, "{answer}");
    };
    let (answers, ()) = tokio::join!(held, checks);
    assert!(
        answers.iter().all(|(a, _)| a["done"] == true),
        "{answers:?}"
    );
});
