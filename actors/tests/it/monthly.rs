//! Monthly allowances at a month boundary, in process with a movable clock:
//! no waiting a month.

use std::sync::Arc;

use serde_json::json;
use taskq_actors::api::{CreateTasks, Decode, NewTask};
use taskq_actors::clock::{Clock, OffsetClock};
use taskq_actors::crypto::MasterKey;
use taskq_actors::domain::usage::next_month_start;
use taskq_actors::{Engine, EngineConfig, EngineError, LimitExceeded, LimitKind};

fn decode<T: Decode>(body: serde_json::Value) -> T {
    T::decode(&body).expect("a valid request")
}

fn master() -> MasterKey {
    MasterKey::from_base64(&MasterKey::generate_base64()).expect("key")
}

async fn engine_at(dir: &std::path::Path, master: MasterKey, clock: Arc<OffsetClock>) -> Engine {
    let url = format!("sqlite://{}/taskq.db", dir.display());
    let mut config = EngineConfig::new(url, master);
    config.clock = clock;
    Engine::start(config).await.expect("engine starts")
}

async fn engine(clock: Arc<OffsetClock>) -> (Engine, std::path::PathBuf, MasterKey) {
    let dir = std::env::temp_dir().join(format!("taskq-monthly-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let master = master();
    (engine_at(&dir, master.clone(), clock).await, dir, master)
}

/// Moves the clock just past the start of next month.
fn cross_month(clock: &OffsetClock) {
    let now = clock.now_ms();
    clock.advance(next_month_start(now) - now + 1_000);
}

#[tokio::test]
async fn plan_allowance_is_charged_and_resets_with_the_month() {
    let clock = Arc::new(OffsetClock::default());
    let (engine, dir, _) = engine(clock.clone()).await;
    let org = engine
        .create_org(decode(
            json!({"name": "p", "tier": "pro", "owner_email": "o@p.io"}),
        ))
        .await
        .expect("org");
    engine
        .patch_org(
            org.org.org_id,
            decode(json!({"limits": {"plans_per_month": 2}})),
        )
        .await
        .expect("limits");
    let caller = engine
        .authenticate(Some(&org.owner.api_key))
        .await
        .expect("owner key");

    assert_eq!(
        engine.charge_plan_allowance(&caller).await.unwrap(),
        Some(1)
    );
    assert_eq!(
        engine.charge_plan_allowance(&caller).await.unwrap(),
        Some(0)
    );
    match engine.charge_plan_allowance(&caller).await {
        Err(EngineError::Limit(LimitExceeded {
            kind: LimitKind::MonthlyPlans,
            limit: 2,
            ..
        })) => {}
        other => panic!("expected the plan allowance to be spent, got {other:?}"),
    }
    cross_month(&clock);
    assert_eq!(
        engine.charge_plan_allowance(&caller).await.unwrap(),
        Some(1)
    );
    engine.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn task_quota_resets_on_the_first_and_counts_survive_a_restart() {
    let clock = Arc::new(OffsetClock::default());
    let (engine, dir, master) = engine(clock.clone()).await;
    let org = engine
        .create_org(decode(json!({"name": "q", "owner_email": "o@q.io"})))
        .await
        .expect("org");
    engine
        .patch_org(
            org.org.org_id,
            decode(json!({"limits": {"tasks_per_month": 3}})),
        )
        .await
        .expect("limits");
    let key = org.owner.api_key.clone();
    let caller = engine.authenticate(Some(&key)).await.expect("owner key");
    let batch = |n: usize| CreateTasks {
        tasks: (0..n).map(|i| NewTask::titled(format!("t{i}"))).collect(),
    };

    engine
        .create_tasks(&caller, batch(2))
        .await
        .expect("two tasks");
    match engine.create_tasks(&caller, batch(2)).await {
        Err(EngineError::Limit(LimitExceeded {
            kind: LimitKind::MonthlyTasks,
            limit: 3,
            ..
        })) => {}
        other => panic!("expected the task quota to refuse, got {other:?}"),
    }
    assert_eq!(engine.quota(&caller).await.unwrap().used, 2);
    engine.shutdown().await;

    // The count is stored with the tasks: a new engine on the same store sees it.
    let again = engine_at(&dir, master, clock.clone()).await;
    let caller = again.authenticate(Some(&key)).await.expect("owner key");
    let quota = again.quota(&caller).await.unwrap();
    assert_eq!((quota.used, quota.remaining), (2, Some(1)));

    cross_month(&clock);
    let quota = again.quota(&caller).await.unwrap();
    assert_eq!((quota.used, quota.remaining), (0, Some(3)));
    again
        .create_tasks(&caller, batch(3))
        .await
        .expect("a fresh month");
    again.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}
