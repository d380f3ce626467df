//! Dependencies: a completed blocker releases its dependents, a failed or
//! canceled one takes its blocked dependents with it, transitively, and a
//! retried blocker does not bring them back.

use crate::support::{Org, TestEngine};
use serde_json::json;
use taskq_actors::api::{CreateAnswer, ItemError, TaskEvent, UpdateResult};
use taskq_actors::domain::{TaskId, TaskStatus};

/// The id of the created item named `reference`.
fn by_ref(created: &CreateAnswer, reference: &str) -> TaskId {
    created
        .results
        .iter()
        .find(|r| r.reference.as_deref() == Some(reference))
        .unwrap_or_else(|| panic!("an item named {reference}"))
        .task_id
}

/// A root, a child blocked by it and a grandchild blocked by the child.
async fn chain(t: &TestEngine, org: &Org) -> (TaskId, TaskId, TaskId) {
    let created = t
        .create(
            &org.owner,
            json!([
                {"title": "root", "ref": "root"},
                {"title": "child", "ref": "child", "blocked_by": ["ref:root"]},
                {"title": "grandchild", "ref": "grandchild", "blocked_by": ["ref:child"]}
            ]),
        )
        .await;
    (
        by_ref(&created, "root"),
        by_ref(&created, "child"),
        by_ref(&created, "grandchild"),
    )
}

async fn status(t: &TestEngine, org: &Org, id: TaskId) -> TaskStatus {
    t.get(&org.owner, id).await.task.status
}

async fn last_event(t: &TestEngine, org: &Org, id: TaskId) -> TaskEvent {
    t.get(&org.owner, id)
        .await
        .history
        .expect("history")
        .pop()
        .expect("events")
}

/// Moves a task to `to` by update, with an assignee and a note, and checks
/// the item applied.
async fn finish(t: &TestEngine, org: &Org, id: TaskId, to: &str) {
    let result = t
        .update(
            &org.owner,
            json!({"task_id": id, "status": to, "note": format!("{to} by hand"),
                   "assignee": org.owner.key_name}),
        )
        .await;
    assert!(matches!(result, UpdateResult::Applied { .. }), "{result:?}");
}

/// Checks a cascade moved `id` to `to` by a system event naming `blocker`.
async fn cascaded(t: &TestEngine, org: &Org, id: TaskId, to: TaskStatus, blocker: TaskId) {
    let event = last_event(t, org, id).await;
    assert_eq!(
        (event.from_status, event.to_status),
        (Some(TaskStatus::Blocked), to)
    );
    assert_eq!(event.agent_id, "system");
    let note = event
        .note
        .as_ref()
        .and_then(|n| n.as_plain())
        .unwrap_or_default();
    assert!(
        note.contains(&blocker.to_string()),
        "the note {note:?} names the blocker {blocker}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completing_a_blocker_releases_dependents_with_no_other_live_blocker() {
    let t = TestEngine::start().await;
    let org = t.org("release").await;
    let created = t
        .create(
            &org.owner,
            json!([
                {"title": "needs a and b", "ref": "ab", "blocked_by": ["ref:a", "ref:b"]},
                {"title": "a", "ref": "a"},
                {"title": "needs a", "ref": "only-a", "blocked_by": ["ref:a"]},
                {"title": "b", "ref": "b"}
            ]),
        )
        .await;
    let (a, b) = (by_ref(&created, "a"), by_ref(&created, "b"));
    let (only_a, ab) = (by_ref(&created, "only-a"), by_ref(&created, "ab"));
    let statuses: Vec<_> = created
        .results
        .iter()
        .map(|r| (r.reference.clone().unwrap(), r.status))
        .collect();
    assert_eq!(
        statuses,
        vec![
            ("ab".to_owned(), TaskStatus::Blocked),
            ("a".to_owned(), TaskStatus::Pending),
            ("only-a".to_owned(), TaskStatus::Blocked),
            ("b".to_owned(), TaskStatus::Pending),
        ]
    );
    let deps = t.get(&org.owner, ab).await.dependencies;
    assert_eq!(deps.len(), 2);
    assert!(deps.iter().all(|d| d.status == TaskStatus::Pending));

    // Leaving pending by update needs an assignee; without one nothing moves.
    let result = t
        .update(
            &org.owner,
            json!({"task_id": a, "status": "completed", "note": "done"}),
        )
        .await;
    assert!(
        matches!(
            result,
            UpdateResult::Failed {
                error: ItemError::AssigneeRequired,
                ..
            }
        ),
        "{result:?}"
    );
    assert_eq!(status(&t, &org, a).await, TaskStatus::Pending);
    assert_eq!(status(&t, &org, only_a).await, TaskStatus::Blocked);

    finish(&t, &org, a, "completed").await;
    assert_eq!(status(&t, &org, only_a).await, TaskStatus::Pending);
    cascaded(&t, &org, only_a, TaskStatus::Pending, a).await;
    assert_eq!(
        status(&t, &org, ab).await,
        TaskStatus::Blocked,
        "b is still live"
    );

    finish(&t, &org, b, "completed").await;
    assert_eq!(status(&t, &org, ab).await, TaskStatus::Pending);
    cascaded(&t, &org, ab, TaskStatus::Pending, b).await;

    // Both released tasks are in the queue now.
    let mut claimed = Vec::new();
    while let Some(c) = t.claim(&org.owner, json!({"include_context": false})).await {
        claimed.push(c.task.task_id);
    }
    claimed.sort();
    let mut want = vec![only_a, ab];
    want.sort();
    assert_eq!(claimed, want);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_a_blocker_fails_its_blocked_dependents_transitively() {
    let t = TestEngine::start().await;
    let org = t.org("fail").await;
    let created = t
        .create(
            &org.owner,
            json!([
                {"title": "root", "ref": "root"},
                {"title": "child", "ref": "child", "blocked_by": ["ref:root"]},
                {"title": "grandchild", "ref": "grandchild", "blocked_by": ["ref:child"]},
                {"title": "other", "ref": "other"},
                {"title": "sibling", "ref": "sibling", "blocked_by": ["ref:other", "ref:root"]}
            ]),
        )
        .await;
    let root = by_ref(&created, "root");
    let child = by_ref(&created, "child");
    let grandchild = by_ref(&created, "grandchild");
    let sibling = by_ref(&created, "sibling");
    let other = by_ref(&created, "other");

    finish(&t, &org, root, "failed").await;
    cascaded(&t, &org, child, TaskStatus::Failed, root).await;
    cascaded(&t, &org, grandchild, TaskStatus::Failed, child).await;
    cascaded(&t, &org, sibling, TaskStatus::Failed, root).await;
    assert_eq!(
        status(&t, &org, other).await,
        TaskStatus::Pending,
        "a blocker is not touched by its dependents' fate"
    );
    assert!(t
        .claim(&org.owner, json!({"include_context": false}))
        .await
        .is_some_and(|c| c.task.task_id == other));
    assert!(t.claim(&org.owner, json!({})).await.is_none());
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canceling_a_blocker_cancels_its_blocked_dependents_transitively() {
    let t = TestEngine::start().await;
    let org = t.org("cancel").await;
    let (root, child, grandchild) = chain(&t, &org).await;

    finish(&t, &org, root, "canceled").await;
    cascaded(&t, &org, child, TaskStatus::Canceled, root).await;
    cascaded(&t, &org, grandchild, TaskStatus::Canceled, child).await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cascaded_dependent_stays_failed_when_its_blocker_is_retried() {
    let t = TestEngine::start().await;
    let org = t.org("retry").await;
    let (root, child, grandchild) = chain(&t, &org).await;
    finish(&t, &org, root, "failed").await;

    // Retry: failed -> pending needs no assignee and no note.
    let result = t
        .update(&org.owner, json!({"task_id": root, "status": "pending"}))
        .await;
    assert!(
        matches!(
            result,
            UpdateResult::Applied {
                status: TaskStatus::Pending,
                ..
            }
        ),
        "{result:?}"
    );
    assert_eq!(status(&t, &org, child).await, TaskStatus::Failed);
    assert_eq!(status(&t, &org, grandchild).await, TaskStatus::Failed);

    // Completing the retried blocker does not revive them either.
    finish(&t, &org, root, "completed").await;
    assert_eq!(status(&t, &org, child).await, TaskStatus::Failed);
    assert_eq!(status(&t, &org, grandchild).await, TaskStatus::Failed);

    // The dependent can be retried itself; its blocker is done, so it is pending.
    let result = t
        .update(&org.owner, json!({"task_id": child, "status": "pending"}))
        .await;
    assert!(matches!(result, UpdateResult::Applied { .. }), "{result:?}");
    assert_eq!(status(&t, &org, child).await, TaskStatus::Pending);
    assert_eq!(status(&t, &org, grandchild).await, TaskStatus::Failed);
    t.stop().await;
}
