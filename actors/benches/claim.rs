//! The engine's claim path in process, without HTTP: how long a claim takes
//! through the org actor, the group-commit writer and a durable SQLite
//! commit, and the same for a claim followed by its completion.
//!
//! Run with `cargo bench -p taskq-actors`.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};
use taskq_actors::crypto::MasterKey;
use taskq_actors::domain::account::Caller;
use taskq_actors::{Engine, EngineConfig};

struct Fixture {
    engine: Engine,
    caller: Caller,
    _dir: std::path::PathBuf,
}

async fn fixture() -> Fixture {
    let dir = std::env::temp_dir().join(format!("taskq-bench-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let url = format!("sqlite://{}/bench.db", dir.display());
    let master = MasterKey::from_base64(&MasterKey::generate_base64()).expect("key");
    let engine = Engine::start(EngineConfig::new(url, master))
        .await
        .expect("engine starts");
    let org = engine
        .create_org(
            &json!({"name": "bench", "owner_email": "owner@bench.local", "tier": "enterprise"}),
        )
        .await
        .expect("org");
    let unlimited = json!({"limits": {
        "writes_per_minute": null, "reads_per_minute": null,
        "requests_per_month": null, "tasks_per_month": null
    }});
    engine
        .patch_org(org["org_id"].as_str().expect("org id"), &unlimited)
        .await
        .expect("limits lifted");
    let key = org["owner"]["api_key"].as_str().expect("key").to_owned();
    let caller = engine.authenticate(Some(&key)).await.expect("auth");
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
        let tasks: Vec<Value> = (0..batch)
            .map(|i| json!({"title": format!("task {i}")}))
            .collect();
        f.engine
            .create_tasks(&f.caller, &json!({ "tasks": tasks }))
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
    let f = rt.block_on(fixture());
    let claim = json!({"include_context": false, "lease_seconds": 300});

    let mut group = c.benchmark_group("engine");
    group.measurement_time(Duration::from_secs(5));
    for (name, complete) in [("claim", false), ("claim_and_complete", true)] {
        group.bench_function(name, |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let (f, claim) = (&f, &claim);
                async move {
                    fill(f, iters).await;
                    let start = Instant::now();
                    for _ in 0..iters {
                        let task = f
                            .engine
                            .claim(&f.caller, claim)
                            .await
                            .expect("claim")
                            .expect("a pending task");
                        if complete {
                            let update = json!({"updates": [{
                                "task_id": task["task_id"],
                                "lease_id": task["lease_id"],
                                "status": "completed",
                                "note": "done",
                                "output": {"ok": true}
                            }]});
                            f.engine
                                .update_tasks(&f.caller, &update)
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

criterion_group!(benches, claim_path);
criterion_main!(benches);
