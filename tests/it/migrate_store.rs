//! `taskq migrate-store`: a stopped server's store copied SQLite to
//! PostgreSQL and back through the real binary; servers on each copy, with
//! the same master key, answer as the first did and carry on with rising
//! ids. A non-empty destination, a running server and a bad URL are
//! refused.

use crate::common::*;
use sqlx::Connection as _;

fn master_key() -> String {
    use base64::Engine as _;
    let mut bytes = [0u8; 32];
    bytes[..16].copy_from_slice(&uuid::Uuid::new_v4().into_bytes());
    bytes[16..].copy_from_slice(&uuid::Uuid::new_v4().into_bytes());
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn builder(backend: Backend, key: &str) -> Builder {
    TestServer::builder(backend)
        .env("TASKQ_MASTER_KEY", key)
        .env("TASKQ_WEBHOOKS_ALLOW_PRIVATE", "1")
}

/// Runs `taskq migrate-store`; its exit status and what it printed.
async fn migrate(from: &str, to: &str) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_taskq"))
        .args(["migrate-store", "--from", from, "--to", to])
        .env_remove("TASKQ_DATABASE_URL")
        .env("RUST_BACKTRACE", "0")
        .output()
        .await
        .expect("run taskq migrate-store");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn migrate_ok(from: &str, to: &str) -> String {
    let (ok, stdout, stderr) = migrate(from, to).await;
    assert!(ok, "migrate-store failed:\n{stdout}\n{stderr}");
    stdout
}

/// What an org holds: a member with a key of its own, tags, a webhook (its
/// secret encrypted), a schedule, and tasks with history: one claimed and
/// completed with a note and output, one claimed and held, one pending.
struct Fixture {
    org: Org,
    member_key: String,
    task_ids: Vec<String>,
}

async fn populate(srv: &TestServer) -> Fixture {
    let org = srv.create_org("pro").await;
    let key = &org.owner_key;
    let member_key = srv.add_member(&org, "agent@example.com", "user").await;
    let (_, own_key) = srv.new_key(&member_key, "second").await;
    srv.create_tags(key, json!([{ "name": "ops" }, { "name": "db" }]))
        .await;
    let (status, body) = srv
        .post(
            key,
            "/webhooks",
            json!({ "url": "http://127.0.0.1:9/hook", "events": ["*"] }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = srv
        .post(
            key,
            "/schedules",
            json!({ "name": "nightly", "cron": "0 3 * * *", "timezone": "UTC",
                "task": { "title": "nightly" } }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let done = srv
        .create_task(
            key,
            json!({ "title": "done é ✓", "description": "with history",
                "metadata": { "n": 1, "s": "x" }, "tags": ["ops"], "priority": 1 }),
        )
        .await;
    let claimed = srv
        .claim(&own_key, json!({ "lease_seconds": 3600 }))
        .await
        .expect("a task to claim");
    assert_eq!(str_field(&claimed, "task_id"), done, "{claimed}");
    srv.update_ok(
        &own_key,
        json!({ "task_id": done, "status": "completed", "note": "finished: ✓",
            "output": { "result": [1, 2, 3] } }),
    )
    .await;
    let held = srv
        .create_task(
            key,
            json!({ "title": "held", "tags": ["db"], "priority": 1 }),
        )
        .await;
    srv.claim(&own_key, json!({ "lease_seconds": 3600 }))
        .await
        .expect("a task to claim");
    let pending = srv
        .create_task(key, json!({ "title": "pending", "blocked_by": [held] }))
        .await;
    Fixture {
        org,
        member_key: own_key,
        task_ids: vec![done, held, pending],
    }
}

/// The answers that must read the same on every copy, as raw bodies.
async fn answers(srv: &TestServer, fx: &Fixture) -> Vec<(String, String)> {
    let key = &fx.org.owner_key;
    let mut out = Vec::new();
    for path in [
        "/tasks?limit=200",
        "/tags",
        "/members",
        "/webhooks",
        "/schedules",
    ] {
        let (status, body) = srv
            .raw(reqwest::Method::GET, path, &[("x-api-key", key)], None)
            .await;
        assert_eq!(status, StatusCode::OK, "GET {path}: {body}");
        out.push((format!("GET {path}"), body));
    }
    let mut gets = vec![json!({ "task_ids": fx.task_ids })];
    gets.extend(fx.task_ids.iter().map(|id| json!({ "task_ids": [id] })));
    for get in gets {
        let (status, body) = srv.post_raw(key, "/tasks/get", &get.to_string()).await;
        assert_eq!(status, StatusCode::OK, "POST /tasks/get {get}: {body}");
        out.push((format!("POST /tasks/get {get}"), body));
    }
    out
}

fn assert_same(before: &[(String, String)], after: &[(String, String)]) {
    assert_eq!(before.len(), after.len());
    for ((what, a), (_, b)) in before.iter().zip(after) {
        assert_eq!(a, b, "{what} differs after the copy");
    }
}

/// The largest event id the server's store holds.
async fn max_event_id(srv: &TestServer) -> i64 {
    let sql = "SELECT CAST(MAX(event_id) AS BIGINT) FROM task_events";
    let max: Option<i64> = match srv.open_db().await {
        Db::Sqlite(mut c) => sqlx::query_scalar(sql).fetch_one(&mut c).await,
        Db::Postgres(mut c) => sqlx::query_scalar(sql).fetch_one(&mut c).await,
    }
    .expect("max event id");
    max.expect("events")
}

/// Every table's rows, by table.
async fn row_counts(srv: &TestServer) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    match srv.open_db().await {
        Db::Sqlite(mut c) => {
            let tables: Vec<String> = sqlx::query_scalar(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
            )
            .fetch_all(&mut c)
            .await
            .unwrap();
            for t in tables {
                let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM \"{t}\""))
                    .fetch_one(&mut c)
                    .await
                    .unwrap();
                out.push((t, n));
            }
            // Closed, not dropped: the close checkpoints the WAL into the
            // file before the caller looks at it.
            c.close().await.expect("close");
        }
        Db::Postgres(mut c) => {
            let tables: Vec<String> = sqlx::query_scalar(
                "SELECT table_name::text FROM information_schema.tables \
                 WHERE table_schema = current_schema() ORDER BY 1",
            )
            .fetch_all(&mut c)
            .await
            .unwrap();
            for t in tables {
                let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM \"{t}\""))
                    .fetch_one(&mut c)
                    .await
                    .unwrap();
                out.push((t, n));
            }
        }
    }
    out
}

/// A server on the copy: the same keys authenticate, the answers are the
/// same, and a new task is created and claimed with events above every
/// copied one. Answers what it reads afterwards, the new task included.
async fn check_copy(
    srv: &TestServer,
    fx: &mut Fixture,
    before: &[(String, String)],
    copied_max: i64,
) -> Vec<(String, String)> {
    assert_same(before, &answers(srv, fx).await);
    let (status, body) = srv.get(&fx.member_key, "/me").await;
    assert_eq!(status, StatusCode::OK, "the member's own key: {body}");
    let id = srv
        .create_task(&fx.org.owner_key, json!({ "title": "after the move" }))
        .await;
    let claimed = srv
        .claim(
            &fx.member_key,
            json!({ "lease_seconds": 3600, "count": 25 }),
        )
        .await
        .expect("the new task to claim");
    assert!(claimed.to_string().contains(&id), "{claimed}");
    let task = srv.get_task(&fx.org.owner_key, &id).await;
    assert_eq!(history(&task).len(), 2, "{task}");
    assert!(
        max_event_id(srv).await > copied_max,
        "new events continue above the copied ones"
    );
    fx.task_ids.push(id);
    answers(srv, fx).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn a_store_moves_to_postgresql_and_back_unchanged() {
    let key = master_key();
    let mut first = builder(Backend::Sqlite, &key).start().await;
    let mut fx = populate(&first).await;
    let before = answers(&first, &fx).await;
    let sqlite_max = max_event_id(&first).await;
    first.stop().await;

    let pg = PostgresDatabase::create().await;
    let out = migrate_ok(&first.database_url, &pg.url).await;
    assert!(out.contains("task_events"), "{out}");
    assert!(out.contains("every table's count matches"), "{out}");

    let mut second = builder(Backend::Postgres, &key)
        .on_database(&pg.url)
        .start()
        .await;
    let moved = check_copy(&second, &mut fx, &before, sqlite_max).await;
    let pg_max = max_event_id(&second).await;
    second.stop().await;

    // Into a store that holds rows: refused, and nothing written.
    let counts = row_counts(&second).await;
    let (ok, _, stderr) = migrate(&first.database_url, &pg.url).await;
    assert!(!ok, "a second copy into the same store");
    assert!(stderr.contains("the destination is not empty"), "{stderr}");
    assert_eq!(row_counts(&second).await, counts);

    let back_dir = tempfile::tempdir().expect("tempdir");
    let back = format!("sqlite://{}", back_dir.path().join("back.db").display());
    migrate_ok(&pg.url, &back).await;
    let third = builder(Backend::Sqlite, &key)
        .on_database(&back)
        .start()
        .await;
    check_copy(&third, &mut fx, &moved, pg_max).await;
}

backend_tests!(
    a_store_in_use_or_holding_rows_is_refused_and_left_unchanged,
    |backend: Backend| async move {
        let key = master_key();
        let scratch = tempfile::tempdir().expect("tempdir");
        let elsewhere = format!("sqlite://{}", scratch.path().join("new.db").display());
        let mut source = builder(Backend::Sqlite, &key).start().await;
        let org = source.create_org("pro").await;
        source.new_task(&org.owner_key, "a").await;
        let (ok, _, stderr) = migrate(&source.database_url, &elsewhere).await;
        assert!(!ok);
        assert!(
            stderr.contains("a taskq server is running on the source"),
            "{stderr}"
        );
        source.stop().await;

        let mut destination = builder(backend, &key).start().await;
        destination.create_org("pro").await;
        let (ok, _, stderr) = match backend {
            // A PostgreSQL store's node is live while it heartbeats.
            Backend::Postgres => migrate(&destination.database_url, &elsewhere).await,
            Backend::Sqlite => migrate(&source.database_url, &destination.database_url).await,
        };
        assert!(!ok);
        assert!(
            stderr.contains("a taskq server is running on the"),
            "{stderr}"
        );
        destination.stop().await;

        let counts = row_counts(&destination).await;
        let file = (backend == Backend::Sqlite)
            .then(|| std::fs::read(destination.sqlite_path()).expect("the destination's file"));
        let (ok, _, stderr) = migrate(&source.database_url, &destination.database_url).await;
        assert!(!ok);
        assert!(stderr.contains("the destination is not empty"), "{stderr}");
        assert!(stderr.contains("orgs"), "{stderr}");
        assert_eq!(row_counts(&destination).await, counts);
        if let Some(file) = file {
            assert_eq!(
                std::fs::read(destination.sqlite_path()).expect("the destination's file"),
                file,
                "the destination's file changed"
            );
        }
    }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let new = format!("sqlite://{}", dir.path().join("new.db").display());
    let missing = dir.path().join("missing.db").display().to_string();
    for (from, to, says) in [
        (
            "mysql://h/db",
            new.as_str(),
            "`mysql://h/db` is not a store URL",
        ),
        (missing.as_str(), new.as_str(), "no SQLite store at"),
        ("sqlite::memory:", new.as_str(), "is not a store URL"),
    ] {
        let (ok, _, stderr) = migrate(from, to).await;
        assert!(!ok, "{from} -> {to}");
        assert!(stderr.contains(says), "{from} -> {to}: {stderr}");
        assert!(!stderr.contains("secret"), "{stderr}");
    }
    let mut srv = TestServer::start(Backend::Sqlite).await;
    srv.stop().await;
    let (ok, _, stderr) = migrate(&srv.database_url, "postgres://u:secret@127.0.0.1:1/db").await;
    assert!(!ok);
    assert!(stderr.contains("cannot open the destination"), "{stderr}");
    assert!(
        stderr.contains("postgres://u:***@127.0.0.1:1/db"),
        "{stderr}"
    );
    assert!(!stderr.contains("secret"), "{stderr}");
}
