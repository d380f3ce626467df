//! Concurrency, crash durability, restarts and idle org actors.

use crate::common::*;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

backend_tests!(concurrent_claimers_never_share_a_task, |srv| async move {
    const TASKS: usize = 50;
    const CLAIMERS: usize = 60;
    let org = srv.create_org("dev").await;
    let mut created = HashSet::new();
    for chunk in 0..2 {
        let items: Vec<Value> = (0..TASKS / 2)
            .map(|i| json!({ "title": format!("job {chunk}-{i}"), "priority": 1 + i % 5 }))
            .collect();
        created.extend(ids(&srv.create_tasks(&org.owner_key, json!(items)).await));
    }
    let mut keys = Vec::new();
    for i in 0..CLAIMERS {
        let name = format!("claimer-{i}");
        let (_, key) = srv.new_key(&org.owner_key, &name).await;
        keys.push((name, key));
    }

    let srv = Arc::new(srv);
    let barrier = Arc::new(tokio::sync::Barrier::new(CLAIMERS));
    let mut set = tokio::task::JoinSet::new();
    for (name, key) in keys {
        let srv = srv.clone();
        let barrier = barrier.clone();
        set.spawn(async move {
            barrier.wait().await;
            let claimed = srv.claim(&key, json!({ "include_context": false })).await;
            (name, claimed)
        });
    }
    let mut claimed_ids = Vec::new();
    let mut empty = 0;
    while let Some(joined) = set.join_next().await {
        let (name, claimed) = joined.expect("claimer panicked");
        match claimed {
            Some(task) => {
                assert_eq!(task["assignee"], name.as_str(), "{task}");
                assert_eq!(task["status"], "in_progress");
                claimed_ids.push(str_field(&task, "task_id"));
            }
            None => empty += 1,
        }
    }
    let unique: HashSet<String> = claimed_ids.iter().cloned().collect();
    assert_eq!(claimed_ids.len(), TASKS, "{empty} claimers got null");
    assert_eq!(unique.len(), TASKS, "a task was claimed twice");
    assert_eq!(unique, created);
    assert_eq!(empty, CLAIMERS - TASKS);
    assert!(srv.claim(&org.owner_key, json!({})).await.is_none());

    for t in srv.list_all(&org.owner_key, "").await {
        assert_eq!(t["status"], "in_progress", "{t}");
    }
    // Exactly one claim event per task.
    let sample: Vec<String> = claimed_ids.iter().take(10).cloned().collect();
    for id in sample {
        let task = srv.get_task(&org.owner_key, &id).await;
        assert_eq!(history(&task).len(), 2, "{task}");
    }
});

backend_tests!(
    concurrent_updates_of_one_task_are_serialized,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let id = srv
            .create_task(
                &org.owner_key,
                json!({ "title": "hot", "assignee": org.owner_email }),
            )
            .await;
        let srv = Arc::new(srv);
        let mut set = tokio::task::JoinSet::new();
        for i in 0..20 {
            let srv = srv.clone();
            let key = org.owner_key.clone();
            let id = id.clone();
            set.spawn(async move {
                let (status, body) = srv
                    .update(
                        &key,
                        json!([{ "task_id": id, "metadata": { format!("k{i}"): i } }]),
                    )
                    .await;
                assert_eq!(status, StatusCode::OK, "{body}");
            });
        }
        while let Some(joined) = set.join_next().await {
            joined.expect("updater panicked");
        }
        let task = srv.get_task(&org.owner_key, &id).await;
        let metadata = task["metadata"].as_object().expect("metadata object");
        assert_eq!(metadata.len(), 20, "a concurrent merge was lost: {task}");
    }
);

backend_tests!(kill9_keeps_every_acknowledged_write, |mut srv| async move {
    let org = srv.create_org("dev").await;
    let key = org.owner_key.clone();
    let items: Vec<Value> = (0..25)
        .map(|i| json!({ "title": format!("bulk {i}"), "priority": 2 + i % 3, "assignee": org.owner_email }))
        .collect();
    let bulk = ids(&srv.create_tasks(&key, json!(items)).await);
    let x = srv
        .create_task(
            &key,
            json!({ "title": "x", "priority": 5, "assignee": org.owner_email }),
        )
        .await;
    let y = srv
        .create_task(
            &key,
            json!({ "title": "y", "priority": 5, "blocked_by": [x] }),
        )
        .await;
    let urgent = srv
        .create_task(&key, json!({ "title": "urgent", "priority": 1 }))
        .await;

    srv.update_ok(&key, json!({ "task_id": bulk[0], "status": "in_progress" }))
        .await;
    srv.update_ok(
        &key,
        json!({ "task_id": bulk[1], "status": "completed", "note": "ok", "output": { "n": 1 } }),
    )
    .await;
    srv.update_ok(&key, json!({ "task_id": bulk[2], "metadata": { "m": 2 } }))
        .await;
    srv.update_ok(
        &key,
        json!({ "task_id": bulk[3], "title": "renamed", "tags": ["t"] }),
    )
    .await;
    srv.update_ok(
        &key,
        json!({ "task_id": x, "status": "completed", "note": "unblock y" }),
    )
    .await;
    let claimed = srv
        .claim(
            &key,
            json!({ "lease_seconds": 600, "include_context": false }),
        )
        .await
        .expect("urgent");
    assert_eq!(claimed["task_id"], urgent.as_str());
    let last = srv.new_task(&key, "the very last write").await;
    srv.kill9().await;

    srv.start_again().await;
    assert_eq!(srv.list_all(&key, "").await.len(), 25 + 4);
    assert_eq!(
        srv.get_task(&key, &last).await["title"],
        "the very last write"
    );

    let t = srv.get_task(&key, &bulk[0]).await;
    assert_eq!(t["status"], "in_progress");
    assert_eq!(history(&t).len(), 2);
    let t = srv.get_task(&key, &bulk[1]).await;
    assert_eq!(t["status"], "completed");
    assert_eq!(t["output"], json!({ "n": 1 }));
    assert_eq!(history(&t)[1]["note"], "ok");
    assert_eq!(
        srv.get_task(&key, &bulk[2]).await["metadata"],
        json!({ "m": 2 })
    );
    let t = srv.get_task(&key, &bulk[3]).await;
    assert_eq!(t["title"], "renamed");
    assert_eq!(t["tags"], json!(["t"]));
    for (i, id) in bulk.iter().enumerate().skip(4) {
        let t = srv.get_task(&key, id).await;
        assert_eq!(t["title"], format!("bulk {i}"));
        assert_eq!(t["status"], "pending");
    }

    let t = srv.get_task(&key, &y).await;
    assert_eq!(t["status"], "pending", "the unblocking survived: {t}");
    assert_eq!(history(&t).last().unwrap()["agent_id"], "system");

    let t = srv.get_task(&key, &urgent).await;
    assert_eq!(t["status"], "in_progress");
    assert_eq!(t["assignee"], org.owner_key_name.as_str());
    assert_eq!(ts(&t, "lease_expires_at"), ts(&claimed, "lease_expires_at"));
    // The lease itself survived: its id still fences.
    let lease = str_field(&claimed, "lease_id");
    srv.update_ok(
        &key,
        json!({ "task_id": urgent, "lease_id": lease, "output": { "after": "crash" } }),
    )
    .await;
    let error = srv
        .update_item_error(
            &key,
            json!({ "task_id": urgent, "lease_id": new_uuid(), "title": "x" }),
        )
        .await;
    assert_eq!(error, "lease lost");

    // And the queue continues where it was.
    let next = srv.claim(&key, json!({})).await.expect("more work");
    assert_ne!(next["task_id"], urgent.as_str());
});

backend_tests!(
    lease_expiring_while_the_server_is_down,
    |mut srv| async move {
        let org = srv.create_org("dev").await;
        let key = org.owner_key.clone();
        let id = srv.new_task(&key, "orphaned").await;
        let claimed = srv
            .claim(
                &key,
                json!({ "lease_seconds": 2, "include_context": false }),
            )
            .await
            .expect("the task");
        let expires = ts(&claimed, "lease_expires_at");
        srv.kill9().await;

        // A real deadline: stay down until the lease has run out.
        let remaining = (expires - chrono::Utc::now()).to_std().unwrap_or_default();
        tokio::time::sleep(remaining + Duration::from_millis(500)).await;
        srv.start_again().await;

        let task = eventually(
            Duration::from_secs(20),
            "lease expiry after restart",
            || async {
                let task = srv.get_task(&key, &id).await;
                (task["status"] == "pending").then_some(task)
            },
        )
        .await;
        assert!(task["assignee"].is_null(), "{task}");
        let event = history(&task).last().cloned().unwrap();
        assert_eq!(event["from_status"], "in_progress");
        assert_eq!(event["to_status"], "pending");
        assert_eq!(event["agent_id"], "system");
        assert_eq!(event["note"], "lease expired");

        let error = srv
        .update_item_error(&key, json!({ "task_id": id, "lease_id": claimed["lease_id"], "status": "completed", "note": "late" }))
        .await;
        assert_eq!(error, "lease lost");
    }
);

/// A new org with `count` tasks, one of them claimed for 900 s, and then
/// the server stopped with SIGTERM, which must exit 0: the org, the
/// created ids and the claim.
async fn stop_with_one_claimed(srv: &mut TestServer, count: usize) -> (Org, Vec<String>, Value) {
    let org = srv.create_org("dev").await;
    let items: Vec<Value> = (0..count)
        .map(|i| json!({ "title": format!("t{i}") }))
        .collect();
    let created = ids(&srv.create_tasks(&org.owner_key, json!(items)).await);
    let claimed = srv
        .claim(&org.owner_key, json!({ "lease_seconds": 900 }))
        .await
        .expect("a task");
    let status = srv.stop().await;
    assert!(status.success(), "SIGTERM exit status {status:?}");
    (org, created, claimed)
}

backend_tests!(
    graceful_shutdown_exits_zero_and_keeps_state,
    |mut srv| async move {
        let (org, created, claimed) = stop_with_one_claimed(&mut srv, 10).await;
        let key = org.owner_key.clone();
        srv.start_again().await;

        let listed: HashSet<String> = srv.list_ids(&key, "").await.into_iter().collect();
        assert_eq!(listed, created.iter().cloned().collect());
        let task = srv
            .get_task(&key, claimed["task_id"].as_str().unwrap())
            .await;
        assert_eq!(task["status"], "in_progress");
        assert_eq!(
            ts(&task, "lease_expires_at"),
            ts(&claimed, "lease_expires_at")
        );

        // Keys and orgs survive as well.
        let (status, _) = srv.get(&key, "/keys").await;
        assert_eq!(status, StatusCode::OK);
        let (status, body) = srv
            .admin(
                reqwest::Method::GET,
                &format!("/admin/orgs/{}", org.org_id),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
);

/// Number of server log lines saying that the org's actor stops or stopped.
fn actor_stop_lines(log: &str, org_id: &str) -> usize {
    log.lines()
        .filter(|line| {
            let lower = line.to_lowercase();
            line.contains(org_id)
                && !lower.contains("spawn")
                && ["stop", "idle", "shut", "evict", "exit", "terminat"]
                    .iter()
                    .any(|w| lower.contains(w))
        })
        .count()
}

/// Waits until the server logs another stop of the org's actor.
async fn wait_for_idle_stop(srv: &TestServer, org: &Org, seen_before: usize) -> usize {
    let waited = Instant::now();
    let seen = eventually(
        Duration::from_secs(20),
        "the idle org actor to stop (server log)",
        || async {
            let n = actor_stop_lines(&srv.server_log(), &org.org_id);
            (n > seen_before).then_some(n)
        },
    )
    .await;
    eprintln!("actor stop logged after {:?}", waited.elapsed());
    seen
}

backend_tests!(
    idle_org_actor_resumes_with_correct_state,
    |backend: Backend| async move {
        let srv = TestServer::builder(backend).idle_secs(1).start().await;
        let org = srv.create_org("dev").await;
        let key = org.owner_key.clone();
        let results = srv
            .create_tasks(
                &key,
                json!([
                    { "title": "short lease", "priority": 1 },
                    { "title": "waiting", "priority": 2 },
                    { "title": "done", "priority": 4, "assignee": org.owner_email },
                ]),
            )
            .await;
        let [short, waiting, done] = [0, 1, 2].map(|i| str_field(&results[i], "task_id"));
        srv.update_ok(
            &key,
            json!({ "task_id": done, "status": "completed", "note": "n", "output": { "r": 1 } }),
        )
        .await;
        let short_claim = srv
            .claim(
                &key,
                json!({ "lease_seconds": 2, "include_context": false }),
            )
            .await
            .expect("short lease");
        assert_eq!(short_claim["task_id"], short.as_str());

        // The actor may stay up while it holds a lease; once that has run out
        // and nothing else happens, it stops.
        let stops = wait_for_idle_stop(&srv, &org, 0).await;

        let t = srv.get_task(&key, &short).await;
        assert_eq!(t["status"], "pending", "{t}");
        assert_eq!(history(&t).last().unwrap()["note"], "lease expired");
        let t = srv.get_task(&key, &done).await;
        assert_eq!(t["status"], "completed");
        assert_eq!(t["output"], json!({ "r": 1 }));
        assert_eq!(history(&t).len(), 2);
        assert_eq!(srv.status_of(&key, &waiting).await, "pending");

        // The revived actor runs the queue in order and enforces new leases.
        let claimed = srv
            .claim(
                &key,
                json!({ "lease_seconds": 600, "include_context": false }),
            )
            .await
            .expect("short lease again");
        assert_eq!(claimed["task_id"], short.as_str());
        let error = srv
            .update_item_error(
                &key,
                json!({ "task_id": short, "lease_id": short_claim["lease_id"], "title": "late" }),
            )
            .await;
        assert_eq!(error, "lease lost");
        srv.update_ok(
        &key,
        json!({ "task_id": short, "lease_id": claimed["lease_id"], "status": "completed", "note": "ok" }),
    )
    .await;
        let later = srv.new_task(&key, "written between stops").await;

        // A second idle stop loses nothing either.
        wait_for_idle_stop(&srv, &org, stops).await;
        let t = srv.get_task(&key, &short).await;
        assert_eq!(t["status"], "completed");
        assert_eq!(t["title"], "short lease");
        assert_eq!(
            srv.get_task(&key, &later).await["title"],
            "written between stops"
        );
        let next = srv.claim(&key, json!({})).await.expect("next");
        assert_eq!(next["task_id"], waiting.as_str());
        let next = srv.claim(&key, json!({})).await.expect("next");
        assert_eq!(next["task_id"], later.as_str());
        assert!(srv.claim(&key, json!({})).await.is_none());
    }
);

backend_tests!(
    sigterm_under_load_keeps_every_acknowledged_write,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let srv = Arc::new(srv);
        let acked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let mut writers = tokio::task::JoinSet::new();
        for w in 0..4 {
            let srv = srv.clone();
            let key = org.owner_key.clone();
            let acked = acked.clone();
            writers.spawn(async move {
                for i in 0..5000 {
                    let body = json!({ "tasks": [{ "title": format!("w{w}-{i}") }] });
                    match srv.try_post(&key, "/tasks", body).await {
                        Ok((StatusCode::CREATED, body)) => {
                            let id = str_field(&body["results"][0], "task_id");
                            acked.lock().unwrap().push(id);
                        }
                        // Refused or cut off by the shutdown: not acknowledged.
                        _ => return,
                    }
                }
                panic!("the server kept accepting writes long after SIGTERM");
            });
        }
        eventually(
            Duration::from_secs(30),
            "writes to be acknowledged",
            || async { (acked.lock().unwrap().len() >= 20).then_some(()) },
        )
        .await;
        srv.signal_term();
        while let Some(joined) = writers.join_next().await {
            joined.expect("writer panicked");
        }
        let mut srv = Arc::try_unwrap(srv).unwrap_or_else(|_| panic!("server handle still shared"));
        let status = srv.wait_exit().await;
        assert!(status.success(), "exit status after SIGTERM: {status:?}");

        srv.start_again().await;
        let acked = acked.lock().unwrap().clone();
        let listed: HashSet<String> = srv.list_ids(&org.owner_key, "").await.into_iter().collect();
        let lost: Vec<&String> = acked.iter().filter(|id| !listed.contains(*id)).collect();
        assert!(
            lost.is_empty(),
            "{} of {} acknowledged tasks lost: {lost:?}",
            lost.len(),
            acked.len()
        );
    }
);

backend_tests!(
    concurrent_creates_of_one_client_id_admit_one,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let id = new_uuid();
        let srv = Arc::new(srv);
        let mut set = tokio::task::JoinSet::new();
        for i in 0..10 {
            let srv = srv.clone();
            let key = org.owner_key.clone();
            let id = id.clone();
            set.spawn(async move {
                let title = format!("contender {i}");
                let (status, body) = srv
                    .post(
                        &key,
                        "/tasks",
                        json!({ "tasks": [{ "task_id": id, "title": title }] }),
                    )
                    .await;
                (status, body, title)
            });
        }
        let mut winners = Vec::new();
        while let Some(joined) = set.join_next().await {
            let (status, body, title) = joined.expect("creator panicked");
            match status {
                StatusCode::CREATED => winners.push(title),
                StatusCode::CONFLICT => {
                    assert_eq!(body["error"], "task_id already exists");
                    assert_eq!(body["task_id"], id.as_str());
                }
                other => panic!("unexpected {other}: {body}"),
            }
        }
        assert_eq!(winners.len(), 1, "winners: {winners:?}");
        let task = srv.get_task(&org.owner_key, &id).await;
        assert_eq!(task["title"], winners[0].as_str());
        assert_eq!(history(&task).len(), 1);
        assert_eq!(srv.list_all(&org.owner_key, "").await.len(), 1);
    }
);

/// After a graceful stop the SQLite file holds everything on its own: no
/// write-ahead log is left beside it, and a copy of the file alone (what
/// an operator backs up once the server is down) has every task and its
/// last state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_leaves_the_database_file_whole() {
    let mut srv = TestServer::start(Backend::Sqlite).await;
    let (_, created, claimed) = stop_with_one_claimed(&mut srv, 5).await;
    let db = srv.sqlite_path();
    let wal = db.with_file_name("taskq.db-wal");
    assert!(
        !wal.exists(),
        "{} is left after a graceful stop",
        wal.display()
    );

    let copy = srv.dir().join("backup.db");
    std::fs::copy(&db, &copy).unwrap();
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&copy)
        .read_only(true);
    let mut conn: sqlx::SqliteConnection = sqlx::Connection::connect_with(&options).await.unwrap();
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT task_id, status FROM tasks")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    let stored: HashSet<String> = rows.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(stored, created.iter().cloned().collect());
    let claimed_id = claimed["task_id"].as_str().unwrap();
    assert!(
        rows.iter()
            .any(|(id, status)| id == claimed_id && status == "in_progress"),
        "{rows:?}"
    );
}

/// A SIGTERM sent the moment the server prints its readiness line is a
/// graceful stop, not a kill: the handler is in place before the line.
/// (A supervisor that stops a service right after starting it, as a
/// failed deploy does, must not lose the shutdown's flush.) The window
/// was narrow (a round in about 60 lost the race), so the start and the
/// signal are repeated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_right_after_readiness_stops_gracefully() {
    let mut srv = TestServer::start(Backend::Sqlite).await;
    for round in 0..100 {
        let status = srv.stop().await;
        let log = srv.server_log();
        assert!(
            status.success(),
            "round {round}: SIGTERM right after readiness gave {status:?}. stderr:\n{log}"
        );
        let graceful = log
            .matches("shutting down: no new requests, finishing in-flight ones")
            .count();
        assert_eq!(graceful, round + 1, "graceful stops logged:\n{log}");
        srv.start_again().await;
    }
}

/// The migration files of `backend`'s folder.
fn migration_files(backend: Backend) -> usize {
    let folder = match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(folder);
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "sql")
        })
        .count()
}

backend_tests!(
    the_log_names_the_migrations_a_start_applies,
    |backend: Backend| async move {
        let mut srv = TestServer::start(backend).await;
        let log = srv.server_log();
        let applying: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("applying database migrations"))
            .collect();
        assert_eq!(applying.len(), 1, "{log}");
        let count = format!("count={}", migration_files(backend));
        assert!(applying[0].contains(&count), "{}", applying[0]);
        assert!(applying[0].contains("0001 init"), "{}", applying[0]);
        let applied: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("database migrations applied"))
            .collect();
        assert_eq!(applied.len(), 1, "{log}");
        assert!(applied[0].contains(&count), "{}", applied[0]);
        assert!(applied[0].contains("elapsed_ms="), "{}", applied[0]);

        // A start on a database that has them all applies none, and the
        // log says nothing of migrations.
        srv.restart().await;
        let log = srv.server_log();
        assert_eq!(
            log.matches("applying database migrations").count(),
            1,
            "{log}"
        );
        assert_eq!(
            log.matches("database migrations applied").count(),
            1,
            "{log}"
        );
    }
);
