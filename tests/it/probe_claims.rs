//! Exactly-once claims at 64-way concurrency.
//!
//! 640 tasks, 64 agents each with its own key, all looping claim -> complete
//! at once until the queue answers `null`. A task handed to two agents, a
//! task never handed out, or a claim that leaves a second `pending ->
//! in_progress` event behind would all be visible to the people running the
//! agents: double work, stuck work, or a history that lies. So:
//!
//! - the claimed ids are exactly the created ones, none twice;
//! - each claimed task is assigned to the key that claimed it;
//! - every task ends `completed` with the claimer's output;
//! - each task's history has exactly one `pending -> in_progress` event,
//!   written for the claiming key, and ends with that key's completion.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::common::*;

const AGENTS: usize = 64;
const TASKS: usize = 640;

/// Claims and completes until the queue is empty; returns the claimed ids.
async fn work_until_empty(srv: Arc<TestServer>, name: String, key: String) -> Vec<String> {
    let mut claimed = Vec::new();
    while let Some(task) = srv
        .claim(
            &key,
            json!({ "lease_seconds": 600, "include_context": false }),
        )
        .await
    {
        let id = str_field(&task, "task_id");
        assert_eq!(task["status"], "in_progress", "{task}");
        assert_eq!(task["assignee"], name.as_str(), "{task}");
        let (status, body) = srv
            .update(
                &key,
                json!([{
                    "task_id": id,
                    "lease_id": task["lease_id"],
                    "status": "completed",
                    "note": format!("done by {name}"),
                    "output": { "by": name },
                }]),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{name} completing {id}: {body}");
        assert_eq!(body["results"][0]["status"], "completed", "{body}");
        claimed.push(id);
    }
    claimed
}

backend_tests!(
    sixty_four_agents_claim_every_task_exactly_once,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let mut created = HashSet::new();
        let mut n = 0;
        while n < TASKS {
            let batch = (TASKS - n).min(25);
            let items: Vec<Value> = (n..n + batch)
                .map(|i| json!({ "title": format!("job {i}"), "priority": 1 + i % 5 }))
                .collect();
            created.extend(ids(&srv.create_tasks(&org.owner_key, json!(items)).await));
            n += batch;
        }
        assert_eq!(created.len(), TASKS);
        let mut keys = Vec::new();
        for i in 0..AGENTS {
            let name = format!("agent-{i:02}");
            let (_, key) = srv.new_key(&org.owner_key, &name).await;
            keys.push((name, key));
        }

        let srv = Arc::new(srv);
        let mut agents = tokio::task::JoinSet::new();
        for (name, key) in keys {
            let srv = srv.clone();
            agents.spawn(async move {
                let claimed = work_until_empty(srv, name.clone(), key).await;
                (name, claimed)
            });
        }
        let mut claimer: HashMap<String, String> = HashMap::new();
        let mut twice = Vec::new();
        let mut busy_agents = 0;
        while let Some(joined) = agents.join_next().await {
            let (name, claimed) = joined.expect("agent panicked");
            busy_agents += usize::from(!claimed.is_empty());
            for id in claimed {
                if let Some(first) = claimer.insert(id.clone(), name.clone()) {
                    twice.push(format!("{id} by {first} and {name}"));
                }
            }
        }
        assert!(twice.is_empty(), "tasks claimed twice: {twice:?}");
        let claimed: HashSet<String> = claimer.keys().cloned().collect();
        assert_eq!(
            claimed.len(),
            TASKS,
            "{} tasks never handed out",
            TASKS - claimed.len()
        );
        assert_eq!(claimed, created, "claimed ids differ from the created ones");
        eprintln!("{busy_agents} of {AGENTS} agents got work");
        assert!(srv.claim(&org.owner_key, json!({})).await.is_none());

        let listed = srv.list_all(&org.owner_key, "full=true").await;
        assert_eq!(listed.len(), TASKS);
        for task in &listed {
            let id = str_field(task, "task_id");
            assert_eq!(task["status"], "completed", "{task}");
            assert_eq!(task["assignee"], claimer[&id].as_str(), "{task}");
            assert_eq!(task["output"], json!({ "by": claimer[&id] }), "{task}");
        }

        // Every history, read eight at a time.
        let mut order: Vec<String> = created.into_iter().collect();
        order.sort();
        for chunk in order.chunks(8) {
            let mut reads = tokio::task::JoinSet::new();
            for id in chunk {
                let srv = srv.clone();
                let key = org.owner_key.clone();
                let id = id.clone();
                reads.spawn(async move { srv.get_task(&key, &id).await });
            }
            while let Some(joined) = reads.join_next().await {
                let task = joined.expect("read panicked");
                let id = str_field(&task, "task_id");
                let events = history(&task);
                let claims: Vec<&Value> = events
                    .iter()
                    .filter(|e| e["from_status"] == "pending" && e["to_status"] == "in_progress")
                    .collect();
                assert_eq!(claims.len(), 1, "one claim event per task: {task}");
                assert_eq!(claims[0]["agent_id"], claimer[&id].as_str(), "{task}");
                let last = events.last().unwrap();
                assert_eq!(last["from_status"], "in_progress", "{task}");
                assert_eq!(last["to_status"], "completed", "{task}");
                assert_eq!(last["note"], format!("done by {}", claimer[&id]), "{task}");
                assert_eq!(events.len(), 3, "create, claim, complete: {task}");
            }
        }
    }
);
