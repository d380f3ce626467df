//! Meaning: `POST /tasks/search`, near-duplicates and suggested tags on
//! create results, prior art in claim context, through the real server.
//!
//! Most tests run against `stub`, an OpenAI-compatible embeddings endpoint
//! started here whose vectors are bags of words, so every score is known.
//! `builtin_*` load the real all-MiniLM-L6-v2 from
//! `TASKQ_TEST_EMBEDDINGS_MODEL_DIR` (CI installs it from PyPI).

pub mod stub;

use std::time::{Duration, Instant};

use crate::common::*;
use stub::Stub;

/// Budget a create waits for its vectors in these tests: long, so that
/// the near-duplicates a test expects are never cut off by a slow machine.
const GENEROUS_BUDGET_MS: &str = "20000";

async fn with_stub(backend: Backend) -> (TestServer, Stub) {
    let stub = Stub::start().await;
    let srv = TestServer::builder(backend)
        .env("TASKQ_EMBEDDINGS", &stub.url)
        .env("TASKQ_EMBEDDINGS_MODEL", "stub-model")
        .env("TASKQ_EMBEDDINGS_API_KEY", "stub-secret")
        .env("TASKQ_EMBEDDINGS_CREATE_BUDGET_MS", GENEROUS_BUDGET_MS)
        .start()
        .await;
    (srv, stub)
}

async fn search(srv: &TestServer, key: &str, body: Value) -> Value {
    let (status, answer) = srv.post(key, "/tasks/search", body).await;
    assert_eq!(status, StatusCode::OK, "search: {answer}");
    answer
}

fn result_ids(answer: &Value) -> Vec<String> {
    answer["results"]
        .as_array()
        .unwrap_or_else(|| panic!("results: {answer}"))
        .iter()
        .map(|r| str_field(r, "task_id"))
        .collect()
}

fn scores(answer: &Value) -> Vec<f64> {
    answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["score"].as_f64().expect("a score"))
        .collect()
}

const TITLES: [&str; 6] = [
    "Fix flaky integration test in payments service",
    "Rotate TLS certificate on staging load balancer",
    "Write release notes for version 2.4",
    "Investigate latency spike on search API",
    "Translate onboarding emails to Spanish",
    "Migrate user table to the new schema",
];

backend_tests!(
    search_ranks_by_score_and_fills_up_to_the_limit,
    |backend: Backend| async move {
        let (srv, stub) = with_stub(backend).await;
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let items: Vec<Value> = TITLES.iter().map(|t| json!({ "title": t })).collect();
        let ids = ids(&srv.create_tasks(key, json!(items)).await);
        // One of them is done, with an output.
        srv.claim(key, json!({})).await.expect("a task to claim");
        let done = ids[0].clone();
        srv.update_ok(
            key,
            json!({ "task_id": done, "status": "completed",
        "note": "fixed", "output": { "pr": 42 } }),
        )
        .await;

        let answer = search(
            &srv,
            key,
            json!({ "query": "payments integration test is flaky" }),
        )
        .await;
        assert_eq!(result_ids(&answer).len(), 3, "default limit is 3: {answer}");
        let first = &answer["results"][0];
        assert_eq!(first["task_id"], done.as_str(), "{answer}");
        assert_eq!(first["title"], TITLES[0]);
        assert_eq!(first["status"], "completed");
        assert_eq!(
            first["output"],
            json!({ "pr": 42 }),
            "completed tasks carry their output"
        );
        let s = scores(&answer);
        assert!(s.windows(2).all(|w| w[0] >= w[1]), "best first: {s:?}");
        assert!(s.iter().all(|x| (-1.0..=1.0).contains(x)), "{s:?}");
        assert!(s[0] > 0.5 && s[1] < 0.3, "the match stands out: {s:?}");

        // Filled up to the limit even when the rest share no word with the query.
        let all = search(&srv, key, json!({ "query": "payments", "limit": 25 })).await;
        let mut got = result_ids(&all);
        got.sort();
        let mut want = ids.clone();
        want.sort();
        assert_eq!(got, want, "every task, once: {all}");
        for r in all["results"].as_array().unwrap() {
            if r["task_id"] != done.as_str() {
                assert_eq!(r["output"], Value::Null, "{r}");
                assert_eq!(r["status"], "pending", "{r}");
            }
        }
        let exact = search(&srv, key, json!({ "query": TITLES[3], "limit": 1 })).await;
        assert_eq!(result_ids(&exact), [ids[3].clone()]);
        assert!(scores(&exact)[0] > 0.99, "the same words score 1: {exact}");

        // The server authenticates to the endpoint and names the model.
        assert_eq!(
            stub.seen.authorization.lock().unwrap().as_deref(),
            Some("Bearer stub-secret")
        );
        assert_eq!(
            stub.seen.model.lock().unwrap().as_deref(),
            Some("stub-model")
        );
    }
);

backend_tests!(search_validates_its_body, |backend: Backend| async move {
    let (srv, _stub) = with_stub(backend).await;
    let org = srv.create_org("dev").await;
    for (body, field) in [
        (json!({ "limit": 3 }), "query"),
        (json!({ "query": "" }), "query"),
        (json!({ "query": 7 }), "query"),
        (json!({ "query": "q", "limit": 0 }), "limit"),
        (json!({ "query": "q", "limit": 26 }), "limit"),
        (json!({ "query": "q", "limit": "3" }), "limit"),
        (json!({ "query": "q", "limit": 2.5 }), "limit"),
    ] {
        let (status, answer) = srv
            .post(&org.owner_key, "/tasks/search", body.clone())
            .await;
        assert_bad_request(status, &answer, field);
    }
    // An org with no tasks yet has no results, not an error.
    let empty = search(
        &srv,
        &org.owner_key,
        json!({ "query": "anything", "limit": 25 }),
    )
    .await;
    assert_eq!(empty, json!({ "results": [] }));
});

backend_tests!(
    near_duplicates_and_suggested_tags_on_create,
    |backend: Backend| async move {
        let (srv, _stub) = with_stub(backend).await;
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        srv.create_tags(
            key,
            json!([{ "name": "ci" }, { "name": "payments" }, { "name": "docs" }]),
        )
        .await;
        let first = srv
            .create_task(
                key,
                json!({ "title": TITLES[0], "tags": ["ci", "payments"] }),
            )
            .await;
        let other = srv
            .create_task(key, json!({ "title": TITLES[2], "tags": ["docs"] }))
            .await;

        let again = srv
            .create_tasks(key, json!([{ "title": TITLES[0], "tags": ["ci"] }]))
            .await
            .remove(0);
        let similar = again["similar_open_tasks"]
            .as_array()
            .unwrap_or_else(|| panic!("{again}"));
        assert_eq!(similar.len(), 1, "{again}");
        assert_eq!(similar[0]["task_id"], first.as_str());
        assert_eq!(similar[0]["title"], TITLES[0]);
        assert!(similar[0]["score"].as_f64().unwrap() >= 0.9, "{again}");
        // Tags of the nearest task that the new one lacks; never `docs`, whose
        // task shares no word with it.
        assert_eq!(again["suggested_tags"], json!(["payments"]), "{again}");

        // A finished task is not a near-duplicate any more.
        srv.update_ok(
            key,
            json!({ "task_id": first, "status": "canceled", "note": "dup",
        "assignee": org.owner_email }),
        )
        .await;
        let third = srv
            .create_tasks(key, json!([{ "title": TITLES[0] }]))
            .await
            .remove(0);
        let similar = third["similar_open_tasks"]
            .as_array()
            .unwrap_or_else(|| panic!("{third}"));
        assert_eq!(similar.len(), 1, "{third}");
        assert_eq!(similar[0]["task_id"], again["task_id"], "{third}");

        // Unrelated words: no near-duplicates key at all.
        let fresh = srv
            .create_tasks(key, json!([{ "title": "Order new office chairs" }]))
            .await
            .remove(0);
        assert!(fresh.get("similar_open_tasks").is_none(), "{fresh}");
        assert_eq!(fresh["suggested_tags"], json!([]), "{fresh}");
        let _ = other;
    }
);

backend_tests!(
    prior_art_in_claim_context_on_paid_tiers,
    |backend: Backend| async move {
        let (srv, _stub) = with_stub(backend).await;
        for tier in ["dev", "free"] {
            let org = srv.create_org(tier).await;
            let key = &org.owner_key;
            let done = srv
                .create_task(
                    key,
                    json!({ "title": "Fix flaky integration test in payments service" }),
                )
                .await;
            srv.claim(key, json!({})).await.expect("claimed");
            srv.update_ok(
                key,
                json!({ "task_id": done, "status": "completed", "note": "ok",
            "output": { "fix": "retry the socket" } }),
            )
            .await;
            let next = srv
                .create_task(
                    key,
                    json!({ "title": "Flaky integration test in payments service again" }),
                )
                .await;
            let claimed = srv.claim(key, json!({})).await.expect("claimed");
            assert_eq!(claimed["task_id"], next.as_str());
            let prior = &claimed["context"]["prior_art"];
            if tier == "free" {
                assert!(prior.is_null(), "free tier gets no prior art: {claimed}");
                continue;
            }
            let prior = prior
                .as_array()
                .unwrap_or_else(|| panic!("prior art: {claimed}"));
            assert_eq!(prior.len(), 1, "{claimed}");
            assert_eq!(prior[0]["task_id"], done.as_str());
            assert_eq!(
                prior[0]["title"],
                "Fix flaky integration test in payments service"
            );
            assert_eq!(prior[0]["output"], json!({ "fix": "retry the socket" }));
            assert!(prior[0]["score"].as_f64().unwrap() >= 0.5);
            // Without context, none.
            srv.create_task(
                key,
                json!({ "title": "Payments service integration test flaky" }),
            )
            .await;
            let bare = srv
                .claim(key, json!({ "include_context": false }))
                .await
                .unwrap();
            assert!(bare.get("context").is_none_or(|c| c.is_null()), "{bare}");
        }
    }
);

backend_tests!(
    free_tier_searches_the_last_90_days,
    |backend: Backend| async move {
        let (srv, _stub) = with_stub(backend).await;
        let free = srv.create_org("free").await;
        let dev = srv.create_org("dev").await;
        let old_free = srv.new_task(&free.owner_key, "Renew the domain name").await;
        let old_dev = srv.new_task(&dev.owner_key, "Renew the domain name").await;
        advance_clock(&srv, 91 * 24 * 3600).await;
        let new_free = srv
            .new_task(&free.owner_key, "Renew the domain name again")
            .await;
        let new_dev = srv
            .new_task(&dev.owner_key, "Renew the domain name again")
            .await;
        let q = json!({ "query": "renew domain", "limit": 10 });
        assert_eq!(
            result_ids(&search(&srv, &free.owner_key, q.clone()).await),
            [new_free]
        );
        let mut both = result_ids(&search(&srv, &dev.owner_key, q).await);
        both.sort();
        let mut want = vec![old_dev, new_dev];
        want.sort();
        assert_eq!(both, want, "paid tiers search the full history");
        let _ = old_free;
    }
);

backend_tests!(results_never_cross_orgs, |backend: Backend| async move {
    let (srv, _stub) = with_stub(backend).await;
    let a = srv.create_org("dev").await;
    let b = srv.create_org("dev").await;
    let a_ids = ids(&srv
        .create_tasks(
            &a.owner_key,
            json!([{ "title": TITLES[0] }, { "title": TITLES[1] }]),
        )
        .await);
    let b_ids = ids(&srv
        .create_tasks(&b.owner_key, json!([{ "title": TITLES[0] }]))
        .await);
    let from_a = result_ids(
        &search(
            &srv,
            &a.owner_key,
            json!({ "query": TITLES[0], "limit": 25 }),
        )
        .await,
    );
    assert_eq!(from_a.len(), 2);
    assert!(from_a.iter().all(|id| a_ids.contains(id)), "{from_a:?}");
    let from_b = result_ids(
        &search(
            &srv,
            &b.owner_key,
            json!({ "query": TITLES[0], "limit": 25 }),
        )
        .await,
    );
    assert_eq!(from_b, b_ids);
    // Nor do near-duplicates.
    let created = srv
        .create_tasks(&b.owner_key, json!([{ "title": TITLES[1] }]))
        .await;
    assert!(
        created[0].get("similar_open_tasks").is_none(),
        "{}",
        created[0]
    );
});

backend_tests!(byok_and_unconfigured_orgs, |backend: Backend| async move {
    let (srv, stub) = with_stub(backend).await;
    let byok = srv
        .create_org_with(json!({ "tier": "dev", "encryption": "byok" }))
        .await;
    let secret = "Quarterly plan for the secret merger";
    let created = srv
        .create_tasks(&byok.owner_key, json!([{ "title": secret }]))
        .await;
    assert!(
        created[0].get("similar_open_tasks").is_none(),
        "{}",
        created[0]
    );
    assert!(created[0].get("suggested_tags").is_none(), "{}", created[0]);
    let answer = search(&srv, &byok.owner_key, json!({ "query": "merger" })).await;
    assert_eq!(answer, json!({ "available": false, "reason": "byok" }));
    // A managed org's search embeds its query; the BYOK org's words were
    // never sent to the endpoint.
    let managed = srv.create_org("dev").await;
    srv.new_task(&managed.owner_key, "Something else").await;
    search(&srv, &managed.owner_key, json!({ "query": "anything" })).await;
    assert!(stub.texts() > 0);
    assert!(!stub.was_sent("merger"), "BYOK content left the server");
    drop(srv);

    // No embedder: managed orgs read as not configured.
    let plain = TestServer::builder(backend)
        .env("TASKQ_EMBEDDINGS", "none")
        .start()
        .await;
    let org = plain.create_org("dev").await;
    let created = plain
        .create_tasks(&org.owner_key, json!([{ "title": "A task" }]))
        .await;
    assert!(created[0].get("suggested_tags").is_none(), "{}", created[0]);
    let answer = search(&plain, &org.owner_key, json!({ "query": "task" })).await;
    assert_eq!(
        answer,
        json!({ "available": false, "reason": "not_configured" })
    );
    // Nor is a builtin model whose folder is missing.
    let missing = TestServer::builder(backend)
        .env("TASKQ_EMBEDDINGS", "builtin")
        .env("TASKQ_EMBEDDINGS_MODEL_DIR", "no-such-model-folder")
        .start()
        .await;
    let org = missing.create_org("dev").await;
    let answer = search(&missing, &org.owner_key, json!({ "query": "task" })).await;
    assert_eq!(
        answer,
        json!({ "available": false, "reason": "not_configured" })
    );
});

backend_tests!(
    an_endpoint_that_is_down_never_fails_a_create,
    |backend: Backend| async move {
        let stub = Stub::start().await;
        let budget_ms = 300;
        let srv = TestServer::builder(backend)
            .env("TASKQ_EMBEDDINGS", &stub.url)
            .env("TASKQ_EMBEDDINGS_CREATE_BUDGET_MS", &budget_ms.to_string())
            .start()
            .await;
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        stub.set_down(true);
        let started = Instant::now();
        let (status, body) = srv
            .post(key, "/tasks", json!({ "tasks": [{ "title": TITLES[4] }] }))
            .await;
        let took = started.elapsed();
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert!(
            body["results"][0].get("similar_open_tasks").is_none(),
            "{body}"
        );
        assert!(
            took < Duration::from_millis(budget_ms + 2_000),
            "a create waits at most its budget for vectors: {took:?}"
        );
        let id = str_field(&body["results"][0], "task_id");
        // Search needs the query embedded: 503 with Retry-After while down.
        let resp = reqwest::Client::new()
            .post(format!("{}/tasks/search", srv.base_url))
            .header("x-api-key", key.as_str())
            .json(&json!({ "query": "spanish emails" }))
            .send()
            .await
            .expect("search answered");
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            resp.headers().contains_key("retry-after"),
            "{:?}",
            resp.headers()
        );
        // Back up: the task queued meanwhile is embedded and found.
        stub.set_down(false);
        let found = eventually(Duration::from_secs(60), "the task to be found", || async {
            let (status, answer) = srv
                .post(
                    key,
                    "/tasks/search",
                    json!({ "query": TITLES[4], "limit": 1 }),
                )
                .await;
            (status == StatusCode::OK && result_ids(&answer) == [id.clone()]).then_some(answer)
        })
        .await;
        assert!(scores(&found)[0] > 0.99, "{found}");
    }
);

backend_tests!(
    vectors_survive_a_restart_and_changed_words_are_embedded_again,
    |backend: Backend| async move {
        let (mut srv, stub) = with_stub(backend).await;
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let items: Vec<Value> = TITLES.iter().map(|t| json!({ "title": t })).collect();
        let ids = ids(&srv.create_tasks(key, json!(items)).await);
        assert_eq!(
            result_ids(&search(&srv, key, json!({ "query": TITLES[1], "limit": 1 })).await),
            [ids[1].clone()]
        );
        let embedded = stub.texts();
        assert_eq!(embedded, TITLES.len() + 1, "each task once, and the query");

        srv.restart().await;
        let answer = search(&srv, key, json!({ "query": TITLES[2], "limit": 6 })).await;
        assert_eq!(result_ids(&answer)[0], ids[2]);
        assert_eq!(result_ids(&answer).len(), 6);
        assert_eq!(
            stub.texts(),
            embedded + 1,
            "stored vectors are used, only the query is embedded"
        );

        // New words, new vector: the old title no longer finds the task first.
        srv.update_ok(
            key,
            json!({ "task_id": ids[5], "title": "Archive the marketing photo library",
        "description": "Move photos to cold storage" }),
        )
        .await;
        let moved = search(&srv, key, json!({ "query": "Archive the marketing photo library. Move photos to cold storage", "limit": 1 })).await;
        assert_eq!(result_ids(&moved), [ids[5].clone()], "{moved}");
        assert!(
            scores(&moved)[0] > 0.99,
            "title and description are embedded: {moved}"
        );
        let old = search(&srv, key, json!({ "query": TITLES[5], "limit": 1 })).await;
        assert!(scores(&old)[0] < 0.5, "{old}");

        // The vectors are sealed: no stored blob holds a vector's bytes.
        let plain: Vec<u8> = {
            let mut v = stub::embed(TITLES[1]);
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter_mut().for_each(|x| *x /= norm);
            v.iter().take(8).flat_map(|x| x.to_le_bytes()).collect()
        };
        let sql = "SELECT vector FROM task_vectors";
        let blobs: Vec<Vec<u8>> = match srv.open_db().await {
            Db::Sqlite(mut c) => sqlx::query_scalar(sql).fetch_all(&mut c).await.unwrap(),
            Db::Postgres(mut c) => sqlx::query_scalar(sql).fetch_all(&mut c).await.unwrap(),
        };
        assert_eq!(blobs.len(), TITLES.len());
        assert!(blobs
            .iter()
            .all(|b| !b.windows(plain.len()).any(|w| w == plain.as_slice())));
    }
);

backend_tests!(
    builtin_model_finds_paraphrases,
    needs(
        "model",
        "needs TASKQ_TEST_EMBEDDINGS_MODEL_DIR (all-MiniLM-L6-v2's folder)"
    ),
    |backend: Backend| async move {
        let dir = need("TASKQ_TEST_EMBEDDINGS_MODEL_DIR");
        let srv = TestServer::builder(backend)
            .env("TASKQ_EMBEDDINGS", "builtin")
            .env("TASKQ_EMBEDDINGS_MODEL_DIR", &dir)
            .env("TASKQ_EMBEDDINGS_CREATE_BUDGET_MS", GENEROUS_BUDGET_MS)
            .start()
            .await;
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let items: Vec<Value> = TITLES.iter().map(|t| json!({ "title": t })).collect();
        let ids = ids(&srv.create_tasks(key, json!(items)).await);
        for (query, want) in [
            ("checkout tests fail randomly in CI", 0),
            ("the HTTPS cert on the test environment expires soon", 1),
            ("queries to the lookup endpoint got slow", 3),
            ("localize welcome messages for users in Mexico", 4),
        ] {
            let answer = search(&srv, key, json!({ "query": query, "limit": 3 })).await;
            assert_eq!(result_ids(&answer)[0], ids[want], "{query}: {answer}");
            assert_eq!(result_ids(&answer).len(), 3);
        }
        let again = srv
            .create_tasks(
                key,
                json!([{ "title": "Fix the flaky integration test in the payments service" }]),
            )
            .await
            .remove(0);
        let similar = again["similar_open_tasks"]
            .as_array()
            .unwrap_or_else(|| panic!("{again}"));
        assert_eq!(similar[0]["task_id"], ids[0].as_str(), "{again}");
        assert!(similar.iter().all(|s| s["score"].as_f64().unwrap() >= 0.9));
        let metric = srv.metric("taskq_search_index_tasks").await;
        assert_eq!(metric, Some(TITLES.len() as u64 + 1));
    }
);
