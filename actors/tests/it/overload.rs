//! The bound on an org's requests in flight: with the store's write lock
//! held elsewhere, one create waits for its commit; a further request for
//! the same org is refused as overloaded at once and writes nothing, while
//! another org is still served; once the lock goes, the waiting create
//! commits.

use std::time::{Duration, Instant};

use crate::support::{decode, eventually, TestEngine};
use serde_json::json;
use sqlx::Connection;
use taskq_actors::api::{CreateTasks, ListTasks, ListedTask, Text};
use taskq_actors::{Caller, Engine, EngineError, ErrorCode};

/// Long enough for a request that does not wait on the store, well short of
/// the store's 10 s busy timeout.
const AT_ONCE: Duration = Duration::from_secs(3);

fn one(title: &str) -> CreateTasks {
    decode(json!({"tasks": [{"title": title}]}))
}

async fn titles(engine: &Engine, caller: &Caller) -> Vec<Text> {
    engine
        .list_tasks(
            caller,
            taskq_actors::api::decode_query::<ListTasks>(Vec::new()).expect("query"),
        )
        .await
        .expect("list")
        .tasks
        .into_iter()
        .map(|t| match t {
            ListedTask::Lean(t) => t.title,
            ListedTask::Full(t) => t.title,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_org_at_its_in_flight_bound_is_refused_while_others_are_served() {
    let t = TestEngine::start_with(|config| config.org_in_flight = 1).await;
    let busy = t.org("busy").await;
    let other = t.org("other").await;
    let others_task = t.create_one(&other.owner, json!({"title": "theirs"})).await;
    // Both actors are up, and the busy org has published an empty queue.
    assert_eq!(t.engine.quota(&busy.owner).await.expect("quota").used, 0);
    assert!(t.engine.queue_depths().contains(&(busy.id, 0)));

    // Another connection takes SQLite's write lock: the writer stalls.
    let mut lock = sqlx::SqliteConnection::connect(&t.url)
        .await
        .expect("connect");
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut lock)
        .await
        .expect("write lock");
    let locked_at = Instant::now();

    let first = tokio::spawn({
        let engine = t.engine.clone();
        let caller = busy.owner.clone();
        async move { engine.create_tasks(&caller, one("first")).await }
    });
    // The actor publishes the new queue depth once it applied the create and
    // handed it to the writer; the request stays in flight until it commits.
    let (engine, busy_id) = (&t.engine, busy.id);
    eventually(
        "the first create is applied and waits for its commit",
        AT_ONCE,
        || async move { engine.queue_depths().contains(&(busy_id, 1)).then_some(()) },
    )
    .await;
    assert!(!first.is_finished(), "the first create waits for the lock");

    let refused = tokio::time::timeout(AT_ONCE, t.engine.create_tasks(&busy.owner, one("second")))
        .await
        .expect("a refusal does not wait for the store");
    match refused {
        Err(e @ EngineError::Overloaded) => assert_eq!(e.code(), ErrorCode::Overloaded),
        other => panic!("expected the busy org to be overloaded, got {other:?}"),
    }
    let refused = tokio::time::timeout(AT_ONCE, t.engine.quota(&busy.owner))
        .await
        .expect("a refusal does not wait for the store");
    assert!(
        matches!(refused, Err(EngineError::Overloaded)),
        "{refused:?}"
    );

    // The other org's actor and the store's readers still answer.
    let quota = tokio::time::timeout(AT_ONCE, t.engine.quota(&other.owner))
        .await
        .expect("the other org is served")
        .expect("quota");
    assert_eq!(quota.used, 1);
    let theirs = tokio::time::timeout(AT_ONCE, t.get(&other.owner, others_task))
        .await
        .expect("the other org is served");
    assert_eq!(theirs.task.title, Text::Plain("theirs".into()));
    let claim = tokio::time::timeout(
        AT_ONCE,
        t.claim(&other.owner, json!({"tags": ["none-such"]})),
    )
    .await
    .expect("the other org is served");
    assert!(claim.is_none());

    assert!(!first.is_finished(), "the lock is still held");
    assert!(
        locked_at.elapsed() < Duration::from_secs(8),
        "the lock must be released before the store's busy timeout"
    );
    sqlx::query("ROLLBACK")
        .execute(&mut lock)
        .await
        .expect("release");
    drop(lock);

    let created = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .expect("the first create completes once the lock is gone")
        .expect("create task")
        .expect("the first create commits");
    assert_eq!(created.created, 1);
    let id = created.results[0].task_id;
    assert_eq!(
        t.get(&busy.owner, id).await.task.title,
        Text::Plain("first".into())
    );
    assert_eq!(
        titles(&t.engine, &busy.owner).await,
        vec![Text::Plain("first".into())],
        "the refused create wrote nothing"
    );
    assert_eq!(t.engine.quota(&busy.owner).await.expect("quota").used, 1);

    // With nothing in flight the org takes requests again, and so does the other.
    t.create_one(&busy.owner, json!({"title": "after"})).await;
    t.create_one(&other.owner, json!({"title": "after"})).await;
    assert_eq!(titles(&t.engine, &busy.owner).await.len(), 2);
    t.stop().await;
}
