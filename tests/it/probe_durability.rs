//! Durability under `kill -9` while eight agents work.
//!
//! Eight agents, each with its own key, loop: create a task with a
//! client-minted `task_id`, claim the next task, complete it with the
//! claim's `lease_id`, a note and an output. Each agent writes down what it
//! sent and what the server acknowledged (a 201 create, a 200 completion).
//! Once a few hundred acknowledgements have come back the server is killed
//! with SIGKILL in the middle of the traffic and started again, three times
//! over. After every restart:
//!
//! - every acknowledged create exists, with the title that was sent;
//! - every acknowledged completion reads `completed` with its output, and
//!   the completion's state event carries its note;
//! - no task exists that was never sent, and no task is completed whose
//!   completion was never sent;
//! - the restarted queue hands out exactly the tasks that read `pending`.
//!
//! Requests cut off by the kill are not acknowledged, so their effect may or
//! may not have been kept; anything else the server answers while alive
//! (a 5xx, an unexpected status) fails the test.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;

const AGENTS: usize = 8;
const CYCLES: usize = 3;
/// Acknowledgements (creates plus completions) to wait for before each kill.
const ACKS_PER_CYCLE: usize = 300;
/// An agent that is still looping this long after its cycle began means the
/// kill never reached it.
const MAX_STEPS_PER_AGENT: usize = 5_000;

/// What the agents sent and what the server acknowledged, shared by all.
#[derive(Default)]
struct Ledger {
    /// Every create that left an agent: task id -> title.
    sent: HashMap<String, String>,
    /// Task ids whose create was answered 201.
    created: HashSet<String>,
    /// Every completion that left an agent: task id -> (output, note).
    completion_sent: HashMap<String, (Value, String)>,
    /// Completions answered 200, in the order they were acknowledged.
    completed: Vec<String>,
    /// Answers that are neither an acknowledgement nor a cut connection.
    unexpected: Vec<String>,
}

impl Ledger {
    fn acks(&self) -> usize {
        self.created.len() + self.completed.len()
    }
}

type Shared = Arc<Mutex<Ledger>>;

/// One agent's HTTP calls against the current server process.
struct Agent {
    name: String,
    key: String,
    base_url: String,
    http: reqwest::Client,
}

impl Agent {
    /// POST; `None` when the connection failed (the server was killed).
    async fn post(&self, path: &str, body: &Value) -> Option<(StatusCode, Value)> {
        let resp = self
            .http
            .post(format!("{}{path}", self.base_url))
            .header("x-api-key", &self.key)
            .json(body)
            .send()
            .await
            .ok()?;
        let status = resp.status();
        let text = resp.text().await.ok()?;
        let body = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Some((status, body))
    }

    /// Creates, claims and completes until a request is cut off.
    async fn run(self, cycle: usize, ledger: Shared) {
        for step in 0..MAX_STEPS_PER_AGENT {
            // Create one task under an id minted here.
            let id = new_uuid();
            let title = format!("{} c{cycle} s{step}", self.name);
            ledger
                .lock()
                .unwrap()
                .sent
                .insert(id.clone(), title.clone());
            let body = json!({ "tasks": [{ "task_id": id, "title": title }] });
            let Some((status, answer)) = self.post("/tasks", &body).await else {
                return;
            };
            if status == StatusCode::CREATED && answer["results"][0]["task_id"] == id.as_str() {
                ledger.lock().unwrap().created.insert(id);
            } else {
                return self.unexpected(&ledger, "POST /tasks", status, &answer);
            }

            // Claim the next task, whoever created it.
            let body = json!({ "lease_seconds": 600, "include_context": false });
            let Some((status, task)) = self.post("/tasks/claim", &body).await else {
                return;
            };
            if status != StatusCode::OK {
                return self.unexpected(&ledger, "POST /tasks/claim", status, &task);
            }
            if task.is_null() {
                continue;
            }
            let (Some(task_id), Some(lease_id)) =
                (task["task_id"].as_str(), task["lease_id"].as_str())
            else {
                return self.unexpected(&ledger, "POST /tasks/claim", status, &task);
            };

            // Complete it under the claim's lease.
            let output = json!({ "agent": self.name, "task": task_id, "step": step });
            let note = format!("done by {} at step {step}", self.name);
            ledger
                .lock()
                .unwrap()
                .completion_sent
                .insert(task_id.to_string(), (output.clone(), note.clone()));
            let body = json!({ "updates": [{
                "task_id": task_id,
                "lease_id": lease_id,
                "status": "completed",
                "note": note,
                "output": output,
            }] });
            let Some((status, answer)) = self.post("/tasks/update", &body).await else {
                return;
            };
            if status == StatusCode::OK && answer["results"][0]["status"] == "completed" {
                ledger.lock().unwrap().completed.push(task_id.to_string());
            } else {
                return self.unexpected(&ledger, "POST /tasks/update", status, &answer);
            }
        }
        ledger.lock().unwrap().unexpected.push(format!(
            "{} still running after {MAX_STEPS_PER_AGENT} steps",
            self.name
        ));
    }

    fn unexpected(&self, ledger: &Shared, route: &str, status: StatusCode, body: &Value) {
        ledger
            .lock()
            .unwrap()
            .unexpected
            .push(format!("{}: {route} answered {status}: {body}", self.name));
    }
}

/// Checks everything the ledger says against the restarted server.
async fn check_acknowledged_writes(srv: &TestServer, key: &str, ledger: &Shared, cycle: usize) {
    let stored: HashMap<String, Value> = srv
        .list_all(key, "full=true")
        .await
        .into_iter()
        .map(|t| (str_field(&t, "task_id"), t))
        .collect();
    let recent = {
        let ledger = ledger.lock().unwrap();
        let lost: Vec<&String> = ledger
            .created
            .iter()
            .filter(|id| !stored.contains_key(*id))
            .collect();
        assert!(
            lost.is_empty(),
            "cycle {cycle}: {} of {} acknowledged creates lost: {lost:?}",
            lost.len(),
            ledger.created.len()
        );
        for (id, task) in &stored {
            let title = ledger
                .sent
                .get(id)
                .unwrap_or_else(|| panic!("cycle {cycle}: a task that was never sent: {task}"));
            assert_eq!(task["title"], title.as_str(), "cycle {cycle}: {task}");
            if task["status"] == "completed" {
                let (output, _) = ledger.completion_sent.get(id).unwrap_or_else(|| {
                    panic!("cycle {cycle}: completed without a completion sent: {task}")
                });
                assert_eq!(&task["output"], output, "cycle {cycle}: {task}");
            }
        }
        for id in &ledger.completed {
            let task = stored.get(id).unwrap_or_else(|| {
                panic!("cycle {cycle}: the task of an acknowledged completion is gone: {id}")
            });
            assert_eq!(
                task["status"], "completed",
                "cycle {cycle}: an acknowledged completion was lost: {task}"
            );
            assert_eq!(task["output"], ledger.completion_sent[id].0, "{task}");
        }
        // The notes live in the history: read it for the completions
        // acknowledged last before the kill, the ones most at risk.
        ledger
            .completed
            .iter()
            .rev()
            .take(20)
            .map(|id| (id.clone(), ledger.completion_sent[id].1.clone()))
            .collect::<Vec<(String, String)>>()
    };
    for (id, note) in recent {
        let task = srv.get_task(key, &id).await;
        let last = history(&task).last().cloned().unwrap();
        assert_eq!(last["to_status"], "completed", "cycle {cycle}: {task}");
        assert_eq!(last["note"], note.as_str(), "cycle {cycle}: {task}");
    }
}

backend_tests!(
    kill9_under_eight_concurrent_agents_loses_no_acknowledged_write,
    |mut srv| async move {
        let org = srv.create_org("dev").await;
        let mut keys = Vec::new();
        for i in 0..AGENTS {
            let name = format!("agent-{i}");
            let (_, key) = srv.new_key(&org.owner_key, &name).await;
            keys.push((name, key));
        }
        taskq::install_crypto_provider();
        let ledger: Shared = Arc::default();

        for cycle in 0..CYCLES {
            let target = ledger.lock().unwrap().acks() + ACKS_PER_CYCLE;
            // A fresh client per process: no connection outlives its server.
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("http client");
            let mut agents = tokio::task::JoinSet::new();
            for (name, key) in &keys {
                let agent = Agent {
                    name: name.clone(),
                    key: key.clone(),
                    base_url: srv.base_url.clone(),
                    http: http.clone(),
                };
                agents.spawn(agent.run(cycle, ledger.clone()));
            }
            eventually(
                Duration::from_secs(90),
                "a few hundred acknowledgements",
                || async {
                    let ledger = ledger.lock().unwrap();
                    assert!(
                        ledger.unexpected.is_empty(),
                        "cycle {cycle}: {:?}",
                        ledger.unexpected
                    );
                    (ledger.acks() >= target).then_some(())
                },
            )
            .await;

            srv.kill9().await;
            while let Some(joined) = agents.join_next().await {
                joined.expect("agent panicked");
            }
            {
                let ledger = ledger.lock().unwrap();
                assert!(
                    ledger.unexpected.is_empty(),
                    "cycle {cycle}: {:?}",
                    ledger.unexpected
                );
                eprintln!(
                    "cycle {cycle}: {} of {} creates and {} of {} completions acknowledged so far",
                    ledger.created.len(),
                    ledger.sent.len(),
                    ledger.completed.len(),
                    ledger.completion_sent.len(),
                );
            }

            srv.start_again().await;
            check_acknowledged_writes(&srv, &org.owner_key, &ledger, cycle).await;
        }

        // The restarted queue hands out exactly the tasks that read pending,
        // each once, and then answers null.
        let mut pending: HashSet<String> = srv
            .list_ids(&org.owner_key, "status=pending")
            .await
            .into_iter()
            .collect();
        let expected = pending.len();
        while let Some(task) = srv
            .claim(&org.owner_key, json!({ "include_context": false }))
            .await
        {
            let id = str_field(&task, "task_id");
            assert!(
                pending.remove(&id),
                "claimed a task that did not read pending (or twice): {task}"
            );
        }
        assert!(
            pending.is_empty(),
            "{} of {expected} pending tasks were never handed out: {pending:?}",
            pending.len()
        );
    }
);
