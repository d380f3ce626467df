//! Claims while the retention sweep removes a large org's expired tasks
//! (CONTRACT.md §11, issue: "claims keep working during a sweep of
//! 200,000 tasks"): the sweep's removals go through the same org actor
//! and writer as the claims, a page at a time, and must not hold them up
//! until it is done.

use crate::common::*;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use reqwest::Method;

const DAY: i64 = 86_400;
const EXPIRED: usize = 200_000;
const BATCH: usize = 25;
const FILLERS: usize = 16;
/// Tasks the claims work through while the sweep runs.
const FRESH: usize = 2_000;

/// Creates `count` tasks assigned to the org's owner and completes them,
/// in batches of 25 over `FILLERS` concurrent loops.
async fn fill_finished(srv: &TestServer, org: &Org, count: usize) {
    let next = AtomicU64::new(0);
    let filler = || async {
        loop {
            let seq = next.fetch_add(BATCH as u64, Ordering::Relaxed) as usize;
            if seq >= count {
                break;
            }
            let items: Vec<Value> = (seq..seq + BATCH.min(count - seq))
                .map(|i| json!({ "title": format!("expired {i}"), "assignee": org.owner_email }))
                .collect();
            let created = srv.create_tasks(&org.owner_key, json!(items)).await;
            let updates: Vec<Value> = created
                .iter()
                .map(|t| json!({ "task_id": t["task_id"], "status": "completed", "note": "done" }))
                .collect();
            let (status, body) = srv.update(&org.owner_key, json!(updates)).await;
            assert_eq!(status, StatusCode::OK, "{body}");
        }
    };
    futures::future::join_all((0..FILLERS).map(|_| filler())).await;
}

async fn stored_tasks(srv: &TestServer, org: &Org) -> i64 {
    let (status, body) = srv
        .admin(Method::GET, &format!("/admin/orgs/{}", org.org_id), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["stored"]["tasks"].as_i64().expect("stored.tasks")
}

backend_tests!(
    claims_go_on_while_the_sweep_removes_200_000_tasks,
    |srv| async move {
        let org = srv.create_org("enterprise").await;
        let key = &org.owner_key;
        fill_finished(&srv, &org, EXPIRED).await;
        assert_eq!(stored_tasks(&srv, &org).await, EXPIRED as i64);
        let (status, body) = srv
            .admin(
                Method::PATCH,
                &format!("/admin/orgs/{}", org.org_id),
                Some(json!({ "retention_days": 1 })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        advance_clock(&srv, 2 * DAY).await;
        // Fresh work, created after the clock moved: never eligible.
        for start in (0..FRESH).step_by(BATCH) {
            let items: Vec<Value> = (start..start + BATCH)
                .map(|i| json!({ "title": format!("fresh {i}") }))
                .collect();
            srv.create_tasks(key, json!(items)).await;
        }

        let sweeping = AtomicBool::new(true);
        let cycles_during_sweep = AtomicU64::new(0);
        let completed_total = AtomicU64::new(0);
        let sweep = async {
            // The hook answers when the sweep is done, which takes longer
            // than the test client waits for an answer.
            let answer = reqwest::Client::new()
                .post(format!("{}/admin/test/retention", srv.base_url))
                .bearer_auth(&srv.admin_token)
                .send()
                .await;
            sweeping.store(false, Ordering::SeqCst);
            let answer = answer.expect("the sweep's hook answers");
            assert_eq!(answer.status(), StatusCode::OK);
            let body: Value = answer.json().await.expect("a JSON answer");
            body["swept"].as_i64().expect("swept count")
        };
        let worker = || async {
            while sweeping.load(Ordering::SeqCst) {
                let Some(task) = srv.claim(key, json!({ "lease_seconds": 300 })).await else {
                    break;
                };
                srv.update_ok(
                    key,
                    json!({
                        "task_id": task["task_id"],
                        "lease_id": task["lease_id"],
                        "status": "completed",
                        "note": "done during the sweep",
                    }),
                )
                .await;
                completed_total.fetch_add(1, Ordering::Relaxed);
                if sweeping.load(Ordering::SeqCst) {
                    cycles_during_sweep.fetch_add(1, Ordering::Relaxed);
                }
            }
        };
        let (swept, _) = tokio::join!(sweep, futures::future::join_all((0..4).map(|_| worker())));
        assert_eq!(swept, EXPIRED as i64);
        let cycles = cycles_during_sweep.load(Ordering::Relaxed);
        assert!(
            cycles > 0,
            "no claim was answered while the sweep removed {EXPIRED} tasks"
        );
        // The fresh tasks, finished or not, are all still there.
        assert_eq!(stored_tasks(&srv, &org).await, FRESH as i64);
        let completed = srv.list_all(key, "status=completed").await;
        assert_eq!(
            completed.len() as u64,
            completed_total.load(Ordering::Relaxed)
        );
        assert!(completed
            .iter()
            .all(|t| t["title"].as_str().is_some_and(|s| s.starts_with("fresh"))));
    }
);
