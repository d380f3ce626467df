//! A commit that fails leaves nothing behind: the caller gets an error, the
//! org's actor reloads from the store, and its memory holds nothing the
//! store does not.

use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::Connection;
use taskq_actors::api::{
    AddMember, ClaimRequest, CreateOrg, CreateTasks, Decode, ListTasks, ListedTask, NewTask, Text,
};
use taskq_actors::crypto::MasterKey;
use taskq_actors::{Engine, EngineConfig, EngineError};

fn decode<T: Decode>(body: serde_json::Value) -> T {
    T::decode(&body).expect("a valid request")
}

fn one(title: &str) -> CreateTasks {
    CreateTasks {
        tasks: vec![NewTask::titled(title)],
    }
}

#[tokio::test]
async fn a_failed_commit_is_not_served_and_the_org_recovers() {
    let dir = std::env::temp_dir().join(format!("taskq-commit-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let url = format!("sqlite://{}/taskq.db", dir.display());
    let master = MasterKey::from_base64(&MasterKey::generate_base64()).expect("key");
    let engine = Engine::start(EngineConfig::new(url.clone(), master))
        .await
        .expect("engine starts");
    let org = engine
        .create_org(decode::<CreateOrg>(
            json!({"name": "c", "owner_email": "owner@c.io"}),
        ))
        .await
        .expect("org");
    let owner = engine
        .authenticate(Some(&org.owner.api_key))
        .await
        .expect("owner");
    let poison = engine
        .add_member(
            org.org.org_id,
            decode::<AddMember>(json!({"email": "p@c.io", "role": "user", "key_name": "poison"})),
        )
        .await
        .expect("member");
    let poison = engine
        .authenticate(Some(&poison.api_key))
        .await
        .expect("poison key");

    // The store refuses any event written by the key named "poison".
    let mut conn = sqlx::SqliteConnection::connect(&url)
        .await
        .expect("connect");
    sqlx::query(
        "CREATE TRIGGER refuse_poison BEFORE INSERT ON task_events \
         WHEN NEW.agent_id = 'poison' BEGIN SELECT RAISE(ABORT, 'refused'); END",
    )
    .execute(&mut conn)
    .await
    .expect("trigger");

    let refused = engine.create_tasks(&poison, one("never stored")).await;
    assert!(
        matches!(refused, Err(EngineError::Store(_))),
        "a failed commit must fail the request: {refused:?}"
    );

    // The actor restarts from the store; until it has, requests may be refused.
    let deadline = Instant::now() + Duration::from_secs(10);
    let created = loop {
        match engine.create_tasks(&owner, one("kept")).await {
            Ok(created) => break created,
            Err(e) if Instant::now() < deadline => {
                eprintln!("retrying after {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the org did not recover: {e}"),
        }
    };

    let listed = engine
        .list_tasks(
            &owner,
            taskq_actors::api::decode_query::<ListTasks>(Vec::new()).unwrap(),
        )
        .await
        .expect("list");
    let titles: Vec<Text> = listed
        .tasks
        .into_iter()
        .map(|t| match t {
            ListedTask::Lean(t) => t.title,
            ListedTask::Full(t) => t.title,
        })
        .collect();
    assert_eq!(
        titles,
        vec![Text::Plain("kept".into())],
        "only the committed task exists"
    );

    // Memory holds what the store holds: one claimable task, then none.
    let claim = ClaimRequest {
        include_context: false,
        ..ClaimRequest::default()
    };
    let claimed = engine.claim(&owner, claim.clone()).await.expect("claim");
    assert_eq!(
        claimed.map(|t| t.task.task_id),
        Some(created.results[0].task_id)
    );
    assert!(engine.claim(&owner, claim).await.expect("claim").is_none());

    engine.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}
