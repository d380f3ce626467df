//! Several `taskq serve` processes on one PostgreSQL database (CONTRACT.md
//! §6): any node answers for any org as its owner would, claims raced over
//! the nodes are never handed out twice, and a node killed, frozen or
//! restarted loses nothing that was acknowledged; and the nodes' own
//! route, which a node alone (SQLite) does not have. PostgreSQL only but
//! for that one: the tests return at once when `TASKQ_TEST_POSTGRES_URL`
//! is unset.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use reqwest::Method;

/// Nodes of one cluster, each a `TestServer` on the first one's database.
struct Cluster {
    nodes: Vec<TestServer>,
}

impl Cluster {
    /// `n` nodes with one master key.
    async fn start(n: usize) -> Cluster {
        Self::start_with(n, |_, b| b).await
    }

    /// `each` adds what node `i` is started with.
    async fn start_with(n: usize, each: impl Fn(usize, Builder) -> Builder) -> Cluster {
        let key = base64_key();
        let first = each(0, TestServer::builder(Backend::Postgres).nodes(n as u32))
            .env("TASKQ_MASTER_KEY", &key)
            .start()
            .await;
        let mut nodes = vec![first];
        for i in 1..n {
            let node = each(i, TestServer::builder(Backend::Postgres))
                .joining(&nodes[0])
                .env("TASKQ_MASTER_KEY", &key)
                .start()
                .await;
            nodes.push(node);
        }
        let cluster = Cluster { nodes };
        cluster.wait_for_nodes(n).await;
        cluster.wait_until_settled().await;
        cluster
    }

    /// Waits until every node has been live for the heartbeats after which
    /// orgs move to it: an org made sooner may be handed to its chosen node
    /// a moment later, and answer 503 "org moving" meanwhile, as CONTRACT
    /// §6 allows but a test of a settled cluster does not expect.
    async fn wait_until_settled(&self) {
        for node in self.nodes.iter().filter(|n| n.is_running()) {
            eventually(Duration::from_secs(15), "every node settled", || async {
                cluster_settled(&cluster_view(node).await).then_some(())
            })
            .await;
        }
    }

    /// Waits until every node sees `n` live nodes.
    async fn wait_for_nodes(&self, n: usize) {
        for node in self.nodes.iter().filter(|n| n.is_running()) {
            eventually(Duration::from_secs(10), "every node is seen", || async {
                let view = cluster_view(node).await;
                let live = view["nodes"]
                    .as_array()
                    .map(|a| a.iter().filter(|n| is_live(n)).count())
                    .unwrap_or(0);
                (live >= n).then_some(())
            })
            .await;
        }
    }

    fn node(&self, i: usize) -> &TestServer {
        &self.nodes[i % self.nodes.len()]
    }

    /// The index of the node that owns the org now.
    async fn owner_of(&self, org: &Org) -> usize {
        // A request through any node places the org.
        let (status, body) = self.node(0).get(&org.owner_key, "/tasks?limit=1").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let view = cluster_view(self.node(0)).await;
        for (i, node) in self.nodes.iter().enumerate() {
            if !node.is_running() {
                continue;
            }
            let owns = view["nodes"].as_array().unwrap().iter().any(|n| {
                n["advertise_url"] == node.base_url.as_str() && n["orgs"].as_i64() > Some(0)
            });
            if owns && owned_here(node, org).await {
                return i;
            }
        }
        panic!("no node owns {}: {view}", org.org_id);
    }
}

fn base64_key() -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(rand_bytes())
}

fn rand_bytes() -> [u8; 32] {
    let a = uuid::Uuid::new_v4().into_bytes();
    let b = uuid::Uuid::new_v4().into_bytes();
    let mut out = [0u8; 32];
    out[..16].copy_from_slice(&a);
    out[16..].copy_from_slice(&b);
    out
}

async fn cluster_view(node: &TestServer) -> Value {
    let (status, body) = node.admin(Method::GET, "/admin/cluster", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// A node listed with a heartbeat in the last three seconds.
fn is_live(node: &Value) -> bool {
    let seen = chrono::DateTime::parse_from_rfc3339(node["last_seen"].as_str().unwrap_or(""))
        .map(|t| t.with_timezone(&chrono::Utc));
    seen.is_ok_and(|t| chrono::Utc::now() - t < chrono::Duration::seconds(3))
}

/// Whether `node` serves the org itself: its log says it spawned the org's
/// actor more often than the actor stopped or failed.
async fn owned_here(node: &TestServer, org: &Org) -> bool {
    let log = node.server_log();
    let spawned = log
        .lines()
        .filter(|l| l.contains(&org.org_id) && l.contains("org actor spawned"))
        .count();
    let stopped = log
        .lines()
        .filter(|l| {
            l.contains(&org.org_id)
                && (l.contains("org actor stopped")
                    || l.contains("org actor failed")
                    || l.contains("org lost to another node"))
        })
        .count();
    spawned > stopped
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn every_route_answers_the_same_from_each_node() {
    let cluster = Cluster::start(3).await;
    let org = cluster.node(0).create_org("dev").await;
    let key = &org.owner_key;
    cluster
        .node(1)
        .create_tags(key, json!([{ "name": "ui" }, { "name": "db" }]))
        .await;
    let member = cluster
        .node(2)
        .add_member(&org, "m@example.com", "user")
        .await;
    let created = cluster
        .node(1)
        .create_tasks(
            key,
            json!([
                { "title": "first", "ref": "a", "tags": ["ui"] },
                { "title": "second", "blocked_by": ["ref:a"], "tags": ["db"] },
            ]),
        )
        .await;
    let ids = ids(&created);
    let claimed = cluster
        .node(2)
        .claim(&member, json!({}))
        .await
        .expect("a task");
    assert_eq!(claimed["task_id"], ids[0].as_str());

    let reads: Vec<(&str, &str, Option<Value>)> = vec![
        ("GET", "/tasks", None),
        ("GET", "/tasks?status=blocked", None),
        ("GET", "/tags", None),
        ("GET", "/members", None),
        ("GET", "/me", None),
        ("GET", "/quota", None),
        ("GET", "/keys", None),
        ("POST", "/tasks/get", Some(json!({ "task_ids": ids }))),
        ("POST", "/tasks/get", Some(json!({ "task_ids": [ids[0]] }))),
    ];
    for (method, path, body) in &reads {
        let mut answers = Vec::new();
        for i in 0..3 {
            let node = cluster.node(i);
            let (status, answer) = match (*method, body) {
                ("GET", _) => node.get(key, path).await,
                (_, Some(body)) => node.post(key, path, body.clone()).await,
                _ => unreachable!(),
            };
            assert_eq!(
                status,
                StatusCode::OK,
                "{method} {path} on node {i}: {answer}"
            );
            answers.push(answer);
        }
        assert!(
            answers.windows(2).all(|w| w[0] == w[1]),
            "{method} {path} differs between nodes: {answers:#?}"
        );
    }
    let path = format!("/admin/orgs/{}", org.org_id);
    let mut views = Vec::new();
    for i in 0..3 {
        let (status, view) = cluster.node(i).admin(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::OK, "{view}");
        views.push(view);
    }
    assert!(views.windows(2).all(|w| w[0] == w[1]), "{views:#?}");

    // MCP through each node, as the owner answers it.
    let mut listed = Vec::new();
    for i in 0..3 {
        let request = json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": { "name": "list_tasks", "arguments": {} },
        });
        let (status, text) = cluster
            .node(i)
            .raw(
                Method::POST,
                "/mcp",
                &[
                    ("accept", "application/json, text/event-stream"),
                    ("mcp-protocol-version", "2025-11-25"),
                    ("x-api-key", key),
                ],
                Some(request.to_string()),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let body: Value = serde_json::from_str(&text).expect("JSON");
        listed.push(body["result"]["structuredContent"].clone());
    }
    assert!(listed[0]["tasks"].is_array(), "{listed:?}");
    assert!(listed.windows(2).all(|w| w[0] == w[1]), "{listed:#?}");

    // A revoked key stops at once on every node, whichever node it
    // was revoked through.
    let (key_id, extra) = cluster.node(0).new_key(key, "extra").await;
    for i in 0..3 {
        let (status, body) = cluster.node(i).get(&extra, "/tasks").await;
        assert_eq!(status, StatusCode::OK, "node {i}: {body}");
    }
    let (status, body) = cluster
        .node(2)
        .delete(key, &format!("/keys/{key_id}"))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    for i in 0..3 {
        let (status, body) = cluster.node(i).get(&extra, "/tasks").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "node {i}: {body}");
    }

    // The operator sees the three nodes and the orgs they own, as their
    // heartbeats last wrote them (at most a heartbeat old): ours at least
    // (the feedback org's actor need not be running).
    let view = eventually(Duration::from_secs(5), "our org is placed", || async {
        let view = cluster_view(cluster.node(1)).await;
        (view["orgs_placed"].as_i64() >= Some(1)).then_some(view)
    })
    .await;
    let nodes = view["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.iter().filter(|n| is_live(n)).count(), 3, "{view}");
    let owned: i64 = nodes.iter().map(|n| n["orgs"].as_i64().unwrap()).sum();
    assert_eq!(view["orgs_placed"].as_i64(), Some(owned), "{view}");
    for n in nodes {
        for field in ["node_id", "advertise_url", "started_at", "last_seen"] {
            assert!(n[field].is_string(), "{field} in {n}");
        }
    }
}

/// Waits until `node` answers for the key's org again, and checks that it
/// did so within 5 s of `since`, when its owner was killed or frozen.
async fn served_again_within_5_s(node: &TestServer, key: &str, since: Instant, what: &str) {
    let served = eventually(
        Duration::from_secs(10),
        "the org is served again",
        || async {
            let (status, _) = node.get(key, "/tasks?limit=1").await;
            (status == StatusCode::OK).then(Instant::now)
        },
    )
    .await;
    assert!(
        served - since < Duration::from_secs(5),
        "served again {:?} after the {what}",
        served - since
    );
}

/// One agent's claims and completions through one node until the org has
/// nothing pending; answers the ids it claimed.
async fn drain_org(node: &TestServer, key: &str) -> Vec<String> {
    let mut claimed = Vec::new();
    loop {
        let (status, body) = node
            .post(
                key,
                "/tasks/claim",
                json!({ "lease_seconds": 600, "count": 5 }),
            )
            .await;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        assert_eq!(status, StatusCode::OK, "{body}");
        let tasks = body["tasks"].as_array().cloned().unwrap_or_default();
        if tasks.is_empty() {
            return claimed;
        }
        let updates: Vec<Value> = tasks
            .iter()
            .map(|t| {
                json!({
                    "task_id": t["task_id"], "lease_id": t["lease_id"],
                    "status": "completed", "note": "done",
                })
            })
            .collect();
        loop {
            let (status, body) = node
                .post(key, "/tasks/update", json!({ "updates": updates }))
                .await;
            if status == StatusCode::SERVICE_UNAVAILABLE {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            assert_eq!(status, StatusCode::OK, "{body}");
            break;
        }
        claimed.extend(tasks.iter().map(|t| str_field(t, "task_id")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn claims_raced_over_three_nodes_are_never_duplicated() {
    let cluster = Cluster::start(3).await;
    let org = cluster.node(0).create_org("dev").await;
    let key = org.owner_key.clone();
    const TASKS: usize = 10_000;
    let batches: Vec<Value> = (0..TASKS / 25)
        .map(|b| {
            Value::Array(
                (0..25)
                    .map(|i| json!({ "title": format!("t{b}-{i}") }))
                    .collect(),
            )
        })
        .collect();
    for (i, batch) in batches.into_iter().enumerate() {
        cluster.node(i).create_tasks(&key, batch).await;
    }
    let agents = (0..24).map(|a| drain_org(cluster.node(a), &key));
    let claimed: Vec<String> = futures::future::join_all(agents)
        .await
        .into_iter()
        .flatten()
        .collect();
    let unique: HashSet<&String> = claimed.iter().collect();
    assert_eq!(unique.len(), claimed.len(), "a task was claimed twice");
    assert_eq!(claimed.len(), TASKS);
    let done = cluster.node(1).list_ids(&key, "status=completed").await;
    assert_eq!(done.len(), TASKS);
}

/// Where agents send requests: each node's base URL, `None` while it is
/// down, changed by the test as it kills and starts nodes.
#[derive(Clone)]
struct Targets {
    urls: Arc<Mutex<Vec<Option<String>>>>,
    http: reqwest::Client,
}

impl Targets {
    fn of(cluster: &Cluster) -> Targets {
        Targets {
            urls: Arc::new(Mutex::new(
                cluster
                    .nodes
                    .iter()
                    .map(|n| Some(n.base_url.clone()))
                    .collect(),
            )),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("client"),
        }
    }

    fn set(&self, i: usize, url: Option<String>) {
        self.urls.lock().unwrap()[i] = url;
    }

    /// The `turn`th node that is up, if any.
    fn pick(&self, turn: usize) -> Option<String> {
        let urls = self.urls.lock().unwrap();
        let up: Vec<&String> = urls.iter().flatten().collect();
        (!up.is_empty()).then(|| up[turn % up.len()].clone())
    }

    /// POST with a key; `None` when the node could not be reached.
    async fn post(
        &self,
        turn: usize,
        key: &str,
        path: &str,
        body: Value,
    ) -> Option<(StatusCode, Value)> {
        let url = self.pick(turn)?;
        let answer = self
            .http
            .post(format!("{url}{path}"))
            .header("x-api-key", key)
            .json(&body)
            .send()
            .await
            .ok()?;
        let status = answer.status();
        let text = answer.text().await.ok()?;
        Some((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }
}

/// What agents saw acknowledged while nodes died around them.
#[derive(Default)]
struct Acked {
    created: HashSet<String>,
    /// task -> the lease ids its acknowledged claims carried.
    claims: HashMap<String, Vec<String>>,
    completed: HashSet<String>,
    /// Answers other than 2xx and 503, with what was asked.
    other: Vec<String>,
}

/// An agent that creates a task, claims one and completes it, over and
/// over, through the nodes in turn, until `until`; 503s and unreachable
/// nodes are retried on the next turn.
async fn agent(targets: Targets, key: String, n: usize, until: Instant, acked: Arc<Mutex<Acked>>) {
    let mut turn = n;
    while Instant::now() < until {
        turn += 1;
        let title = format!("agent {n} task {turn}");
        match targets
            .post(
                turn,
                &key,
                "/tasks",
                json!({ "tasks": [{ "title": title }] }),
            )
            .await
        {
            Some((StatusCode::CREATED, body)) => {
                let id = str_field(&body["results"][0], "task_id");
                acked.lock().unwrap().created.insert(id);
            }
            Some((StatusCode::SERVICE_UNAVAILABLE, _)) | None => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            Some((status, body)) => {
                acked
                    .lock()
                    .unwrap()
                    .other
                    .push(format!("create: {status} {body}"));
                continue;
            }
        }
        let claimed = match targets
            .post(turn, &key, "/tasks/claim", json!({ "lease_seconds": 600 }))
            .await
        {
            Some((StatusCode::OK, body)) if body.is_object() => body,
            Some((StatusCode::OK, _)) | Some((StatusCode::SERVICE_UNAVAILABLE, _)) | None => {
                continue
            }
            Some((status, body)) => {
                acked
                    .lock()
                    .unwrap()
                    .other
                    .push(format!("claim: {status} {body}"));
                continue;
            }
        };
        let id = str_field(&claimed, "task_id");
        let lease = str_field(&claimed, "lease_id");
        acked
            .lock()
            .unwrap()
            .claims
            .entry(id.clone())
            .or_default()
            .push(lease.clone());
        let update = json!({ "updates": [{
            "task_id": id, "lease_id": lease, "status": "completed", "note": "ok",
        }]});
        // The completion goes through the next node; a 503 is retried, as
        // an agent holding a lease would. A 503 leaves it in doubt (the
        // commit may have landed and its answer been lost): a retry that
        // hears the lease is gone then checks whether it was completed.
        let mut in_doubt = false;
        loop {
            turn += 1;
            match targets
                .post(turn, &key, "/tasks/update", update.clone())
                .await
            {
                Some((StatusCode::OK, body)) => {
                    assert_eq!(body["results"][0]["status"], "completed", "{body}");
                    acked.lock().unwrap().completed.insert(id);
                    break;
                }
                Some((StatusCode::MULTI_STATUS, body))
                    if in_doubt && body["results"][0]["error"] == "lease lost" =>
                {
                    let got = targets
                        .post(turn, &key, "/tasks/get", json!({ "task_ids": [id] }))
                        .await;
                    match got {
                        Some((StatusCode::OK, t)) if t["tasks"][0]["status"] == "completed" => {
                            acked.lock().unwrap().completed.insert(id);
                        }
                        other => acked
                            .lock()
                            .unwrap()
                            .other
                            .push(format!("complete in doubt, then: {body} {other:?}")),
                    }
                    break;
                }
                Some((StatusCode::SERVICE_UNAVAILABLE, _)) | None => {
                    in_doubt = true;
                    if Instant::now() > until + Duration::from_secs(15) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Some((status, body)) => {
                    acked
                        .lock()
                        .unwrap()
                        .other
                        .push(format!("complete: {status} {body}"));
                    break;
                }
            }
        }
    }
}

/// Checks what the agents were told against what the store holds.
async fn check_acked(node: &TestServer, key: &str, acked: &Acked) {
    assert!(
        acked.other.is_empty(),
        "answers besides 2xx and 503: {:#?}",
        acked.other
    );
    assert!(!acked.completed.is_empty(), "nothing completed");
    let all: HashMap<String, Value> = node
        .list_all(key, "")
        .await
        .into_iter()
        .map(|t| (str_field(&t, "task_id"), t))
        .collect();
    for id in &acked.created {
        assert!(all.contains_key(id), "an acknowledged create is lost: {id}");
    }
    for id in &acked.completed {
        assert_eq!(
            all[id]["status"], "completed",
            "an acknowledged completion is lost: {id}"
        );
    }
    for (id, leases) in &acked.claims {
        // Every claimed task here was claimed with a 600 s lease and never
        // released: a second acknowledged claim is a second holder.
        assert_eq!(
            leases.len(),
            1,
            "task {id} claimed under two leases: {leases:?}"
        );
    }
}

/// Runs six agents against the cluster for `secs` seconds while `chaos`
/// runs; answers what they were told.
async fn under_load<F: std::future::Future<Output = ()>>(
    targets: &Targets,
    key: &str,
    secs: u64,
    chaos: F,
) -> Acked {
    let acked = Arc::new(Mutex::new(Acked::default()));
    let until = Instant::now() + Duration::from_secs(secs);
    let agents: Vec<_> = (0..6)
        .map(|n| {
            tokio::spawn(agent(
                targets.clone(),
                key.to_owned(),
                n,
                until,
                acked.clone(),
            ))
        })
        .collect();
    chaos.await;
    for a in agents {
        a.await.expect("agent");
    }
    Arc::try_unwrap(acked)
        .ok()
        .expect("agents done")
        .into_inner()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn the_owner_killed_under_load_loses_nothing_and_another_node_serves_within_5_s() {
    let mut cluster = Cluster::start(3).await;
    let org = cluster.node(0).create_org("dev").await;
    let key = org.owner_key.clone();
    // A lease held at the kill, which must still expire on time.
    let held = cluster.node(1).new_task(&key, "held at the kill").await;
    let claimed = cluster
        .node(1)
        .claim(&key, json!({ "lease_seconds": 6 }))
        .await
        .expect("a task");
    assert_eq!(claimed["task_id"], held.as_str());
    let victim = cluster.owner_of(&org).await;
    let survivor = (victim + 1) % 3;

    let targets = Targets::of(&cluster);
    let acked = under_load(&targets, &key, 10, async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        targets.set(victim, None);
        cluster.nodes[victim].kill9().await;
        served_again_within_5_s(cluster.node(survivor), &key, Instant::now(), "kill").await;
    })
    .await;
    let node = cluster.node(survivor);
    let acked_after = acked.completed.len();
    check_acked(node, &key, &acked).await;
    assert!(acked_after > 0);
    // The held lease of 6 s expired on its new owner, on time: its
    // history moves it back to pending 6 s after the claim, give or
    // take the takeover (agents may have claimed it again since).
    let task = node.get_task(&key, &held).await;
    let history = history(&task);
    let claimed_at = ts(&history[1], "timestamp");
    let expired = history
        .iter()
        .find(|e| e["from_status"] == "in_progress" && e["to_status"] == "pending")
        .unwrap_or_else(|| panic!("the held lease never expired: {task}"));
    let held_for = ts(expired, "timestamp") - claimed_at;
    assert!(
        held_for >= chrono::Duration::seconds(6) && held_for < chrono::Duration::seconds(11),
        "the 6 s lease was held for {held_for}: {task}"
    );
}

/// The tasks of the org that schedule `id` created for the tick at `tick`.
async fn tasks_of_tick(node: &TestServer, key: &str, id: &str, tick: &str) -> usize {
    node.list_all(key, "full=true")
        .await
        .iter()
        .filter(|t| t["schedule_id"] == id && t["scheduled_for"] == tick)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn a_tick_whose_owner_is_killed_as_it_fires_makes_exactly_one_task() {
    let mut cluster = Cluster::start(3).await;
    let org = cluster.node(0).create_org("pro").await;
    let key = org.owner_key.clone();
    let owner = cluster.owner_of(&org).await;
    let (status, schedule) = cluster
        .node(owner)
        .post(
            &key,
            "/schedules",
            json!({"name": "every minute", "cron": "* * * * *", "task": {"title": "tick"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{schedule}");
    let id = str_field(&schedule, "schedule_id");
    let tick = str_field(&schedule, "next_run_at");
    let now = advance_clock(cluster.node(owner), 0).await;
    let seconds = (ts(&schedule, "next_run_at") - now).num_seconds() + 1;

    // Every node's clock past the tick; the owner's last, killed as it
    // fires, whether or not its commit got through.
    for i in (0..3).filter(|&i| i != owner) {
        advance_clock(cluster.node(i), seconds).await;
    }
    advance_clock(cluster.node(owner), seconds).await;
    cluster.nodes[owner].kill9().await;

    // Another node takes the org over and fires what was not fired.
    let survivor = cluster.node(owner + 1);
    let path = format!("/schedules/{id}");
    eventually(
        Duration::from_secs(20),
        "the tick fired on the new owner",
        || async {
            let (status, got) = survivor.get(&key, &path).await;
            (status == StatusCode::OK && got["last_run_at"] == tick.as_str()).then_some(())
        },
    )
    .await;
    eventually(Duration::from_secs(5), "the tick's task", || async {
        (tasks_of_tick(survivor, &key, &id, &tick).await > 0).then_some(())
    })
    .await;
    assert_eq!(
        tasks_of_tick(survivor, &key, &id, &tick).await,
        1,
        "one task for the tick"
    );
    // And it stays one when the killed node is back.
    cluster.nodes[owner].start_again().await;
    cluster.wait_for_nodes(3).await;
    for i in 0..3 {
        assert_eq!(
            tasks_of_tick(cluster.node(i), &key, &id, &tick).await,
            1,
            "node {i} sees one task for the tick"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn a_frozen_owner_writes_nothing_after_another_node_took_over() {
    let cluster = Cluster::start(3).await;
    let org = cluster.node(0).create_org("dev").await;
    let key = org.owner_key.clone();
    let a = cluster.node(0).new_task(&key, "a").await;
    let owner = cluster.owner_of(&org).await;
    let other = cluster.node(owner + 1);
    // The owner hands out a 3 s lease on `a`, then freezes.
    let claimed = cluster
        .node(owner)
        .claim(&key, json!({ "lease_seconds": 3 }))
        .await
        .expect("a task");
    assert_eq!(claimed["task_id"], a.as_str());
    cluster.node(owner).freeze(true);

    // Another node takes the org over within 5 s; `a`'s lease expires
    // there and a new agent holds it for 10 minutes.
    served_again_within_5_s(other, &key, Instant::now(), "freeze").await;
    eventually(
        Duration::from_secs(10),
        "the lease expires on the new owner",
        || async { (other.status_of(&key, &a).await == "pending").then_some(()) },
    )
    .await;
    let held = other
        .claim(&key, json!({ "lease_seconds": 600 }))
        .await
        .expect("a task");
    assert_eq!(held["task_id"], a.as_str());
    let before = other.get_task(&key, &a).await;

    // The frozen node runs again: its own timer for the old lease is long
    // due, but its trust window has shut and its commits fail their fence.
    cluster.node(owner).freeze(false);
    let thawed = cluster.node(owner);
    // It drops the org when its heartbeat finds the window shut, or
    // sooner, when the fence refuses the first commit it tries.
    eventually(
        Duration::from_secs(10),
        "the thawed node drops the org",
        || async { (!owned_here(thawed, &org).await).then_some(()) },
    )
    .await;
    // It answers for the org as the new owner does, never from its memory.
    for _ in 0..5 {
        let (status, task) = thawed
            .post(&key, "/tasks/get", json!({ "task_ids": [a] }))
            .await;
        assert_eq!(status, StatusCode::OK, "{task}");
        assert_eq!(task["tasks"][0], before, "the thawed node answered stale");
    }
    let after = other.get_task(&key, &a).await;
    assert_eq!(
        after, before,
        "the thawed node wrote to a task it no longer owns"
    );
    assert_eq!(after["status"], "in_progress");
    assert_eq!(after["lease_seconds"], 600, "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn a_second_server_on_a_sqlite_file_refuses_to_start() {
    let srv = TestServer::start(Backend::Sqlite).await;
    let org = srv.create_org("dev").await;
    let before = std::fs::read(srv.sqlite_path()).expect("read the database");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_taskq"))
        .args(["serve", "--listen", "127.0.0.1:0", "--database-url"])
        .arg(&srv.database_url)
        .current_dir(srv.dir())
        .env("TASKQ_EMBEDDINGS", "none")
        .env_remove("TASKQ_DATABASE_URL")
        .env_remove("TASKQ_MASTER_KEY")
        .output()
        .await
        .expect("run a second server");
    assert!(!output.status.success(), "a second server started");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("another taskq server is running on") && stderr.contains("PostgreSQL"),
        "{stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&output.stdout).contains("listening"),
        "it announced itself"
    );
    assert_eq!(
        std::fs::read(srv.sqlite_path()).expect("read the database"),
        before,
        "the second server wrote to the file"
    );
    // The first goes on as before.
    srv.new_task(&org.owner_key, "still here").await;
}

/// Runs agents against the cluster while `restart` restarts its nodes.
async fn restart_each_node(cluster: &mut Cluster, targets: &Targets) {
    for i in 0..cluster.nodes.len() {
        // Agents are told a node is down before it stops (a load balancer
        // draining it); requests already on their way are answered, or
        // refused and retried elsewhere.
        targets.set(i, None);
        let status = cluster.nodes[i].stop().await;
        assert!(status.success(), "node {i} exited with {status:?}");
        cluster.nodes[i].start_again().await;
        targets.set(i, Some(cluster.nodes[i].base_url.clone()));
        cluster.wait_for_nodes(cluster.nodes.len()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn a_rolling_restart_under_load_loses_nothing() {
    let mut cluster = Cluster::start(3).await;
    let org = cluster.node(0).create_org("dev").await;
    let key = org.owner_key.clone();
    let targets = Targets::of(&cluster);
    let acked = under_load(&targets, &key, 20, async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        restart_each_node(&mut cluster, &targets).await;
    })
    .await;
    check_acked(cluster.node(0), &key, &acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn postgres_cut_off_mid_load_the_cluster_recovers_by_itself() {
    let proxy = Proxy::start(postgres_addr()).await;
    let through = proxy.addr.clone();
    let cluster = Cluster::start_with(3, |_, b| b.postgres_through(&through)).await;
    let org = cluster.node(0).create_org("dev").await;
    let key = org.owner_key.clone();
    let targets = Targets::of(&cluster);
    let acked = under_load(&targets, &key, 14, async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        // Longer than the lease TTL: every node's trust window shuts.
        proxy.set_cut(true);
        tokio::time::sleep(Duration::from_secs(5)).await;
        proxy.set_cut(false);
    })
    .await;
    // No node was restarted, and each serves the org again.
    for i in 0..3 {
        let node = cluster.node(i);
        eventually(
            Duration::from_secs(15),
            "the org is served again",
            || async {
                let (status, _) = node.get(&key, "/tasks?limit=1").await;
                (status == StatusCode::OK).then_some(())
            },
        )
        .await;
    }
    let done_after = acked.completed.len();
    check_acked(cluster.node(0), &key, &acked).await;
    assert!(done_after > 0);
}

/// nginx (Debian's package, named by `TASKQ_TEST_NGINX`) in front of the
/// cluster's nodes, its `server` lines the nodes' advertise addresses, with
/// `http` added to its `http` block and `upstream` to its `upstream` block;
/// and its base URL, once it answers.
async fn nginx_before(
    nginx: &str,
    cluster: &Cluster,
    http: &str,
    upstream: &str,
    server_params: &str,
) -> (Nginx, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let servers: String = cluster
        .nodes
        .iter()
        .map(|n| {
            let address = n.base_url.trim_start_matches("http://");
            format!("server {address} {server_params};\n")
        })
        .collect();
    let d = dir.path().display();
    let conf = format!(
        "worker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 256; }}\n\
         http {{\n access_log off;\n client_body_temp_path {d}/body;\n proxy_temp_path {d}/proxy;\n\
         fastcgi_temp_path {d}/fastcgi;\n uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n\
         {http}\n\
         upstream taskq {{\n{upstream}\n{servers}}}\n\
         server {{\n listen 127.0.0.1:{port};\n location / {{\n proxy_pass http://taskq;\n\
         proxy_http_version 1.1;\n proxy_set_header Connection \"\";\n proxy_read_timeout 120s;\n }}\n }}\n}}\n"
    );
    let conf_path = dir.path().join("nginx.conf");
    std::fs::write(&conf_path, conf).expect("write nginx.conf");
    let child = std::process::Command::new(nginx)
        .arg("-c")
        .arg(&conf_path)
        .arg("-p")
        .arg(dir.path())
        .arg("-e")
        .arg(dir.path().join("error.log"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start nginx");
    let nginx = Nginx {
        master: child,
        _dir: dir,
    };
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    eventually(Duration::from_secs(10), "nginx answers", || async {
        let ok = http.get(format!("{base}/healthz")).send().await;
        ok.is_ok_and(|r| r.status().is_success()).then_some(())
    })
    .await;
    (nginx, base)
}

/// An nginx round-robin in front of three nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(taskq_test_env = "postgres", taskq_test_env = "nginx")),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server) and TASKQ_TEST_NGINX (nginx)"
)]
async fn behind_nginx_round_robin_every_request_is_answered_by_its_owner() {
    let nginx = need("TASKQ_TEST_NGINX");
    let cluster = Cluster::start(3).await;
    let (nginx, base) = nginx_before(&nginx, &cluster, "", "", "").await;
    let http = reqwest::Client::new();
    let admin = &cluster.node(0).admin_token;
    let org: Value = http
        .post(format!("{base}/admin/orgs"))
        .bearer_auth(admin)
        .json(&json!({ "name": "behind-nginx", "owner_email": "o@nginx.test" }))
        .send()
        .await
        .expect("create org")
        .json()
        .await
        .expect("JSON");
    let key = str_field(&org["owner"], "api_key");
    let lifted = http
        .patch(format!("{base}/admin/orgs/{}", str_field(&org, "org_id")))
        .bearer_auth(admin)
        .json(&json!({ "limits": { "writes_per_minute": null, "reads_per_minute": null } }))
        .send()
        .await
        .expect("lift the limits");
    assert_eq!(lifted.status(), StatusCode::OK);
    let post = |path: &'static str, body: Value| {
        let (http, base, key) = (http.clone(), base.clone(), key.clone());
        async move {
            let answer = http
                .post(format!("{base}{path}"))
                .header("x-api-key", key)
                .json(&body)
                .send()
                .await
                .expect("through nginx");
            let status = answer.status();
            (status, answer.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let mut created = Vec::new();
    for i in 0..30 {
        let (status, body) =
            post("/tasks", json!({ "tasks": [{ "title": format!("n{i}") }] })).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        created.push(str_field(&body["results"][0], "task_id"));
    }
    let mut claimed = HashSet::new();
    for _ in 0..30 {
        let (status, task) = post("/tasks/claim", json!({ "lease_seconds": 600 })).await;
        assert_eq!(status, StatusCode::OK, "{task}");
        assert!(
            claimed.insert(str_field(&task, "task_id")),
            "claimed twice: {task}"
        );
        let (status, body) = post(
            "/tasks/update",
            json!({ "updates": [{ "task_id": task["task_id"], "lease_id": task["lease_id"], "status": "completed", "note": "done" }] }),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, nothing) = post("/tasks/claim", json!({})).await;
    assert_eq!((status, nothing), (StatusCode::OK, Value::Null));
    assert_eq!(claimed.len(), created.len());
    // nginx spread the requests: every node forwarded or served some.
    for node in &cluster.nodes {
        let auth = format!("Bearer {}", node.admin_token);
        let (_, text) = node
            .raw(Method::GET, "/metrics", &[("authorization", &auth)], None)
            .await;
        let served: u64 = text
            .lines()
            .filter(|l| l.starts_with("taskq_http_requests_total{route=\"/tasks"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        assert!(served > 0, "{} saw no task request:\n{text}", node.base_url);
    }
    // Round-robin lands most requests away from their owner: forwarded.
    let counts = traffic(&cluster).await;
    let forwarded: u64 = counts.iter().map(|c| c[1]).sum();
    let received: u64 = counts.iter().map(|c| c[2]).sum();
    assert!(forwarded > 0 && received > 0, "{counts:?}");
    drop(nginx);
}

/// The `map`, the `hash` line and what follows a `server`'s address in the
/// guide's nginx example (`docs/guide/several-nodes.md`).
fn guide_ring() -> (String, String, String) {
    let guide = include_str!("../../docs/guide/several-nodes.md");
    let start = guide
        .find("map $http_x_api_key")
        .expect("the guide's nginx example maps the API key");
    let len = guide[start..].find("\n}\n").expect("the map's end") + 2;
    let line = |starts: &str| {
        guide
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with(starts))
            .unwrap_or_else(|| panic!("no `{starts}` line in the guide's nginx example"))
    };
    let hash = line("hash ");
    assert!(hash.contains("consistent"), "{hash}");
    let server = line("server 10.");
    let params = server
        .trim_end_matches(';')
        .split_once(' ')
        .and_then(|(_, rest)| rest.split_once(' '))
        .map_or("", |(_, params)| params);
    (
        guide[start..start + len].to_owned(),
        hash.to_owned(),
        params.to_owned(),
    )
}

/// Every node's requests for an org, forwarded and received forwarded,
/// from its own `/metrics`.
async fn traffic(cluster: &Cluster) -> Vec<[u64; 3]> {
    let mut all = Vec::new();
    for node in &cluster.nodes {
        let auth = format!("Bearer {}", node.admin_token);
        let (status, text) = node
            .raw(Method::GET, "/metrics", &[("authorization", &auth)], None)
            .await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let counter = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
        };
        all.push([
            counter("taskq_cluster_requests_total"),
            counter("taskq_cluster_forwarded_total"),
            counter("taskq_cluster_received_forwarded_total"),
        ]);
    }
    all
}

/// nginx configured as the guide says, hashing the org in the key onto
/// its consistent ring: once the nodes have settled, every request reaches
/// its org's owner at once, and no node forwards any.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(taskq_test_env = "postgres", taskq_test_env = "nginx")),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server) and TASKQ_TEST_NGINX (nginx)"
)]
async fn behind_nginx_hashing_the_key_s_org_no_request_is_forwarded() {
    let nginx = need("TASKQ_TEST_NGINX");
    let cluster = Cluster::start(3).await;
    let (map, hash, params) = guide_ring();
    let (nginx, base) = nginx_before(&nginx, &cluster, &map, &hash, &params).await;
    let http = reqwest::Client::new();
    let admin = &cluster.node(0).admin_token;
    let mut orgs = Vec::new();
    for i in 0..6 {
        let org: Value = http
            .post(format!("{base}/admin/orgs"))
            .bearer_auth(admin)
            .json(&json!({ "name": format!("ring-{i}"), "tier": "dev", "owner_email": format!("o{i}@ring.test") }))
            .send()
            .await
            .expect("create org")
            .json()
            .await
            .expect("JSON");
        orgs.push((
            str_field(&org, "org_id"),
            str_field(&org["owner"], "api_key"),
        ));
    }
    let call = |method: Method, key: &str, path: &str, body: Option<Value>| {
        let request = http
            .request(method, format!("{base}{path}"))
            .header("x-api-key", key);
        let request = match body {
            Some(body) => request.json(&body),
            None => request,
        };
        async move {
            let answer = request.send().await.expect("through nginx");
            let status = answer.status();
            (status, answer.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    // Settled: a round of one request per org that no node forwards (an
    // org is first placed where it was created, then moves to its node).
    eventually(
        Duration::from_secs(20),
        "no request is forwarded",
        || async {
            let before = traffic(&cluster).await;
            for (_, key) in &orgs {
                let (status, body) = call(Method::GET, key, "/tasks?limit=1", None).await;
                assert!(
                    status == StatusCode::OK || status == StatusCode::SERVICE_UNAVAILABLE,
                    "{status} {body}"
                );
            }
            let after = traffic(&cluster).await;
            (before.iter().zip(&after).all(|(b, a)| b[1..] == a[1..])).then_some(())
        },
    )
    .await;
    let before = traffic(&cluster).await;
    let mut sent = 0;
    for (i, (org_id, key)) in orgs.iter().enumerate() {
        let titles: Vec<Value> = (0..4)
            .map(|t| json!({ "title": format!("org {i} task {t}") }))
            .collect();
        let (status, body) = call(
            Method::POST,
            key,
            "/tasks",
            Some(json!({ "tasks": titles })),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        sent += 1;
        for _ in 0..4 {
            let (status, task) = call(
                Method::POST,
                key,
                "/tasks/claim",
                Some(json!({ "lease_seconds": 600 })),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{task}");
            assert!(
                str_field(&task, "title").starts_with(&format!("org {i} ")),
                "{org_id} claimed {task}"
            );
            let (status, body) = call(
                Method::POST,
                key,
                "/tasks/update",
                Some(json!({ "updates": [{ "task_id": task["task_id"], "lease_id": task["lease_id"], "status": "completed", "note": "done" }] })),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{body}");
            sent += 2;
        }
        let (status, nothing) = call(Method::POST, key, "/tasks/claim", Some(json!({}))).await;
        assert_eq!((status, nothing), (StatusCode::OK, Value::Null));
        let (status, listed) = call(Method::GET, key, "/tasks?status=completed", None).await;
        assert_eq!(status, StatusCode::OK, "{listed}");
        assert_eq!(
            listed["tasks"].as_array().map(Vec::len),
            Some(4),
            "{listed}"
        );
        sent += 2;
    }
    let after = traffic(&cluster).await;
    for (node, (b, a)) in cluster.nodes.iter().zip(before.iter().zip(&after)) {
        assert_eq!(
            (a[1] - b[1], a[2] - b[2]),
            (0, 0),
            "{} forwarded or was forwarded requests",
            node.base_url
        );
    }
    let answered: u64 = before.iter().zip(&after).map(|(b, a)| a[0] - b[0]).sum();
    assert_eq!(answered, sent, "each request answered by one node, once");
    // `GET /admin/cluster` says the same, whichever node is asked, once
    // every node's heartbeat has told it.
    let counts = |view: &Value| -> Vec<Value> {
        cluster
            .nodes
            .iter()
            .map(|n| {
                view["nodes"]
                    .as_array()
                    .and_then(|a| a.iter().find(|e| e["advertise_url"] == n.base_url.as_str()))
                    .map_or(Value::Null, |e| e["forwarding"].clone())
            })
            .collect()
    };
    let shown = eventually(
        Duration::from_secs(10),
        "the heartbeats carry the counts",
        || async {
            let shown = counts(&cluster_view(cluster.node(0)).await);
            let now = traffic(&cluster).await;
            let same = shown.iter().zip(&now).all(|(s, n)| {
                s["requests"].as_u64() == Some(n[0])
                    && s["forwarded"].as_u64() == Some(n[1])
                    && s["received"].as_u64() == Some(n[2])
            });
            same.then_some(shown)
        },
    )
    .await;
    for node in &cluster.nodes[1..] {
        assert_eq!(counts(&cluster_view(node).await), shown);
    }
    for entry in &shown {
        let requests = entry["requests"].as_f64().unwrap();
        let share = if requests > 0.0 {
            entry["forwarded"].as_f64().unwrap() / requests
        } else {
            0.0
        };
        assert_eq!(entry["forwarded_share"].as_f64(), Some(share), "{entry}");
    }
    // A key whose org part names another org is refused as a wrong secret
    // is, wherever nginx sends it; the same key as keys were written
    // before they named their org still works (forwarded if need be).
    let (org_id, key) = &orgs[0];
    let hex = org_id.replace('-', "");
    let rest = key
        .strip_prefix(&format!("tq_{hex}_"))
        .expect("the key names its org");
    let (key_id, secret) = rest.split_once('_').expect("key id, then secret");
    let wrong = format!("tq_{hex}_{key_id}_{}", "A".repeat(secret.len()));
    let (status, refused) = call(Method::GET, &wrong, "/tasks", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{refused}");
    for (other, _) in &orgs[1..] {
        let forged = format!("tq_{}_{rest}", other.replace('-', ""));
        let (status, body) = call(Method::GET, &forged, "/tasks", None).await;
        assert_eq!((status, &body), (StatusCode::UNAUTHORIZED, &refused));
    }
    let (status, body) = call(Method::GET, &format!("tq_{rest}"), "/tasks?limit=1", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    drop(nginx);
}

/// nginx's master process, stopped (with its workers) when dropped, and
/// its directory.
struct Nginx {
    master: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.master.id().to_string()])
            .status();
        let _ = self.master.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn feedback_and_strike_blocks_reach_orgs_other_nodes_own() {
    let cluster = Cluster::start(3).await;
    let (status, fb) = cluster
        .node(0)
        .admin(Method::GET, "/admin/feedback", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{fb}");
    let feedback_org = str_field(&fb, "org_id");
    let (status, reader) = cluster
        .node(1)
        .admin(
            Method::POST,
            &format!("/admin/orgs/{feedback_org}/members"),
            Some(json!({ "email": "reader@ops.test", "role": "user" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{reader}");
    let reader = str_field(&reader, "api_key");

    // Orgs spread over the nodes; feedback from each, through each node,
    // lands in the feedback org wherever it lives.
    let email = "mallory@example.com";
    let mut keys = Vec::new();
    for i in 0..4 {
        let org = cluster.node(i).create_org("dev").await;
        keys.push(cluster.node(i).add_member(&org, email, "user").await);
        for n in 0..3 {
            let (status, filed) = cluster
                .node(n)
                .post(
                    &org.owner_key,
                    "/feedback",
                    json!({ "message": format!("idea {i}/{n}") }),
                )
                .await;
            assert_eq!(status, StatusCode::CREATED, "{filed}");
            let task = cluster
                .node(n + 1)
                .get_task(&reader, &str_field(&filed, "task_id"))
                .await;
            assert_eq!(task["title"], format!("idea {i}/{n}"), "{task}");
        }
    }
    // Three strikes from one org block the member in all four, whichever
    // node owns each.
    for n in 0..3 {
        let (status, body) = cluster
            .node(n)
            .post(
                &keys[0],
                "/feedback",
                json!({ "message": "you utter fuckwit" }),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    }
    for key in &keys {
        for n in 0..3 {
            let (status, body) = cluster.node(n).get(key, "/tasks").await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "node {n}: {body}");
        }
    }
}

/// `POST /admin/master-key/rotate` through `node`.
async fn rotate(node: &TestServer, new_key: &str) -> (StatusCode, Value) {
    node.admin(
        Method::POST,
        "/admin/master-key/rotate",
        Some(json!({ "new_key": new_key })),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn a_master_key_rotation_through_one_node_reaches_every_node() {
    let new_key = base64_key();
    // Every node holds the next key before the rotation.
    let cluster = Cluster::start_with(2, |_, b| b.env("TASKQ_MASTER_KEY_PREVIOUS", &new_key)).await;
    let before = cluster.node(0).create_org("dev").await;
    let task = cluster
        .node(1)
        .new_task(&before.owner_key, "sealed before")
        .await;

    let (status, rotated) = rotate(cluster.node(1), &new_key).await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    assert!(rotated["rewrapped"].as_u64() >= Some(2), "{rotated}");
    assert_eq!(rotated["previous_keys_retired"], true, "{rotated}");

    // Both nodes wrap new orgs with the new key and open the old ones.
    for i in 0..2 {
        let org = cluster.node(i).create_org("dev").await;
        for n in 0..2 {
            let id = cluster
                .node(n)
                .new_task(&org.owner_key, "sealed after")
                .await;
            assert_eq!(
                cluster.node(n + 1).get_task(&org.owner_key, &id).await["title"],
                "sealed after"
            );
        }
    }
    for n in 0..2 {
        let t = cluster.node(n).get_task(&before.owner_key, &task).await;
        assert_eq!(t["title"], "sealed before");
    }
    // Every wrap names the new key (an UPDATE that changes nothing counts
    // the rows it matched).
    let new_id = str_field(&rotated, "master_key_id");
    let stale = cluster
        .node(0)
        .execute(
            "UPDATE orgs SET master_key_id = master_key_id \
             WHERE wrapped_dek IS NOT NULL AND master_key_id <> ?",
            &[&new_id],
        )
        .await;
    assert_eq!(stale, 0, "a wrap is not under the new key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn a_rotation_is_refused_while_a_node_lacks_the_new_key() {
    // Node 0 holds the next key, node 1 does not.
    let new_key = base64_key();
    let cluster = Cluster::start_with(2, |i, b| {
        if i == 0 {
            b.env("TASKQ_MASTER_KEY_PREVIOUS", &new_key)
        } else {
            b
        }
    })
    .await;
    let (status, body) = rotate(cluster.node(0), &new_key).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        str_field(&body, "error").contains("does not hold the new master key"),
        "{body}"
    );
    // Nothing moved: both nodes go on as before.
    let org = cluster.node(0).create_org("dev").await;
    cluster.node(1).new_task(&org.owner_key, "still fine").await;
}

/// `POST /internal/peer` with `token` (none when `None`) and `body`: the
/// status, the content type and the body read as JSON.
async fn peer_request(
    node: &TestServer,
    token: Option<&str>,
    body: &str,
) -> (StatusCode, String, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}/internal/peer", node.base_url))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(token) = token {
        request = request.header("x-taskq-peer-token", token);
    }
    let response = request.send().await.expect("POST /internal/peer");
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("{status} without a content type"));
    let text = response.text().await.expect("the body");
    let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} {text}: {e}"));
    (status, content_type, body)
}

/// The nodes' own route checks the peer token before it reads the body:
/// without the token, or with a wrong one, every request is refused 403 in
/// the API's JSON shape, whether its body is an operation, not JSON or
/// nothing, and the operation is not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn the_peer_route_refuses_strangers_before_it_reads_their_body() {
    let cluster = Cluster::start(1).await;
    let node = cluster.node(0);
    let org = node.create_org("dev").await;
    let revoke = json!({
        "op": "revoke_member_keys", "org": org.org_id, "email": org.owner_email,
    })
    .to_string();
    for token in [None, Some(""), Some("not-the-token")] {
        for body in [revoke.as_str(), "{not json", ""] {
            let (status, content_type, answer) = peer_request(node, token, body).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{token:?} {body}: {answer}");
            assert!(
                content_type.starts_with("application/json"),
                "{content_type}"
            );
            assert_eq!(answer["error"], "not a node of this cluster", "{answer}");
        }
    }
    let (status, body) = node.get(&org.owner_key, "/me").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the owner's key still works: {body}"
    );
}

/// A node alone has no other nodes: `/internal/peer` is no route there,
/// and answers as every unknown route does (404, JSON).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn a_node_alone_has_no_peer_route() {
    let node = TestServer::start(Backend::Sqlite).await;
    let (status, body) = node
        .raw(Method::POST, "/no/such/route", &[], Some("{}".into()))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let unknown: Value = serde_json::from_str(&body).expect("JSON");
    for token in [None, Some("anything")] {
        let (status, content_type, answer) = peer_request(&node, token, r#"{"op": "x"}"#).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
        assert!(
            content_type.starts_with("application/json"),
            "{content_type}"
        );
        assert_eq!(answer, unknown);
    }
}

/// Wrong operator tokens on an org's route count against their sender on
/// the node they reach, before anything is forwarded: that node refuses
/// the sender once it has sent too many, and the org's owner, which never
/// saw them, still takes the right token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn wrong_operator_tokens_count_where_they_arrive() {
    let cluster = Cluster::start(2).await;
    let org = cluster.node(0).create_org("dev").await;
    let owner = cluster.owner_of(&org).await;
    let elsewhere = cluster.node(owner + 1);
    let path = format!("/admin/orgs/{}", org.org_id);
    let wrong = [("authorization", "Bearer wrong-token")];
    for attempt in 0..10 {
        let (status, body) = elsewhere.raw(Method::GET, &path, &wrong, None).await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "attempt {attempt}: {body}"
        );
    }
    let (status, body) = elsewhere.raw(Method::GET, &path, &wrong, None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    let (status, body) = cluster.node(owner).admin(Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["org_id"], org.org_id.as_str());
}

/// An org deleted through a node that does not own it: the owner carries
/// the deletion out, and every node refuses its keys from the answer on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn an_org_deleted_through_another_node_is_refused_by_every_node() {
    let cluster = Cluster::start(2).await;
    let org = cluster.node(0).create_org("pro").await;
    let task = cluster.node(0).new_task(&org.owner_key, "doomed").await;
    let owner = cluster.owner_of(&org).await;
    let other = cluster.node(1 - owner);
    let path = format!("/admin/orgs/{}", org.org_id);
    // A 503 (the org moving between the nodes) is retried, as clients do.
    let body = eventually(Duration::from_secs(20), "the deletion's answer", || async {
        let (status, body) = other.admin(Method::DELETE, &path, None).await;
        match status {
            StatusCode::SERVICE_UNAVAILABLE => None,
            status => {
                assert_eq!(status, StatusCode::ACCEPTED, "{body}");
                Some(body)
            }
        }
    })
    .await;
    assert_eq!(body, json!({ "org_id": org.org_id, "deleting": true }));
    for node in &cluster.nodes {
        let (status, body) = node
            .post(&org.owner_key, "/tasks/get", json!({ "task_ids": [task] }))
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    let (status, body) = other.admin(Method::POST, "/admin/test/purge", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for node in &cluster.nodes {
        let (status, body) = node.admin(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    }
    let left = other
        .execute(
            "UPDATE orgs SET name = name WHERE org_id = ?",
            &[&org.org_id],
        )
        .await;
    assert_eq!(left, 0, "the org's row remains");
    let owned = other
        .execute(
            "UPDATE org_owners SET node_id = node_id WHERE org_id = ?",
            &[&org.org_id],
        )
        .await;
    assert_eq!(owned, 0, "the org's ownership row remains");
}

/// CONTRACT §10: a stream opened on a node that does not own the org
/// receives its events; when the owner dies the stream ends, and
/// reconnecting with the last id seen loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn an_event_stream_on_another_node_follows_the_org_and_resumes_after_its_owner_dies() {
    let mut cluster = Cluster::start(2).await;
    let org = cluster.node(0).create_org("dev").await;
    let key = org.owner_key.clone();
    let owner = cluster.owner_of(&org).await;
    let other = (owner + 1) % 2;
    let mut events = cluster.node(other).open_events(&key, "", None).await;
    let a = cluster.node(owner).new_task(&key, "a").await;
    let b = cluster.node(other).new_task(&key, "b").await;
    let seen = events.events(2).await;
    assert_eq!(
        seen.iter()
            .map(|e| e.task_id().to_owned())
            .collect::<Vec<_>>(),
        [a, b]
    );
    let last = seen[1].id();

    cluster.nodes[owner].kill9().await;
    assert!(
        events.next_event(Duration::from_secs(30)).await.is_none(),
        "the stream ends with its org's owner"
    );
    let survivor = cluster.node(other);
    let c = eventually(Duration::from_secs(15), "the org served again", || async {
        let (status, body) = survivor
            .try_post(&key, "/tasks", json!({ "tasks": [{ "title": "c" }] }))
            .await
            .ok()?;
        (status == StatusCode::CREATED).then(|| str_field(&body["results"][0], "task_id"))
    })
    .await;
    let mut resumed = survivor.open_events(&key, "", Some(last)).await;
    let next = resumed.events(1).await;
    assert_eq!(next[0].task_id(), c);
    assert!(next[0].id() > last, "{next:?}");
}

/// A node whose operator named a public URL (`TASKQ_PUBLIC_URL`) is named
/// in `X-Taskq-Owner` on the answers other nodes forward from it, so that
/// a client which can reach the nodes sends the org's requests there; the
/// owner's own answers, and answers forwarded from a node without one,
/// name nobody. `GET /admin/cluster` lists each node's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn forwarded_answers_name_the_owners_public_url() {
    let public = |i: usize| format!("https://node-{i}.taskq.example:8443");
    let cluster = Cluster::start_with(3, |i, b| {
        if i < 2 {
            b.env("TASKQ_PUBLIC_URL", &format!("{}/", public(i)))
        } else {
            b
        }
    })
    .await;
    let view = cluster_view(cluster.node(2)).await;
    for (i, node) in cluster.nodes.iter().enumerate() {
        let listed = view["nodes"]
            .as_array()
            .and_then(|a| {
                a.iter()
                    .find(|n| n["advertise_url"] == node.base_url.as_str())
            })
            .unwrap_or_else(|| panic!("node {i} in {view}"));
        let expected = (i < 2).then(|| public(i));
        assert_eq!(
            listed.get("public_url").and_then(Value::as_str),
            expected.as_deref(),
            "{listed}"
        );
    }
    let http = reqwest::Client::new();
    let mut owners_seen = HashSet::new();
    for _ in 0..40 {
        let org = cluster.node(0).create_org("dev").await;
        let owner = cluster.owner_of(&org).await;
        if !owners_seen.insert(owner) {
            continue;
        }
        for (i, node) in cluster.nodes.iter().enumerate() {
            let answer = http
                .get(format!("{}/tasks?limit=1", node.base_url))
                .header("x-api-key", &org.owner_key)
                .send()
                .await
                .expect("a node answers");
            assert_eq!(answer.status(), StatusCode::OK, "node {i}");
            let hint = answer
                .headers()
                .get("x-taskq-owner")
                .map(|v| v.to_str().expect("an ASCII URL").to_owned());
            let expected = (i != owner && owner < 2).then(|| public(owner));
            assert_eq!(hint, expected, "asked node {i}, owner node {owner}");
        }
        if owners_seen.len() == 3 {
            return;
        }
    }
    panic!("40 orgs were owned by nodes {owners_seen:?} only");
}

/// Hundreds of long polls forwarded to an org's owner at once hold back no
/// other request forwarded beside them, and each is answered when work
/// comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn hundreds_of_forwarded_long_polls_hold_back_no_other_request() {
    const POLLS: usize = 300;
    let cluster = Cluster::start(2).await;
    let org = cluster.node(0).create_org("dev").await;
    let owner = cluster.owner_of(&org).await;
    let front = cluster.node(owner + 1);
    let received = || async {
        cluster
            .node(owner)
            .metric("taskq_cluster_received_forwarded_total")
            .await
            .unwrap_or(0)
    };
    let before = received().await;
    let polls = long_polls(
        &reqwest::Client::new(),
        &front.base_url,
        &org.owner_key,
        POLLS,
    );
    eventually(
        Duration::from_secs(20),
        "every long poll at the owner",
        || async { (received().await >= before + POLLS as u64).then_some(()) },
    )
    .await;

    let (status, body) = front.get(&org.owner_key, "/tasks?limit=1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        polls.iter().all(|p| !p.is_finished()),
        "the list was answered only once long polls had ended"
    );

    let created = cluster.node(owner).create_many(&org.owner_key, POLLS).await;
    assert_eq!(
        claimed(polls).await,
        created,
        "each long poll claimed a task of its own"
    );
}

/// A body longer than a forwarding node keeps for a second try is streamed
/// to the owner whole; one over the 2 MiB bound is refused by the owner
/// with its 413, which closes the client's connection as a node alone does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn long_bodies_sent_through_another_node_reach_the_owner_whole() {
    let cluster = Cluster::start(2).await;
    let org = cluster.node(0).create_org("dev").await;
    let owner = cluster.owner_of(&org).await;
    let front = cluster.node(owner + 1);
    let items: Vec<Value> = (0..25)
        .map(|i| {
            let description: String = (0..65_536)
                .map(|j| char::from(b'a' + ((i + j) % 26) as u8))
                .collect();
            json!({ "title": format!("long {i}"), "description": description })
        })
        .collect();
    let results = front
        .create_tasks(&org.owner_key, json!(items.clone()))
        .await;
    for (item, result) in items.iter().zip(&results) {
        let task = cluster
            .node(owner)
            .get_task(&org.owner_key, &str_field(result, "task_id"))
            .await;
        assert_eq!(
            task["description"], item["description"],
            "{}",
            item["title"]
        );
    }

    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .expect("client");
    for _ in 0..3 {
        assert_oversized_refused(&http, &format!("{}/tasks", front.base_url), &org.owner_key).await;
    }

    // Without a declared length, the body is refused once it passes the
    // bound, with the same answer.
    let chunks = std::iter::once(br#"{"tasks": [{"title": ""#.to_vec())
        .chain(std::iter::repeat_n(vec![b'x'; 64 * 1024], 48))
        .map(Ok::<_, std::io::Error>);
    let answer = http
        .post(format!("{}/tasks", front.base_url))
        .header("x-api-key", &org.owner_key)
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .expect("the unsized oversized request is answered");
    assert_eq!(answer.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        answer.headers().get("connection").map(|v| v.as_bytes()),
        Some(&b"close"[..])
    );
}
