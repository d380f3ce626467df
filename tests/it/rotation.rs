//! Master-key rotation: through the operator API while agents keep working,
//! killed with `kill -9` in the middle and finished after a restart, then
//! again with the server stopped; a tampered data-key wrap, which makes its
//! org answer 500 rather than serve anything; and a wrap whose master key is
//! lost, which does not keep the server from starting, even when it is the
//! feedback org's.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use reqwest::Method;
use tokio::sync::watch;

/// Each managed org's id and the master key its data-key wrap names.
async fn wraps(srv: &TestServer) -> Vec<(String, Option<String>)> {
    let sql =
        "SELECT org_id, master_key_id FROM orgs WHERE wrapped_dek IS NOT NULL ORDER BY org_id";
    match srv.open_db().await {
        Db::Sqlite(mut conn) => sqlx::query_as(sql).fetch_all(&mut conn).await,
        Db::Postgres(mut conn) => sqlx::query_as(sql).fetch_all(&mut conn).await,
    }
    .expect("read the wraps")
}

/// A new master key: base64 of 32 random bytes.
fn random_key() -> String {
    use base64::Engine as _;
    let mut key = uuid::Uuid::new_v4().as_bytes().to_vec();
    key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    base64::engine::general_purpose::STANDARD.encode(key)
}

fn new_key_file(srv: &TestServer, name: &str) -> (std::path::PathBuf, String) {
    let text = random_key();
    let path = srv.dir().join(name);
    std::fs::write(&path, &text).expect("write the new key file");
    (path, text)
}

/// Every task of every org opens: a full listing answers 200 with `count`
/// tasks.
async fn assert_all_open(srv: &TestServer, orgs: &[(Org, usize)]) {
    for (org, count) in orgs {
        let tasks = srv.list_all(&org.owner_key, "full=true").await;
        assert!(tasks.len() >= *count, "{} of {count} tasks", tasks.len());
        assert!(tasks.iter().all(|t| t["title"].is_string()), "{tasks:?}");
    }
}

/// Agents' stop switch, the failures they saw, and their handles (each
/// answers how many requests succeeded).
type Load = (
    watch::Sender<bool>,
    Arc<Mutex<Vec<String>>>,
    Vec<tokio::task::JoinHandle<u64>>,
);

/// Agents that keep creating and reading tasks in `orgs` until stopped,
/// noting every answer that is not a success.
fn start_load(srv: &TestServer, orgs: &[(Org, usize)]) -> Load {
    let (stop, stopped) = watch::channel(false);
    let failures = Arc::new(Mutex::new(Vec::new()));
    let http = reqwest::Client::new();
    let mut agents = Vec::new();
    for (org, _) in orgs {
        let (http, base, key, stopped, failures) = (
            http.clone(),
            srv.base_url.clone(),
            org.owner_key.clone(),
            stopped.clone(),
            failures.clone(),
        );
        agents.push(tokio::spawn(async move {
            let mut done = 0;
            while !*stopped.borrow() {
                let create = http
                    .post(format!("{base}/tasks"))
                    .header("x-api-key", &key)
                    .json(&json!({ "tasks": [{ "title": "during the rotation" }] }))
                    .send()
                    .await;
                let list = http
                    .get(format!("{base}/tasks?full=true&limit=5"))
                    .header("x-api-key", &key)
                    .send()
                    .await;
                for answer in [create, list] {
                    match answer {
                        Ok(r) if r.status().is_success() => done += 1,
                        Ok(r) => {
                            let status = r.status();
                            let text = r.text().await.unwrap_or_default();
                            failures.lock().unwrap().push(format!("{status}: {text}"));
                        }
                        // The server is killed on purpose; after that the
                        // agents are stopped before anything is counted.
                        Err(e) if *stopped.borrow() => drop(e),
                        Err(e) => failures.lock().unwrap().push(e.to_string()),
                    }
                }
            }
            done
        }));
    }
    (stop, failures, agents)
}

fn run_cli(srv: &TestServer, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_taskq"))
        .args(args)
        .current_dir(srv.dir())
        .env("TASKQ_DATABASE_URL", &srv.database_url)
        .env("TASKQ_ADMIN_TOKEN", &srv.admin_token)
        .env_remove("TASKQ_MASTER_KEY")
        .env_remove("TASKQ_MASTER_KEY_PREVIOUS")
        .output()
        .expect("run taskq keys")
}

backend_tests!(
    master_key_rotation_survives_kill_9_and_keeps_serving,
    |backend: Backend| async move {
        let mut srv = TestServer::builder(backend)
            .env("TASKQ_TEST_REWRAP_PAUSE_AFTER", "3")
            .start()
            .await;
        let mut orgs = Vec::new();
        for i in 0..8 {
            let org = srv.create_org("dev").await;
            for j in 0..3 {
                srv.new_task(&org.owner_key, &format!("org {i} task {j}"))
                    .await;
            }
            orgs.push((org, 3));
        }
        let before = wraps(&srv).await;
        let old_id = before[0].1.clone().expect("a wrap names its master key");
        assert!(before
            .iter()
            .all(|(_, id)| id.as_deref() == Some(old_id.as_str())));
        let managed = before.len();

        // The rotation starts under load and stops after three wraps (the
        // test hook); then the server is killed.
        let (load_stop, failures, agents) = start_load(&srv, &orgs);
        let (new_file, new_key) = new_key_file(&srv, "new.key");
        let rotation = {
            let http = reqwest::Client::new();
            let url = format!("{}/admin/master-key/rotate", srv.base_url);
            let token = srv.admin_token.clone();
            tokio::spawn(async move {
                let _ = http
                    .post(url)
                    .bearer_auth(token)
                    .json(&json!({ "new_key": new_key }))
                    .send()
                    .await;
            })
        };
        let moved = eventually(Duration::from_secs(30), "three wraps moved", || async {
            let now = wraps(&srv).await;
            let moved: Vec<_> = now
                .iter()
                .filter(|(_, id)| id.as_deref() != Some(old_id.as_str()))
                .cloned()
                .collect();
            (moved.len() >= 3).then_some(moved)
        })
        .await;
        assert_eq!(moved.len(), 3, "the rotation is paused in the middle");
        let new_id = moved[0].1.clone().expect("a wrap names its master key");
        // Keep the load going across the rotation for a moment.
        eventually(
            Duration::from_secs(10),
            "requests served mid-rotation",
            || async { (failures.lock().unwrap().is_empty()).then_some(()) },
        )
        .await;
        // Killed with requests in flight: their transport errors are expected.
        load_stop.send_replace(true);
        srv.kill9().await;
        rotation.abort();
        let mut served = 0;
        for agent in agents {
            served += agent.await.expect("agent");
        }
        assert!(served > 0, "the agents were served while the rotation ran");
        assert!(
            failures.lock().unwrap().is_empty(),
            "requests failed during the rotation: {:?}",
            failures.lock().unwrap()
        );

        // Half rotated: both keys are held after the restart, and every
        // task opens.
        srv.set_env("TASKQ_TEST_REWRAP_PAUSE_AFTER", None);
        srv.start_again().await;
        assert!(srv.dir().join("taskq-data/master.key.previous").exists());
        assert_all_open(&srv, &orgs).await;

        // Finish through the CLI and the running server, under load again.
        let (load_stop, failures, agents) = start_load(&srv, &orgs);
        let out = run_cli(
            &srv,
            &[
                "keys",
                "rotate-master",
                "--new-key-file",
                new_file.to_str().unwrap(),
                "--url",
                &srv.base_url,
            ],
        );
        load_stop.send_replace(true);
        for agent in agents {
            agent.await.expect("agent");
        }
        assert!(
            out.status.success(),
            "rotate-master --url: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let answer: Value = serde_json::from_slice(&out.stdout).expect("JSON answer");
        assert_eq!(answer["master_key_id"], new_id.as_str(), "{answer}");
        assert_eq!(answer["previous_keys_retired"], true, "{answer}");
        assert_eq!(answer["rewrapped"], json!(managed - 3), "{answer}");
        assert!(
            failures.lock().unwrap().is_empty(),
            "{:?}",
            failures.lock().unwrap()
        );
        let after = wraps(&srv).await;
        assert!(
            after
                .iter()
                .all(|(_, id)| id.as_deref() == Some(new_id.as_str())),
            "{after:?}"
        );
        assert!(!srv.dir().join("taskq-data/master.key.previous").exists());
        assert_all_open(&srv, &orgs).await;

        // Again with the server stopped; then it starts with the newest key
        // alone and everything still opens.
        srv.stop().await;
        let (third_file, _) = new_key_file(&srv, "third.key");
        let out = run_cli(
            &srv,
            &[
                "keys",
                "rotate-master",
                "--new-key-file",
                third_file.to_str().unwrap(),
            ],
        );
        assert!(
            out.status.success(),
            "rotate-master offline: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let answer: Value = serde_json::from_slice(&out.stdout).expect("JSON answer");
        assert_eq!(answer["rewrapped"], json!(managed), "{answer}");
        let third_id = answer["master_key_id"].as_str().expect("id").to_owned();
        assert_ne!(third_id, new_id);
        srv.start_again().await;
        assert!(!srv.dir().join("taskq-data/master.key.previous").exists());
        assert!(wraps(&srv)
            .await
            .iter()
            .all(|(_, id)| id.as_deref() == Some(third_id.as_str())));
        assert_all_open(&srv, &orgs).await;
    }
);

backend_tests!(
    a_tampered_wrap_answers_500_and_serves_nothing,
    |mut srv| async move {
        let victim = srv.create_org("dev").await;
        let other = srv.create_org("dev").await;
        let secret = unique("secret title");
        srv.new_task(&victim.owner_key, &secret).await;
        srv.new_task(&other.owner_key, "fine").await;

        // The victim's wrap is replaced by the other org's: a valid wrap by the
        // right master key, bound to the wrong org.
        let sql = "UPDATE orgs SET wrapped_dek = (SELECT o2.wrapped_dek FROM orgs o2 WHERE o2.org_id = ?) WHERE org_id = ?";
        let changed = srv.execute(sql, &[&other.org_id, &victim.org_id]).await;
        assert_eq!(changed, 1);
        srv.restart().await;

        for (method, path) in [(Method::GET, "/tasks?full=true"), (Method::GET, "/tasks")] {
            let (status, text) = srv
                .raw(method, path, &[("x-api-key", &victim.owner_key)], None)
                .await;
            assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{text}");
            let body: Value = serde_json::from_str(&text).expect("a JSON error");
            assert!(body["error"].is_string(), "{body}");
            assert!(!text.contains(&secret), "{text}");
        }
        let (status, body) = srv
            .post(
                &victim.owner_key,
                "/tasks",
                json!({ "tasks": [{ "title": "t" }] }),
            )
            .await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        // The other org is untouched.
        assert_eq!(srv.list_all(&other.owner_key, "").await.len(), 1);
    }
);

backend_tests!(
    an_org_whose_master_key_is_lost_does_not_keep_the_server_from_starting,
    |mut srv| async move {
        let victim = srv.create_org("dev").await;
        let other = srv.create_org("dev").await;
        let secret = unique("secret title");
        srv.new_task(&victim.owner_key, &secret).await;
        // A lease makes the server load the victim's actor as it starts.
        srv.claim(&victim.owner_key, json!({}))
            .await
            .expect("the victim holds a lease");
        srv.new_task(&other.owner_key, "fine").await;

        // The victim's wrap names a master key nobody holds.
        let sql = "UPDATE orgs SET master_key_id = 'ffffffffffffffff' WHERE org_id = ?";
        let changed = srv.execute(sql, &[&victim.org_id]).await;
        assert_eq!(changed, 1);
        srv.restart().await;

        let log = srv.server_log();
        assert!(
            log.contains("ffffffffffffffff") && log.contains("does not hold"),
            "the start names the missing key: {log}"
        );
        assert!(
            log.lines()
                .any(|l| l.contains("did not start") && l.contains("ffffffffffffffff")),
            "the org that did not start is logged with its cause: {log}"
        );
        let (status, text) = srv
            .raw(
                Method::GET,
                "/tasks?full=true",
                &[("x-api-key", &victim.owner_key)],
                None,
            )
            .await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{text}");
        assert!(!text.contains(&secret), "{text}");
        // The other org is served.
        assert_eq!(srv.list_all(&other.owner_key, "").await.len(), 1);
        srv.new_task(&other.owner_key, "after the restart").await;
        assert_eq!(srv.list_all(&other.owner_key, "").await.len(), 2);
    }
);

backend_tests!(
    a_feedback_org_whose_master_key_is_lost_does_not_keep_the_server_from_starting,
    |mut srv| async move {
        let other = srv.create_org("dev").await;
        srv.new_task(&other.owner_key, "fine").await;
        let (status, body) = srv.admin(Method::GET, "/admin/feedback", None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let feedback_org = body["org_id"].as_str().expect("org_id").to_owned();

        // The feedback org's wrap names a master key nobody holds; the
        // other org's still opens.
        let sql = "UPDATE orgs SET master_key_id = 'ffffffffffffffff' WHERE org_id = ?";
        assert_eq!(srv.execute(sql, &[&feedback_org]).await, 1);
        srv.restart().await;

        let log = srv.server_log();
        assert!(
            log.lines()
                .any(|l| l.contains("feedback org") && l.contains("ffffffffffffffff")),
            "the start names the feedback org's missing key: {log}"
        );
        let (status, body) = srv.admin(Method::GET, "/admin/feedback", None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["org_id"], json!(feedback_org));
        // Feedback cannot be filed, and says so in a JSON error.
        let (status, body) = srv
            .post(
                &other.owner_key,
                "/feedback",
                json!({ "message": "the search is slow", "type": "bug" }),
            )
            .await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        assert!(body["error"].is_string(), "{body}");
        // Everything else is served.
        srv.new_task(&other.owner_key, "after the restart").await;
        assert_eq!(srv.list_all(&other.owner_key, "").await.len(), 2);
    }
);

/// Rotates through the operator API.
async fn rotate(srv: &TestServer, new_key: String) -> (StatusCode, Value) {
    let body = json!({ "new_key": new_key });
    srv.admin(Method::POST, "/admin/master-key/rotate", Some(body))
        .await
}

backend_tests!(
    a_rotation_the_keys_cannot_take_answers_409_with_its_reason,
    |backend: Backend| async move {
        // The operator manages the keys through the environment: the new
        // key must be among them before a rotation can make it current.
        let srv = TestServer::builder(backend)
            .env("TASKQ_MASTER_KEY", &random_key())
            .start()
            .await;
        let org = srv.create_org("dev").await;
        let (status, body) = rotate(&srv, random_key()).await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert_eq!(
            body,
            json!({ "error": "the master key comes from TASKQ_MASTER_KEY: set TASKQ_MASTER_KEY \
                to the new key and TASKQ_MASTER_KEY_PREVIOUS to the old one (or the new one \
                among TASKQ_MASTER_KEY_PREVIOUS), restart, then rotate again" })
        );
        srv.new_task(&org.owner_key, "still served").await;

        // Key files that cannot be written: one line for the operator, the
        // cause in the log, and the current key left as it was.
        let srv = TestServer::start(backend).await;
        let org = srv.create_org("dev").await;
        let task = srv.new_task(&org.owner_key, "written before").await;
        let before = wraps(&srv).await;
        std::fs::create_dir(srv.dir().join("taskq-data/master.key.previous"))
            .expect("a directory where the previous keys' file goes");
        let (_, new_key) = new_key_file(&srv, "new.key");
        let (status, body) = rotate(&srv, new_key).await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert_eq!(
            body,
            json!({ "error": "the master keys could not be written" })
        );
        let log = srv.server_log();
        assert!(
            log.lines()
                .any(|l| l.contains("master-key rotation failed")
                    && l.contains("master.key.previous")),
            "the cause is logged: {log}"
        );
        assert_eq!(wraps(&srv).await, before, "no wrap moved");
        assert_eq!(
            srv.get_task(&org.owner_key, &task).await["title"],
            "written before"
        );
    }
);

backend_tests!(
    orgs_created_while_a_rotation_runs_are_all_wrapped_by_the_new_key,
    |srv| async move {
        // Operators keep creating orgs (a data key wrapped by the current
        // master key each) while the rotation moves every wrap and drops
        // the old key: none may be left wrapped by a key the server no
        // longer holds.
        let (stop, stopped) = watch::channel(false);
        let creators: Vec<_> = (0..4)
            .map(|i| {
                let (base, token, stopped) = (
                    srv.base_url.clone(),
                    srv.admin_token.clone(),
                    stopped.clone(),
                );
                tokio::spawn(async move {
                    let http = reqwest::Client::new();
                    let mut created = 0;
                    while !*stopped.borrow() {
                        let answer = http
                            .post(format!("{base}/admin/orgs"))
                            .bearer_auth(&token)
                            .json(&json!({
                                "name": format!("during {i}.{created}"),
                                "owner_email": format!("owner{i}.{created}@example.com"),
                            }))
                            .send()
                            .await
                            .expect("POST /admin/orgs");
                        assert_eq!(answer.status(), StatusCode::CREATED);
                        created += 1;
                    }
                    created
                })
            })
            .collect();
        // Some orgs before the rotation starts, more while it runs.
        eventually(
            Duration::from_secs(20),
            "orgs are being created",
            || async { (wraps(&srv).await.len() >= 8).then_some(()) },
        )
        .await;
        let (_, new_key) = new_key_file(&srv, "new.key");
        let (status, rotated) = rotate(&srv, new_key).await;
        stop.send(true).unwrap();
        let mut created = 0;
        for creator in creators {
            created += creator.await.expect("a creator");
        }
        assert_eq!(status, StatusCode::OK, "{rotated}");
        assert_eq!(rotated["previous_keys_retired"], true, "{rotated}");
        let current = rotated["master_key_id"].as_str().expect("the new key's id");
        let wraps = wraps(&srv).await;
        assert!(
            wraps.len() >= created,
            "{} wraps, {created} orgs",
            wraps.len()
        );
        let stale: Vec<_> = wraps
            .iter()
            .filter(|(_, key)| key.as_deref() != Some(current))
            .collect();
        assert!(stale.is_empty(), "wrapped by a retired key: {stale:?}");
    }
);
