//! Outbound webhooks (CONTRACT §7), end to end: endpoints managed through
//! the API, events of every transition delivered to a receiver on
//! loopback that verifies each signature with the `standardwebhooks`
//! package from PyPI (`tests/webhooks/receiver.py`), retries, a 410,
//! secret rotation, `kill -9` under load, and the refusals.
//!
//! The receiver runs with the Python `TASKQ_TEST_WEBHOOKS_PYTHON` names
//! (`.ci/run` installs one); the tests that need it are skipped with a
//! note otherwise.

mod support;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use support::*;

backend_tests!(
    every_transition_arrives_signed_and_without_content,
    needs(
        "webhooks_python",
        "needs TASKQ_TEST_WEBHOOKS_PYTHON (a Python with standardwebhooks)"
    ),
    |backend: Backend| async move {
        let Watched {
            rx,
            srv,
            org,
            endpoint,
        } = Watched::start(backend, "pro", ("ok", "all"), json!(["*"])).await;
        let key = &org.owner_key;

        let a = srv
            .create_task(
                key,
                json!({ "title": "secret title a", "description": "hidden" }),
            )
            .await;
        let created = srv
            .create_tasks(key, json!([{ "title": "secret b", "blocked_by": [a] }]))
            .await;
        let b = str_field(&created[0], "task_id");
        let claimed = srv.claim(key, json!({})).await.expect("a to claim");
        assert_eq!(str_field(&claimed, "task_id"), a);
        srv.update_ok(
            key,
            json!({ "task_id": a, "status": "completed", "output": { "secret": 1 }, "note": "secret" }),
        )
        .await;
        srv.claim(key, json!({})).await.expect("b to claim");
        srv.update_ok(
            key,
            json!({ "task_id": b, "status": "failed", "note": "secret note" }),
        )
        .await;
        let c = srv
            .create_task(key, json!({ "title": "c", "assignee": org.owner_email }))
            .await;
        srv.update_ok(
            key,
            json!({ "task_id": c, "status": "canceled", "note": "n" }),
        )
        .await;
        let d = srv.create_task(key, json!({ "title": "d" })).await;
        srv.claim(key, json!({ "lease_seconds": 1 }))
            .await
            .expect("d to claim");

        let got = rx
            .until("all", "every transition's events", |got| {
                has(got, "task.lease_expired", &d, "pending")
                    && has(got, "task.canceled", &c, "canceled")
                    && has(got, "task.failed", &b, "failed")
            })
            .await;
        for (kind, task, to) in [
            ("task.created", a.as_str(), "pending"),
            ("task.created", b.as_str(), "blocked"),
            ("task.claimed", a.as_str(), "in_progress"),
            ("task.completed", a.as_str(), "completed"),
            ("task.unblocked", b.as_str(), "pending"),
            ("task.claimed", b.as_str(), "in_progress"),
            ("task.failed", b.as_str(), "failed"),
            ("task.canceled", c.as_str(), "canceled"),
            ("task.claimed", d.as_str(), "in_progress"),
            ("task.lease_expired", d.as_str(), "pending"),
            ("task.status_changed", a.as_str(), "completed"),
            ("task.status_changed", d.as_str(), "pending"),
        ] {
            assert!(has(&got, kind, task, to), "{kind} {task} -> {to}: {got:#?}");
        }
        for delivery in &got {
            assert_eq!(delivery["verified"], json!([0]), "{delivery}");
            let body = &delivery["body"];
            assert_eq!(body["data"]["org_id"], org.org_id.as_str(), "{body}");
            let data: BTreeSet<&str> = body["data"]
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(
                data,
                BTreeSet::from(["org_id", "task_id", "from_status", "to_status", "agent_id"]),
                "{body}"
            );
            assert!(
                !body.to_string().contains("secret"),
                "content leaked: {body}"
            );
            ts(body, "timestamp");
        }
        // Per task, in the order the changes were made.
        let of_a: Vec<String> = events(&got)
            .into_iter()
            .filter(|(t, id, _, _)| id == &a && t == "task.status_changed")
            .map(|(_, _, _, to)| to)
            .collect();
        assert_eq!(of_a, ["pending", "in_progress", "completed"]);
        let created_a = events(&got)
            .into_iter()
            .find(|(t, id, _, _)| t == "task.created" && id == &a)
            .unwrap();
        assert_eq!(created_a.2, Value::Null, "a creation comes from no status");

        // The delivery log, newest first, and a test event.
        let id = str_field(&endpoint, "webhook_id");
        let (status, log) = srv.get(key, &format!("/webhooks/{id}/deliveries")).await;
        assert_eq!(status, StatusCode::OK, "{log}");
        let log = log["deliveries"].as_array().unwrap().clone();
        assert!(!log.is_empty());
        assert!(log.windows(2).all(|w| ts(&w[0], "at") >= ts(&w[1], "at")));
        assert_eq!(log[0]["status_code"], 200);
        let (status, queued) = srv
            .post(key, &format!("/webhooks/{id}/test"), json!({}))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
        let test_id = str_field(&queued, "event_id");
        rx.until("all", "the test event", |got| {
            got.iter().any(|d| d["id"] == test_id.as_str())
        })
        .await;
    }
);

backend_tests!(
    a_failed_delivery_comes_again_with_the_same_id_after_five_seconds,
    needs(
        "webhooks_python",
        "needs TASKQ_TEST_WEBHOOKS_PYTHON (a Python with standardwebhooks)"
    ),
    |backend: Backend| async move {
        let Watched {
            rx,
            srv,
            org,
            endpoint,
        } = Watched::start(backend, "dev", ("flaky", "f"), json!(["task.created"])).await;
        let key = &org.owner_key;
        srv.new_task(key, "retried").await;
        let got = rx
            .until("f", "a 500 then a 200", |got| got.len() >= 2)
            .await;
        assert_eq!(got[0]["id"], got[1]["id"], "{got:#?}");
        assert_eq!(
            (got[0]["status"].as_u64(), got[1]["status"].as_u64()),
            (Some(500), Some(200))
        );
        let gap = got[1]["timestamp"]
            .as_str()
            .unwrap()
            .parse::<i64>()
            .unwrap()
            - got[0]["timestamp"]
                .as_str()
                .unwrap()
                .parse::<i64>()
                .unwrap();
        assert!((4..=7).contains(&gap), "retried after {gap} s");
        assert!(got.iter().all(|d| d["verified"] == json!([0])));

        let id = str_field(&endpoint, "webhook_id");
        let log = eventually(WAIT, "both attempts logged", || async {
            let (_, log) = srv.get(key, &format!("/webhooks/{id}/deliveries")).await;
            let log = log["deliveries"].as_array().cloned().unwrap_or_default();
            (log.len() == 2).then_some(log)
        })
        .await;
        assert_eq!(
            (log[0]["attempt"].as_i64(), log[1]["attempt"].as_i64()),
            (Some(2), Some(1))
        );
        assert_eq!(log[1]["status_code"], 500);
        assert!(log[1]["next_attempt_at"].is_string());
        assert!(log[1]["error"].is_string());
        assert_eq!(log[0]["status_code"], 200);
        assert_eq!(log[0]["event_id"], log[1]["event_id"]);
    }
);

backend_tests!(
    a_delivery_follows_its_commit_and_an_idle_worker_reads_nothing,
    needs(
        "webhooks_python",
        "needs TASKQ_TEST_WEBHOOKS_PYTHON (a Python with standardwebhooks)"
    ),
    |backend: Backend| async move {
        let Watched { rx, srv, org, .. } =
            Watched::start(backend, "dev", ("ok", "idle"), json!(["task.created"])).await;
        let key = &org.owner_key;
        let first = srv.new_task(key, "first").await;
        rx.until("idle", "the first creation", |got| {
            has(got, "task.created", &first, "pending")
        })
        .await;
        // Spells longer than a poll's one second: a long poll of another
        // org's empty queue, which commits nothing.
        let other = srv.create_org("dev").await;
        let idle = || async {
            let claimed = srv
                .claim(&other.owner_key, json!({ "wait_seconds": 2 }))
                .await;
            assert!(claimed.is_none(), "{claimed:?}");
        };
        // Once the first delivery has settled and the worker has looked
        // once more, a whole spell passes without a read; a worker that
        // polled would read in every one.
        let before = eventually(
            WAIT,
            "a spell in which the idle worker reads nothing",
            || async {
                let before = delivery_reads(&srv).await;
                idle().await;
                (delivery_reads(&srv).await == before).then_some(before)
            },
        )
        .await;
        let second = srv.new_task(key, "second").await;
        rx.until("idle", "the second creation, woken by its commit", |got| {
            has(got, "task.created", &second, "pending")
        })
        .await;
        assert!(delivery_reads(&srv).await > before);
    }
);

/// How many reads of the store the delivery worker has made.
async fn delivery_reads(srv: &TestServer) -> u64 {
    let (status, body) = srv
        .admin(reqwest::Method::GET, "/admin/test/deliveries", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["reads"].as_u64().expect("a count")
}

backend_tests!(
    a_task_s_later_event_waits_behind_its_earlier_one_s_retries,
    needs(
        "webhooks_python",
        "needs TASKQ_TEST_WEBHOOKS_PYTHON (a Python with standardwebhooks)"
    ),
    |backend: Backend| async move {
        let events = json!(["task.created", "task.claimed"]);
        let Watched { rx, srv, org, .. } =
            Watched::start(backend, "dev", ("flaky", "w"), events).await;
        let key = &org.owner_key;
        srv.new_task(key, "first attempt fails").await;
        srv.claim(key, json!({})).await.expect("the task");
        // Each event's first attempt answers 500; the claim may go only
        // once its task's creation got through.
        let got = rx
            .until("w", "two events, each retried", |got| got.len() >= 4)
            .await;
        let seen: Vec<(&str, u64)> = got
            .iter()
            .map(|d| {
                (
                    d["body"]["type"].as_str().unwrap(),
                    d["status"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("task.created", 500),
                ("task.created", 200),
                ("task.claimed", 500),
                ("task.claimed", 200)
            ],
            "{got:#?}"
        );
        assert!(got.iter().all(|d| d["verified"] == json!([0])));
    }
);

backend_tests!(
    an_endpoint_that_answers_410_is_disabled,
    needs(
        "webhooks_python",
        "needs TASKQ_TEST_WEBHOOKS_PYTHON (a Python with standardwebhooks)"
    ),
    |backend: Backend| async move {
        let rx = Receiver::start().await;
        let srv = server(backend).await;
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        create(&srv, key, &rx.url("gone", "g"), json!(["*"])).await;
        srv.new_task(key, "to nobody").await;
        eventually(WAIT, "the endpoint disabled", || async {
            let (_, list) = srv.get(key, "/webhooks").await;
            (list["webhooks"][0]["active"] == false).then_some(())
        })
        .await;
        // Nothing more is sent to it.
        let before = rx.deliveries("g").len();
        srv.new_task(key, "after").await;
        let (status, log) = srv.get(key, "/webhooks").await;
        assert_eq!(status, StatusCode::OK, "{log}");
        assert_eq!(rx.deliveries("g").len(), before);
    }
);

backend_tests!(
    a_rotated_secret_signs_beside_the_new_one,
    needs(
        "webhooks_python",
        "needs TASKQ_TEST_WEBHOOKS_PYTHON (a Python with standardwebhooks)"
    ),
    |backend: Backend| async move {
        let rx = Receiver::start().await;
        let srv = server(backend).await;
        let org = srv.create_org("pro").await;
        let key = &org.owner_key;
        let endpoint = create(&srv, key, &rx.url("ok", "r"), json!(["task.created"])).await;
        let old = secret(&endpoint);
        let id = str_field(&endpoint, "webhook_id");
        let (status, rotated) = srv
            .post(key, &format!("/webhooks/{id}/rotate-secret"), json!({}))
            .await;
        assert_eq!(status, StatusCode::OK, "{rotated}");
        let new = secret(&rotated);
        assert!(new.starts_with("whsec_") && new != old);
        rx.verify_with("r", &[&old, &new]).await;
        srv.new_task(key, "signed twice").await;
        let got = rx.until("r", "a delivery", |got| !got.is_empty()).await;
        assert_eq!(got[0]["verified"], json!([0, 1]), "{got:#?}");
        assert_eq!(got[0]["signature"].as_str().unwrap().split(' ').count(), 2);

        // A master-key rotation re-seals both secrets, and retires the old
        // key only then: deliveries still sign with both.
        let new_master = {
            use base64::Engine as _;
            let mut key = uuid::Uuid::new_v4().as_bytes().to_vec();
            key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
            base64::engine::general_purpose::STANDARD.encode(key)
        };
        let (status, rotated) = srv
            .admin(
                reqwest::Method::POST,
                "/admin/master-key/rotate",
                Some(json!({ "new_key": new_master })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{rotated}");
        assert_eq!(rotated["previous_keys_retired"], true, "{rotated}");
        srv.new_task(key, "signed after the master key moved").await;
        let got = rx
            .until("r", "a second delivery", |got| got.len() >= 2)
            .await;
        assert_eq!(got[1]["verified"], json!([0, 1]), "{got:#?}");
    }
);

backend_tests!(
    kill9_under_load_loses_no_acknowledged_event,
    needs(
        "webhooks_python",
        "needs TASKQ_TEST_WEBHOOKS_PYTHON (a Python with standardwebhooks)"
    ),
    |backend: Backend| async move {
        let rx = Receiver::start().await;
        let mut srv = server(backend).await;
        let org = srv.create_org("pro").await;
        let key = org.owner_key.clone();
        let endpoint = create(
            &srv,
            &key,
            &rx.url("ok", "k"),
            json!(["task.status_changed"]),
        )
        .await;
        rx.verify_with("k", &[&secret(&endpoint)]).await;

        // Agents create and claim until the server dies; each
        // acknowledged change is noted.
        let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let mut agents = tokio::task::JoinSet::new();
        for n in 0..4 {
            let (base, key, acked) = (srv.base_url.clone(), key.clone(), acked.clone());
            taskq::install_crypto_provider();
            agents.spawn(async move {
                let http = reqwest::Client::new();
                for i in 0.. {
                    let created = http
                        .post(format!("{base}/tasks"))
                        .header("X-Api-Key", &key)
                        .json(&json!({ "tasks": [{ "title": format!("agent {n} task {i}") }] }))
                        .send()
                        .await;
                    let Ok(r) = created else { return };
                    assert_eq!(r.status(), StatusCode::CREATED, "create");
                    let Ok(body) = r.json::<Value>().await else {
                        return;
                    };
                    let id = str_field(&body["results"][0], "task_id");
                    acked.lock().unwrap().push((id, "pending".into()));
                    let claimed = http
                        .post(format!("{base}/tasks/claim"))
                        .header("X-Api-Key", &key)
                        .json(&json!({}))
                        .send()
                        .await;
                    match claimed {
                        Ok(r) if r.status() == StatusCode::OK => {
                            let Ok(task) = r.json::<Value>().await else {
                                return;
                            };
                            if let Some(id) = task["task_id"].as_str() {
                                acked
                                    .lock()
                                    .unwrap()
                                    .push((id.to_owned(), "in_progress".into()));
                            }
                        }
                        Ok(r) => panic!("claim: {} {:?}", r.status(), r.text().await),
                        Err(_) => return,
                    }
                }
            });
        }
        eventually(WAIT, "some acknowledged changes", || async {
            (acked.lock().unwrap().len() >= 60).then_some(())
        })
        .await;
        srv.kill9().await;
        while agents.join_next().await.is_some() {}
        srv.start_again().await;

        let acked = acked.lock().unwrap().clone();
        let got = eventually(
            Duration::from_secs(90),
            "every acknowledged change delivered",
            || {
                let got = rx.deliveries("k");
                let seen: BTreeSet<(String, String)> = events(&got)
                    .into_iter()
                    .map(|(_, id, _, to)| (id, to))
                    .collect();
                let all = acked.iter().all(|a| seen.contains(a));
                async move { all.then_some(got) }
            },
        )
        .await;
        assert!(got.iter().all(|d| d["verified"] == json!([0])));
        // Per task, pending before in_progress.
        let mut order: HashMap<String, Vec<String>> = HashMap::new();
        for (_, id, _, to) in events(&got) {
            let seen = order.entry(id).or_default();
            if !seen.contains(&to) {
                seen.push(to);
            }
        }
        for (id, to) in &acked {
            if to == "in_progress" {
                assert_eq!(order[id], ["pending", "in_progress"], "{id}");
            }
        }
    }
);

backend_tests!(
    another_org_never_sees_or_deletes_an_endpoint,
    |backend: Backend| async move {
        let srv = server(backend).await;
        let (one, two) = (srv.create_org("pro").await, srv.create_org("pro").await);
        let endpoint = create(&srv, &one.owner_key, "http://127.0.0.1:9/x", json!(["*"])).await;
        let id = str_field(&endpoint, "webhook_id");
        assert!(endpoint["description"].is_null() && endpoint["active"] == true);
        let (_, list) = srv.get(&two.owner_key, "/webhooks").await;
        assert_eq!(list["webhooks"], json!([]));
        for (path, post) in [
            (format!("/webhooks/{id}/rotate-secret"), true),
            (format!("/webhooks/{id}/test"), true),
            (format!("/webhooks/{id}/deliveries"), false),
        ] {
            let (status, body) = if post {
                srv.post(&two.owner_key, &path, json!({})).await
            } else {
                srv.get(&two.owner_key, &path).await
            };
            assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        }
        let (status, _) = srv.delete(&two.owner_key, &format!("/webhooks/{id}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (_, list) = srv.get(&one.owner_key, "/webhooks").await;
        assert_eq!(list["webhooks"][0]["webhook_id"], id.as_str());
        assert!(list["webhooks"][0].get("secret").is_none(), "{list}");
        // A plain member is refused; the owner deletes it.
        let user = srv.add_member(&one, "user@example.com", "user").await;
        let (status, _) = srv.get(&user, "/webhooks").await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let (status, _) = srv.delete(&one.owner_key, &format!("/webhooks/{id}")).await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        let (_, list) = srv.get(&one.owner_key, "/webhooks").await;
        assert_eq!(list["webhooks"], json!([]));
    }
);

backend_tests!(
    free_orgs_private_urls_and_the_tier_limit_are_refused,
    |backend: Backend| async move {
        // Without TASKQ_WEBHOOKS_ALLOW_PRIVATE.
        let srv = TestServer::start(backend).await;
        let free = srv.create_org("free").await;
        let (status, body) = srv
            .post(
                &free.owner_key,
                "/webhooks",
                json!({ "url": "https://example.com/x", "events": ["*"] }),
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["upgrade"], true, "{body}");
        let (status, body) = srv.get(&free.owner_key, "/webhooks").await;
        assert_eq!(
            (status, &body["upgrade"]),
            (StatusCode::FORBIDDEN, &json!(true))
        );

        let dev = srv.create_org("dev").await;
        for url in [
            "http://127.0.0.1:8080/x",
            "http://localhost/x",
            "http://10.1.2.3/x",
            "http://192.168.0.1/x",
            "http://169.254.169.254/latest",
            "http://[::1]/x",
            "http://0.0.0.0/x",
            "ftp://example.com/x",
        ] {
            let (status, body) = srv
                .post(
                    &dev.owner_key,
                    "/webhooks",
                    json!({ "url": url, "events": ["*"] }),
                )
                .await;
            assert_bad_request(status, &body, "url");
        }
        let (status, body) = srv
            .post(
                &dev.owner_key,
                "/webhooks",
                json!({ "url": "https://example.com/x", "events": [] }),
            )
            .await;
        assert_bad_request(status, &body, "events");
        drop(srv);

        let srv = server(backend).await;
        let dev = srv.create_org("dev").await;
        for n in 0..5 {
            create(
                &srv,
                &dev.owner_key,
                &format!("http://127.0.0.1:9/{n}"),
                json!(["*"]),
            )
            .await;
        }
        let (status, body) = srv
            .post(
                &dev.owner_key,
                "/webhooks",
                json!({ "url": "http://127.0.0.1:9/6", "events": ["*"] }),
            )
            .await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert_eq!(body["limit_type"], "webhooks", "{body}");
        assert_eq!(body["limit"], 5, "{body}");
        assert_eq!(body["tier"], "dev", "{body}");
        assert!(body["error"].is_string(), "{body}");
    }
);
