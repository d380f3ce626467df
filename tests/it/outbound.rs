//! The server's outbound calls, end to end: with `HTTP_PROXY` and
//! `HTTPS_PROXY` naming a proxy, webhook deliveries still go straight to
//! their receiver (a proxy would resolve the host in the sender's place and
//! step around the check of private addresses); and on a machine without
//! CA certificates the server starts, serves, and says why an HTTPS call
//! cannot be made.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use reqwest::Method;
use tokio::io::AsyncReadExt as _;
use tokio::net::TcpListener;

const WAIT: Duration = Duration::from_secs(30);

/// A proxy that forwards nothing: it records every connection made to it
/// (and the first line sent on it), then closes it.
struct RecordingProxy {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
}

impl RecordingProxy {
    async fn start() -> RecordingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, from)) = listener.accept().await {
                let index = {
                    let mut seen = sink.lock().unwrap();
                    seen.push(format!("a connection from {from}"));
                    seen.len() - 1
                };
                let sink = sink.clone();
                tokio::spawn(async move {
                    let mut first = vec![0; 512];
                    let read = tokio::time::timeout(WAIT, stream.read(&mut first)).await;
                    if let Ok(Ok(n)) = read {
                        let text = String::from_utf8_lossy(&first[..n]);
                        let line = text.lines().next().map(str::to_owned);
                        sink.lock().unwrap()[index] = format!("{from}: {line:?}");
                    }
                });
            }
        });
        RecordingProxy { url, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// A webhook receiver on loopback that answers 204 and records the paths
/// it was sent to.
struct Receiver {
    base: String,
    paths: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let paths: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = paths.clone();
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push(uri.path().to_owned());
                axum::http::StatusCode::NO_CONTENT
            }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { base, paths }
    }

    async fn until_sent_to(&self, path: &str) {
        eventually(WAIT, &format!("a delivery to {path}"), || {
            let arrived = self.paths.lock().unwrap().iter().any(|p| p == path);
            async move { arrived.then_some(()) }
        })
        .await;
    }
}

/// A server whose environment names `proxy` for every scheme, with no
/// exception: one that followed it would send everything there.
fn through_proxy(builder: Builder, proxy: &RecordingProxy) -> Builder {
    let mut builder = builder;
    for name in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        builder = builder.env(name, &proxy.url);
    }
    builder.env("NO_PROXY", "").env("no_proxy", "")
}

async fn create_webhook(srv: &TestServer, key: &str, url: &str) -> (StatusCode, Value) {
    srv.post(key, "/webhooks", json!({ "url": url, "events": ["*"] }))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_target_is_refused_by_its_kind_and_nothing_reaches_the_proxy() {
    let proxy = RecordingProxy::start().await;
    let srv = through_proxy(TestServer::builder(Backend::Sqlite), &proxy)
        .start()
        .await;
    let org = srv.create_org("dev").await;
    for (url, kind) in [
        ("http://10.1.2.3/h", "a private address"),
        ("http://127.0.0.1:9/h", "a loopback address"),
        ("http://[64:ff9b::7f00:1]/h", "a NAT64 address"),
        ("http://[64:ff9b:1::a00:1]/h", "a NAT64 address"),
        ("http://[::127.0.0.1]/h", "an IPv4-compatible address"),
        ("http://[::ffff:127.0.0.1]/h", "an IPv4-mapped address"),
        ("http://[2002:7f00:1::]/h", "a 6to4 address"),
        ("http://[2001:0:4136:e378::1]/h", "a Teredo address"),
        ("http://198.18.0.1/h", "a benchmarking address"),
        (
            "http://192.0.0.8/h",
            "an address of the IETF's protocol assignments",
        ),
    ] {
        let (status, body) = create_webhook(&srv, &org.owner_key, url).await;
        assert_bad_request(status, &body, "url");
        assert!(
            body["error"].as_str().is_some_and(|e| e.contains(kind)),
            "{url}: the refusal should say it is {kind}: {body}"
        );
    }
    let (_, list) = srv.get(&org.owner_key, "/webhooks").await;
    assert_eq!(list["webhooks"], json!([]), "{list}");
    assert_eq!(proxy.seen(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_go_straight_to_the_receiver_when_the_environment_names_a_proxy() {
    let proxy = RecordingProxy::start().await;
    let receiver = Receiver::start().await;
    let srv = through_proxy(TestServer::builder(Backend::Sqlite), &proxy)
        .env("TASKQ_WEBHOOKS_ALLOW_PRIVATE", "1")
        .start()
        .await;
    let org = srv.create_org("dev").await;
    let url = format!("{}/hook", receiver.base);
    let (status, endpoint) = create_webhook(&srv, &org.owner_key, &url).await;
    assert_eq!(status, StatusCode::CREATED, "{endpoint}");

    srv.create_task(&org.owner_key, json!({ "title": "one" }))
        .await;
    receiver.until_sent_to("/hook").await;
    assert_eq!(proxy.seen(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_ca_certificates_the_server_serves_and_says_why_https_fails() {
    // Where the system's roots are read from (rustls-native-certs): when
    // either variable is set, only there.
    let empty = tempfile::tempdir().expect("temp dir");
    let bundle = empty.path().join("none.pem");
    std::fs::write(&bundle, "").expect("an empty bundle");
    let certs = empty.path().join("certs");
    std::fs::create_dir(&certs).expect("an empty directory");
    let receiver = Receiver::start().await;
    let srv = TestServer::builder(Backend::Sqlite)
        .env("SSL_CERT_FILE", bundle.to_str().unwrap())
        .env("SSL_CERT_DIR", certs.to_str().unwrap())
        .env("TASKQ_WEBHOOKS_ALLOW_PRIVATE", "1")
        .env("TASKQ_FEEDBACK_FILTER", "https://127.0.0.1:9/v1")
        .start()
        .await;
    assert!(
        srv.server_log()
            .contains("no CA certificates were found on this machine"),
        "a warning at start: {}",
        srv.server_log()
    );

    let (status, health) = srv.raw(Method::GET, "/healthz", &[], None).await;
    assert_eq!(status, StatusCode::OK, "{health}");
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let (status, https) = create_webhook(&srv, key, "https://127.0.0.1:9/secure").await;
    assert_eq!(status, StatusCode::CREATED, "{https}");
    let plain = format!("{}/plain", receiver.base);
    let (status, _) = create_webhook(&srv, key, &plain).await;
    assert_eq!(status, StatusCode::CREATED);

    let task = srv.create_task(key, json!({ "title": "one" })).await;
    let claimed = srv.claim(key, json!({})).await.expect("a task to claim");
    assert_eq!(str_field(&claimed, "task_id"), task);
    srv.update_ok(
        key,
        json!({ "task_id": task, "status": "completed", "note": "done" }),
    )
    .await;

    // Plain HTTP is delivered; HTTPS is refused, and the log says why.
    receiver.until_sent_to("/plain").await;
    let deliveries = format!("/webhooks/{}/deliveries", str_field(&https, "webhook_id"));
    let failed = eventually(WAIT, "an attempt at the HTTPS endpoint", || async {
        let (_, log) = srv.get(key, &deliveries).await;
        log["deliveries"]
            .as_array()
            .and_then(|d| d.first())
            .cloned()
    })
    .await;
    assert_eq!(failed["status_code"], Value::Null, "{failed}");
    assert!(
        failed["error"]
            .as_str()
            .is_some_and(|e| e.contains("no CA certificates were found")),
        "the delivery log should say why: {failed}"
    );

    // A model endpoint over HTTPS is unavailable, for the same reason.
    let (status, body) = srv
        .post(key, "/feedback", json!({ "message": "hello" }))
        .await;
    assert_error(status, &body, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        srv.server_log()
            .lines()
            .any(|l| l.contains("feedback content filter unavailable")
                && l.contains("cannot verify HTTPS servers")),
        "the log should say why: {}",
        srv.server_log()
    );
}
