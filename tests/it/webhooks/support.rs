//! What the webhook tests share: the receiver process (a Python script
//! verifying each delivery with `standardwebhooks`), a server that allows
//! private addresses, and readers of what the receiver got.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::AsyncBufReadExt;

use crate::common::*;

const PYTHON_ENV: &str = "TASKQ_TEST_WEBHOOKS_PYTHON";
pub const WAIT: Duration = Duration::from_secs(30);

/// The receiver process and what it printed.
pub struct Receiver {
    _child: tokio::process::Child,
    port: u16,
    lines: Arc<Mutex<Vec<Value>>>,
    http: reqwest::Client,
}

impl Receiver {
    /// Starts the receiver (`taskq_test_env = "webhooks_python"`).
    pub async fn start() -> Receiver {
        let python = need(PYTHON_ENV);
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/webhooks/receiver.py");
        let mut child = tokio::process::Command::new(&python)
            .arg(script)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("running {python}: {e}"));
        let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let first = out.next_line().await.unwrap().expect("the receiver's port");
        let port = serde_json::from_str::<Value>(&first).unwrap()["listening"]
            .as_u64()
            .expect("listening <port>") as u16;
        let lines: Arc<Mutex<Vec<Value>>> = Arc::default();
        let sink = lines.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = out.next_line().await {
                sink.lock()
                    .unwrap()
                    .push(serde_json::from_str(&line).unwrap());
            }
        });
        taskq::install_crypto_provider();
        Receiver {
            _child: child,
            port,
            lines,
            http: reqwest::Client::new(),
        }
    }

    pub fn url(&self, mode: &str, name: &str) -> String {
        format!("http://127.0.0.1:{}/{mode}/{name}", self.port)
    }

    /// The secrets deliveries to `name` are verified with.
    pub async fn verify_with(&self, name: &str, secrets: &[&str]) {
        let url = format!("http://127.0.0.1:{}/_secrets/{name}", self.port);
        let r = self.http.post(url).json(&secrets).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }

    pub fn deliveries(&self, name: &str) -> Vec<Value> {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .filter(|l| l["name"] == name)
            .cloned()
            .collect()
    }

    /// Waits until the deliveries to `name` satisfy `done`; answers them.
    pub async fn until(
        &self,
        name: &str,
        what: &str,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        eventually(WAIT, what, || {
            let got = self.deliveries(name);
            let ok = done(&got);
            async move { ok.then_some(got) }
        })
        .await
    }
}

pub async fn server(backend: Backend) -> TestServer {
    TestServer::builder(backend)
        .env("TASKQ_WEBHOOKS_ALLOW_PRIVATE", "1")
        .start()
        .await
}

/// `POST /webhooks`, expecting 201; answers the endpoint.
pub async fn create(srv: &TestServer, key: &str, url: &str, events: Value) -> Value {
    let (status, body) = srv
        .post(key, "/webhooks", json!({ "url": url, "events": events }))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body
}

pub fn secret(endpoint: &Value) -> String {
    str_field(endpoint, "secret")
}

/// A receiver, a server, and an org of `tier` with one endpoint taking
/// `events` at the receiver's `mode`, whose deliveries the receiver
/// verifies under `name`.
pub struct Watched {
    pub rx: Receiver,
    pub srv: TestServer,
    pub org: Org,
    pub endpoint: Value,
}

impl Watched {
    /// A server, an org and an endpoint of `rx` (`taskq_test_env = "webhooks_python"`).
    pub async fn start(
        backend: Backend,
        tier: &str,
        (mode, name): (&str, &str),
        events: Value,
    ) -> Watched {
        let rx = Receiver::start().await;
        let srv = server(backend).await;
        let org = srv.create_org(tier).await;
        let endpoint = create(&srv, &org.owner_key, &rx.url(mode, name), events).await;
        rx.verify_with(name, &[&secret(&endpoint)]).await;
        Watched {
            rx,
            srv,
            org,
            endpoint,
        }
    }
}

/// `(type, task_id, from_status, to_status)` of each delivery, in order.
pub fn events(got: &[Value]) -> Vec<(String, String, Value, String)> {
    got.iter()
        .filter(|d| d["status"] == 200)
        .map(|d| {
            let b = &d["body"];
            (
                str_field(b, "type"),
                b["data"]["task_id"].as_str().unwrap_or_default().to_owned(),
                b["data"]["from_status"].clone(),
                b["data"]["to_status"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

pub fn has(got: &[Value], kind: &str, task: &str, to: &str) -> bool {
    events(got)
        .iter()
        .any(|(t, id, _, s)| t == kind && id == task && s == to)
}
