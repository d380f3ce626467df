//! Shared setup for the in-process engine tests: a real engine on a fresh
//! SQLite file in its own temp dir, with a clock the test moves; orgs whose
//! rate and volume limits are lifted; requests decoded from JSON as a front
//! end would; and a polling helper for conditions that take a moment.

// Each test file uses its own part of this module.
#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use taskq_actors::api::{
    AddMember, ClaimRequest, ClaimedTask, CreateAnswer, CreateOrg, CreateTasks, Decode, GetTasks,
    PatchOrg, TaskDetail, UpdateResult, UpdateTasks,
};
use taskq_actors::clock::{Clock, OffsetClock};
use taskq_actors::crypto::MasterKey;
use taskq_actors::domain::{OrgId, TaskId};
use taskq_actors::{Caller, Engine, EngineConfig};

/// Decodes a request body, as a front end would before calling the engine.
pub fn decode<T: Decode>(body: Value) -> T {
    T::decode(&body).unwrap_or_else(|e| panic!("a valid request {body}: {e}"))
}

/// A directory removed when dropped, also when a test fails.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An engine on its own SQLite file, with the clock it was started with.
pub struct TestEngine {
    pub engine: Engine,
    pub clock: Arc<OffsetClock>,
    /// The store's URL, for a test that opens its own connection to it.
    pub url: String,
    dir: TempDir,
}

impl TestEngine {
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// Starts an engine after `configure` adjusted its config.
    pub async fn start_with(configure: impl FnOnce(&mut EngineConfig)) -> Self {
        let dir = TempDir::new("taskq-core");
        let url = format!("sqlite://{}/taskq.db", dir.0.display());
        let master = MasterKey::from_base64(&MasterKey::generate_base64()).expect("key");
        let clock = Arc::new(OffsetClock::default());
        let mut config = EngineConfig::new(url.clone(), master);
        config.clock = clock.clone();
        configure(&mut config);
        let engine = Engine::start(config).await.expect("engine starts");
        Self {
            engine,
            clock,
            url,
            dir,
        }
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Creates an org (tier dev) whose per-minute, monthly and quota limits
    /// are lifted, so a test is never refused by a limit it does not test.
    pub async fn org(&self, name: &str) -> Org {
        let created = self
            .engine
            .create_org(decode::<CreateOrg>(
                json!({"name": name, "owner_email": format!("owner@{name}.io")}),
            ))
            .await
            .expect("org");
        let id = created.org.org_id;
        self.engine
            .patch_org(
                id,
                decode::<PatchOrg>(json!({"limits": {
                    "writes_per_minute": null,
                    "reads_per_minute": null,
                    "requests_per_month": null,
                    "tasks_per_month": null
                }})),
            )
            .await
            .expect("limits lifted");
        let owner = self
            .engine
            .authenticate(Some(&created.owner.api_key))
            .await
            .expect("owner key");
        Org {
            id,
            domain: format!("{name}.io"),
            owner,
        }
    }

    /// Adds a member with the role `user` and one key named `key_name`.
    pub async fn member(&self, org: &Org, local: &str, key_name: &str) -> Caller {
        let added = self
            .engine
            .add_member(
                org.id,
                decode::<AddMember>(json!({
                    "email": format!("{local}@{}", org.domain),
                    "role": "user",
                    "key_name": key_name
                })),
            )
            .await
            .expect("member");
        self.engine
            .authenticate(Some(&added.api_key))
            .await
            .expect("member key")
    }

    /// `POST /tasks` with `{"tasks": items}`.
    pub async fn create(&self, caller: &Caller, items: Value) -> CreateAnswer {
        self.engine
            .create_tasks(caller, decode::<CreateTasks>(json!({ "tasks": items })))
            .await
            .expect("tasks created")
    }

    /// Creates one task and answers its id.
    pub async fn create_one(&self, caller: &Caller, item: Value) -> TaskId {
        self.create(caller, json!([item])).await.results[0].task_id
    }

    /// `POST /tasks/claim` with the given body.
    pub async fn claim(&self, caller: &Caller, body: Value) -> Option<ClaimedTask> {
        self.engine
            .claim(caller, decode::<ClaimRequest>(body))
            .await
            .expect("claim answers")
    }

    /// `POST /tasks/update` with one item; answers that item's result.
    pub async fn update(&self, caller: &Caller, item: Value) -> UpdateResult {
        let mut answer = self
            .engine
            .update_tasks(caller, decode::<UpdateTasks>(json!({ "updates": [item] })))
            .await
            .expect("update answers");
        assert_eq!(answer.results.len(), 1);
        answer.results.remove(0)
    }

    /// `POST /tasks/get` with one id: the task with its history.
    pub async fn get(&self, caller: &Caller, id: TaskId) -> TaskDetail {
        let mut answer = self
            .engine
            .get_tasks(caller, decode::<GetTasks>(json!({ "task_ids": [id] })))
            .await
            .expect("get answers");
        assert_eq!(answer.not_found, Vec::<TaskId>::new(), "task {id} exists");
        answer.tasks.remove(0)
    }

    /// Shuts the engine down; the temp dir goes when `self` is dropped.
    pub async fn stop(self) {
        self.engine.shutdown().await;
    }
}

/// An org, its owner's caller, and the mail domain of its members.
pub struct Org {
    pub id: OrgId,
    pub domain: String,
    pub owner: Caller,
}

/// Polls `check` until it answers `Some`, or panics after `within`.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
