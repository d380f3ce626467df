//! A store outage under load: PostgreSQL cut off behind a TCP proxy the
//! test controls, and on SQLite every write failing (the test hook, as a
//! full or read-only disk would). Requests answer 503 `store unavailable`
//! with `Retry-After`, org actors are not left in a crash loop, nothing
//! acknowledged is lost, nothing is stored that was not asked for, and
//! service resumes by itself.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use reqwest::Method;
use tokio::sync::watch;

/// How the store goes away and comes back.
enum Outage {
    Proxy(Proxy),
    Hook,
}

impl Outage {
    async fn set(&self, srv: &TestServer, down: bool) {
        match self {
            Outage::Proxy(proxy) => proxy.set_cut(down),
            Outage::Hook => {
                let (status, body) = srv
                    .admin(
                        Method::POST,
                        "/admin/test/store",
                        Some(json!({ "unavailable": down })),
                    )
                    .await;
                assert_eq!(status, StatusCode::OK, "{body}");
            }
        }
    }
}

/// What the agents saw.
#[derive(Default)]
struct Seen {
    acked: Vec<String>,
    /// Creates answered 503: in doubt, since the store may have committed
    /// a transaction whose answer the cut connection lost.
    unavailable: Vec<String>,
    last_ack: Option<Instant>,
    unexpected: Vec<String>,
}

/// One create by an agent, as the agent saw it.
async fn create(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    agent: usize,
) -> (String, Result<(StatusCode, bool, String), String>) {
    let id = new_uuid();
    let body = json!({ "tasks": [{ "task_id": id, "title": format!("agent {agent}") }] });
    let answer = match http
        .post(url)
        .header("x-api-key", key)
        .json(&body)
        .send()
        .await
    {
        Ok(r) => {
            let status = r.status();
            let retry_after = r.headers().contains_key("retry-after");
            Ok((status, retry_after, r.text().await.unwrap_or_default()))
        }
        Err(e) => Err(format!("transport: {e}")),
    };
    (id, answer)
}

/// Notes how an agent's create was answered.
fn record(seen: &Mutex<Seen>, id: String, answer: Result<(StatusCode, bool, String), String>) {
    let mut seen = seen.lock().unwrap();
    match answer {
        Ok((StatusCode::CREATED, _, _)) => {
            seen.acked.push(id);
            seen.last_ack = Some(Instant::now());
        }
        Ok((StatusCode::SERVICE_UNAVAILABLE, true, text)) if text.contains("store unavailable") => {
            seen.unavailable.push(id);
        }
        Ok((status, retry_after, text)) => seen
            .unexpected
            .push(format!("{status} (Retry-After: {retry_after}): {text}")),
        Err(e) => seen.unexpected.push(e),
    }
}

backend_tests!(
    a_store_outage_answers_503_loses_nothing_and_recovers,
    |backend: Backend| async move {
        let (srv, outage) = match backend {
            Backend::Postgres => {
                let proxy = Proxy::start(postgres_addr()).await;
                let srv = TestServer::builder(backend)
                    .postgres_through(&proxy.addr)
                    .start()
                    .await;
                (srv, Outage::Proxy(proxy))
            }
            Backend::Sqlite => (TestServer::start(backend).await, Outage::Hook),
        };
        let org = srv.create_org("dev").await;
        let url = format!("{}/tasks", srv.base_url);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (stop, stopped) = watch::channel(false);
        taskq::install_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("client");
        let mut agents = Vec::new();
        for agent in 0..8 {
            let (http, url, key, seen, stopped) = (
                http.clone(),
                url.clone(),
                org.owner_key.clone(),
                seen.clone(),
                stopped.clone(),
            );
            agents.push(tokio::spawn(async move {
                loop {
                    if *stopped.borrow() {
                        break;
                    }
                    let (id, answer) = create(&http, &url, &key, agent).await;
                    record(&seen, id, answer);
                    tokio::task::yield_now().await;
                }
            }));
        }
        let acked = |seen: &Arc<Mutex<Seen>>| seen.lock().unwrap().acked.len();

        // Load, then the store goes away until requests are refused.
        eventually(Duration::from_secs(20), "creates under load", || async {
            (acked(&seen) >= 50).then_some(())
        })
        .await;
        outage.set(&srv, true).await;
        eventually(Duration::from_secs(30), "503 store unavailable", || async {
            (seen.lock().unwrap().unavailable.len() >= 20).then_some(())
        })
        .await;
        let during = acked(&seen);
        // It stays away a few seconds; nothing is acknowledged meanwhile.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            acked(&seen) <= during + 8,
            "acknowledged while the store was away: {} -> {}",
            during,
            acked(&seen)
        );

        // It comes back: service resumes by itself.
        outage.set(&srv, false).await;
        let back = Instant::now();
        let resumed = eventually(Duration::from_secs(60), "service resumes", || async {
            let seen = seen.lock().unwrap();
            seen.last_ack.filter(|at| *at > back).map(|at| at - back)
        })
        .await;
        eprintln!(
            "{:?}: service resumed {:.2} s after the store came back",
            srv.backend,
            resumed.as_secs_f64()
        );
        eventually(
            Duration::from_secs(20),
            "creates after the outage",
            || async { (acked(&seen) >= during + 50).then_some(()) },
        )
        .await;
        stop.send_replace(true);
        for agent in agents {
            agent.await.expect("agent");
        }

        let seen = std::mem::take(&mut *seen.lock().unwrap());
        assert!(
            seen.unexpected.is_empty(),
            "answers other than 201 or 503 store unavailable: {:?}",
            &seen.unexpected[..seen.unexpected.len().min(5)]
        );
        // Every acknowledged create is stored.
        for chunk in seen.acked.chunks(25) {
            let (status, body) = srv
                .post(&org.owner_key, "/tasks/get", json!({ "task_ids": chunk }))
                .await;
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(
                body["not_found"],
                json!([]),
                "acknowledged but lost: {body}"
            );
        }
        // Nothing is stored that was not asked for; what is stored beyond the
        // acknowledged creates was answered 503 (a commit whose answer the
        // cut connection lost), and the client's own task id lets it retry
        // and learn so from a 409.
        let acked: std::collections::HashSet<&String> = seen.acked.iter().collect();
        let in_doubt: std::collections::HashSet<&String> = seen.unavailable.iter().collect();
        let stored = srv.list_all(&org.owner_key, "").await;
        let extra: Vec<String> = stored
            .iter()
            .map(|t| t["task_id"].as_str().expect("task_id").to_owned())
            .filter(|id| !acked.contains(id))
            .collect();
        assert!(
            extra.iter().all(|id| in_doubt.contains(id)),
            "stored but neither acknowledged nor answered 503: {extra:?}"
        );
        if !extra.is_empty() {
            eprintln!(
                "{:?}: {} create(s) answered 503 were committed",
                srv.backend,
                extra.len()
            );
        }

        // No crash loop: the org's actor restarted a handful of times at most.
        let restarts = srv
            .metric("taskq_actor_restarts_total")
            .await
            .expect("the restart counter");
        assert!(
            restarts <= 3,
            "org actors restarted {restarts} times:\n{}",
            srv.server_log()
        );
        assert_eq!(srv.metric("taskq_store_up").await, Some(1));
    }
);
