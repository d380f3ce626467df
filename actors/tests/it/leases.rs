//! Leases, with the engine's clock moved instead of waiting: expiry returns
//! a task to the queue, fencing refuses a stale lease id, and an update
//! renews the lease without ever shortening it.

#![cfg(feature = "test-hooks")]

use crate::support::TestEngine;
use serde_json::json;
use taskq_actors::api::{ItemError, UpdateResult};
use taskq_actors::domain::TaskStatus;

fn lease_lost(result: &UpdateResult) -> bool {
    matches!(
        result,
        UpdateResult::Failed {
            error: ItemError::LeaseLost,
            ..
        }
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_returns_the_task_to_pending() {
    let t = TestEngine::start().await;
    let org = t.org("expiry").await;
    let slow = t.member(&org, "slow", "slow-agent").await;
    let fast = t.member(&org, "fast", "fast-agent").await;
    let task = t.create_one(&org.owner, json!({"title": "work"})).await;
    let first = t
        .claim(&slow, json!({"lease_seconds": 60}))
        .await
        .expect("claimed");

    t.clock.advance(61_000);
    t.engine.expire_leases_now(org.id).await.expect("expiry");

    let detail = t.get(&org.owner, task).await;
    assert_eq!(detail.task.status, TaskStatus::Pending);
    assert_eq!(detail.task.assignee, None);
    assert!(detail.task.lease.is_none(), "a pending task has no lease");
    let last = detail.history.expect("history").pop().expect("events");
    assert_eq!(last.from_status, Some(TaskStatus::InProgress));
    assert_eq!(last.to_status, TaskStatus::Pending);
    assert_eq!(last.agent_id, "system");
    assert_eq!(
        last.note.as_ref().and_then(|n| n.as_plain()),
        Some("lease expired")
    );

    let second = t
        .claim(&fast, json!({"lease_seconds": 60}))
        .await
        .expect("the task is claimable again");
    assert_eq!(second.task.task_id, task);
    assert_eq!(second.task.assignee.as_deref(), Some("fast-agent"));
    assert_ne!(second.lease_id, first.lease_id, "a new claim, a new lease");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_lease_id_loses_the_update_and_the_current_one_applies() {
    let t = TestEngine::start().await;
    let org = t.org("fencing").await;
    let slow = t.member(&org, "slow", "slow-agent").await;
    let fast = t.member(&org, "fast", "fast-agent").await;
    let task = t.create_one(&org.owner, json!({"title": "work"})).await;
    let stale = t
        .claim(&slow, json!({"lease_seconds": 60}))
        .await
        .expect("claimed")
        .lease_id;
    t.clock.advance(61_000);
    t.engine.expire_leases_now(org.id).await.expect("expiry");

    // Expired and not yet reclaimed: the old lease is gone already.
    let result = t
        .update(
            &slow,
            json!({"task_id": task, "lease_id": stale, "priority": 1}),
        )
        .await;
    assert!(lease_lost(&result), "{result:?}");

    let current = t
        .claim(&fast, json!({"lease_seconds": 60}))
        .await
        .expect("reclaimed");
    let before = t.get(&org.owner, task).await;

    let result = t
        .update(
            &slow,
            json!({
                "task_id": task,
                "lease_id": stale,
                "status": "completed",
                "note": "done late",
                "output": {"by": "slow"},
                "priority": 1
            }),
        )
        .await;
    assert!(lease_lost(&result), "{result:?}");
    let after = t.get(&org.owner, task).await;
    assert_eq!(after.task.status, TaskStatus::InProgress);
    assert_eq!(after.task.assignee.as_deref(), Some("fast-agent"));
    assert_eq!(after.task.priority, before.task.priority);
    assert_eq!(after.task.output, None);
    assert_eq!(after.task.updated_at, before.task.updated_at);
    assert_eq!(
        after.history.as_ref().map(Vec::len),
        before.history.as_ref().map(Vec::len),
        "no event was written"
    );

    let result = t
        .update(
            &fast,
            json!({
                "task_id": task,
                "lease_id": current.lease_id,
                "status": "completed",
                "note": "done",
                "output": {"by": "fast"}
            }),
        )
        .await;
    assert!(
        matches!(
            result,
            UpdateResult::Applied {
                status: TaskStatus::Completed,
                ..
            }
        ),
        "{result:?}"
    );
    let done = t.get(&org.owner, task).await;
    assert_eq!(done.task.status, TaskStatus::Completed);
    assert_eq!(
        done.task.output,
        Some(json!({"by": "fast"}).as_object().cloned().unwrap())
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_renews_the_lease_and_never_shortens_it() {
    let t = TestEngine::start().await;
    let org = t.org("renewal").await;
    let agent = t.member(&org, "agent", "agent").await;
    let task = t.create_one(&org.owner, json!({"title": "work"})).await;
    let claimed = t
        .claim(&agent, json!({"lease_seconds": 60}))
        .await
        .expect("claimed");
    let granted = claimed.task.lease.expect("leased").lease_expires_at.0;

    // 20 s later an update pushes the expiry to now + 60 s.
    t.clock.advance(20_000);
    let before = t.now_ms();
    let result = t
        .update(
            &agent,
            json!({"task_id": task, "lease_id": claimed.lease_id, "metadata": {"step": 1}}),
        )
        .await;
    let after = t.now_ms();
    assert!(matches!(result, UpdateResult::Applied { .. }), "{result:?}");
    let renewed = t.get(&org.owner, task).await.task.lease.expect("leased");
    assert_eq!(renewed.lease_seconds, 60);
    let renewed = renewed.lease_expires_at.0;
    assert!(
        (before + 60_000..=after + 60_000).contains(&renewed),
        "lease_expires_at {renewed} is not now + 60 s ({before}..={after})"
    );
    assert!(renewed >= granted + 20_000);

    // With the clock set back, now + 60 s is earlier: the expiry stays.
    t.clock.advance(-30_000);
    let result = t
        .update(&agent, json!({"task_id": task, "metadata": {"step": 2}}))
        .await;
    assert!(matches!(result, UpdateResult::Applied { .. }), "{result:?}");
    let kept = t.get(&org.owner, task).await.task.lease.expect("leased");
    assert_eq!(kept.lease_expires_at.0, renewed);

    // The renewed lease outlives the original expiry.
    t.clock.advance(30_000 + 45_000);
    assert!(t.now_ms() > granted);
    t.engine.expire_leases_now(org.id).await.expect("expiry");
    let detail = t.get(&org.owner, task).await;
    assert_eq!(detail.task.status, TaskStatus::InProgress);
    assert_eq!(detail.task.assignee.as_deref(), Some("agent"));
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_not_yet_due_is_not_expired() {
    let t = TestEngine::start().await;
    let org = t.org("due").await;
    let agent = t.member(&org, "agent", "agent").await;
    let task = t.create_one(&org.owner, json!({"title": "work"})).await;
    let claimed = t
        .claim(&agent, json!({"lease_seconds": 60}))
        .await
        .expect("claimed");

    t.clock.advance(50_000);
    t.engine.expire_leases_now(org.id).await.expect("expiry");
    let detail = t.get(&org.owner, task).await;
    assert_eq!(detail.task.status, TaskStatus::InProgress);
    assert_eq!(detail.task.assignee.as_deref(), Some("agent"));
    assert_eq!(
        detail.task.lease.map(|l| l.lease_expires_at),
        claimed.task.lease.map(|l| l.lease_expires_at)
    );
    let last = detail.history.expect("history").pop().expect("events");
    assert_eq!(last.to_status, TaskStatus::InProgress);
    assert!(t.claim(&agent, json!({})).await.is_none(), "still held");

    // The holder's lease id still works.
    let result = t
        .update(
            &agent,
            json!({"task_id": task, "lease_id": claimed.lease_id, "status": "completed", "note": "done"}),
        )
        .await;
    assert!(matches!(result, UpdateResult::Applied { .. }), "{result:?}");
    t.stop().await;
}
