//! The engine's claim path in process, without HTTP: how long a claim takes
//! through the org actor, the group-commit writer and a durable SQLite
//! commit, and the same for a claim followed by its completion; each for
//! an org without webhook endpoints and for one with an endpoint that takes
//! every event (its outbox rows written in the same commits; nothing
//! delivers them here).
//!
//! Also what reading a cycle's two request bodies costs: each checked
//! against its type's schema, read by serde and validated, as every
//! front end reads them.
//!
//! Run with `cargo bench -p taskq-actors`.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;
use taskq_actors::api::{
    ClaimRequest, CreateOrg, CreateTasks, CreateWebhook, Decode, NewTask, PatchOrg, TaskUpdate,
    UpdateTasks,
};
use taskq_actors::crypto::MasterKey;
use taskq_actors::domain::TaskStatus;
use taskq_actors::{Caller, Engine, EngineConfig};

struct Fixture {
    engine: Engine,
    caller: Caller,
    _dir: std::path::PathBuf,
}

async fn fixture(webhook: bool) -> Fixture {
    let dir = std::env::temp_dir().join(format!("taskq-bench-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let url = format!("sqlite://{}/bench.db", dir.display());
    let master = MasterKey::from_base64(&MasterKey::generate_base64()).expect("key");
    let mut config = EngineConfig::new(url, master);
    config.webhooks_allow_private = true;
    let engine = Engine::start(config).await.expect("engine starts");
    let org = engine
        .create_org(
            CreateOrg::decode(
                &json!({"name": "bench", "owner_email": "owner@bench.local", "tier": "enterprise"}),
            )
            .expect("valid"),
        )
        .await
        .expect("org");
    let unlimited = PatchOrg::decode(&json!({"limits": {
        "writes_per_minute": null, "reads_per_minute": null,
        "requests_per_month": null, "tasks_per_month": null
    }}))
    .expect("valid");
    engine
        .patch_org(org.org.org_id, unlimited)
        .await
        .expect("limits lifted");
    let caller = engine
        .authenticate(Some(&org.owner.api_key))
        .await
        .expect("auth");
    if webhook {
        let endpoint = CreateWebhook::decode(&json!({
            "url": "http://127.0.0.1:9/bench", "events": ["*"]
        }))
        .expect("valid");
        engine
            .create_webhook(&caller, endpoint)
            .await
            .expect("webhook");
    }
    Fixture {
        engine,
        caller,
        _dir: dir,
    }
}

async fn fill(f: &Fixture, n: u64) {
    let mut left = n;
    while left > 0 {
        let batch = left.min(25);
        let tasks = (0..batch)
            .map(|i| NewTask::titled(format!("task {i}")))
            .collect();
        f.engine
            .create_tasks(&f.caller, CreateTasks { tasks })
            .await
            .expect("create");
        left -= batch;
    }
}

fn claim_path(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let plain = rt.block_on(fixture(false));
    let hooked = rt.block_on(fixture(true));
    let claim = ClaimRequest {
        include_context: false,
        lease_seconds: 300,
        ..ClaimRequest::default()
    };

    let mut group = c.benchmark_group("engine");
    group.measurement_time(Duration::from_secs(5));
    for (name, complete, f) in [
        ("claim", false, &plain),
        ("claim_and_complete", true, &plain),
        ("claim_webhook", false, &hooked),
        ("claim_and_complete_webhook", true, &hooked),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let (f, claim) = (&f, &claim);
                async move {
                    fill(f, iters).await;
                    let start = Instant::now();
                    for _ in 0..iters {
                        let task = f
                            .engine
                            .claim(&f.caller, claim.clone())
                            .await
                            .expect("claim")
                            .expect("a pending task");
                        if complete {
                            let mut done = TaskUpdate::new(task.task.task_id);
                            done.lease_id = Some(task.lease_id);
                            done.status = Some(TaskStatus::Completed);
                            done.note = Some("done".into());
                            done.output = json!({"ok": true}).as_object().cloned();
                            f.engine
                                .update_tasks(
                                    &f.caller,
                                    UpdateTasks {
                                        updates: vec![done],
                                    },
                                )
                                .await
                                .expect("complete");
                        }
                    }
                    start.elapsed()
                }
            })
        });
    }
    group.finish();
}

/// The bodies `taskq bench` sends for one cycle: its claim, and the
/// completion of the claimed task with its lease.
fn reading_requests(c: &mut Criterion) {
    let claim = json!({"lease_seconds": 300, "include_context": false});
    let complete = json!({"updates": [{
        "task_id": uuid::Uuid::now_v7().to_string(),
        "status": "completed",
        "note": "done",
        "output": {"ok": true},
        "lease_id": uuid::Uuid::new_v4().to_string(),
    }]});
    let mut group = c.benchmark_group("requests");
    group.bench_function("claim", |b| {
        b.iter(|| ClaimRequest::decode(std::hint::black_box(&claim)).expect("valid"))
    });
    group.bench_function("complete", |b| {
        b.iter(|| UpdateTasks::decode(std::hint::black_box(&complete)).expect("valid"))
    });
    group.finish();
}

criterion_group!(benches, claim_path, reading_requests);
criterion_main!(benches);
