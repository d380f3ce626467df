//! HTTPS: `taskq serve` with `TASKQ_TLS_CERT` and `TASKQ_TLS_KEY` (the
//! `--tls-cert`/`--tls-key` flags) serves the whole API over TLS, and plain
//! HTTP to that port fails cleanly without harming the server.

use std::time::Duration;

use crate::common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

backend_tests!(
    https_serves_a_claim_loop_and_refuses_plain_http,
    |backend: Backend| async move {
        let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
            .expect("a self-signed certificate");
        let pem = cert.cert.pem();
        let dir = tempfile::tempdir().expect("temp dir");
        let cert_path = dir.path().join("cert.pem");
        let key_path = dir.path().join("key.pem");
        std::fs::write(&cert_path, &pem).expect("write the certificate");
        std::fs::write(&key_path, cert.signing_key.serialize_pem()).expect("write the key");

        let srv = TestServer::builder(backend)
            .env("TASKQ_TLS_CERT", cert_path.to_str().unwrap())
            .env("TASKQ_TLS_KEY", key_path.to_str().unwrap())
            .trust(pem.as_bytes())
            .start()
            .await;
        assert!(srv.base_url.starts_with("https://"), "{}", srv.base_url);

        // The whole API over TLS: a claim-work-complete loop.
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        srv.create_tasks(
            key,
            json!([{ "title": "one" }, { "title": "two" }, { "title": "three" }]),
        )
        .await;
        for _ in 0..3 {
            let task = srv
                .claim(key, json!({ "lease_seconds": 60 }))
                .await
                .expect("a task");
            let result = srv
                .update_ok(
                    key,
                    json!({ "task_id": task["task_id"], "lease_id": task["lease_id"],
                        "status": "completed", "note": "done over TLS" }),
                )
                .await;
            assert_eq!(result["status"], "completed");
        }
        assert!(srv.claim(key, json!({})).await.is_none());

        // Plain HTTP to the TLS port gets no HTTP answer: the handshake fails
        // and the connection is closed, within a bound.
        let addr = srv.base_url.trim_start_matches("https://").to_string();
        let mut plain = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect");
        plain
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), plain.read_to_end(&mut answer))
            .await
            .expect("the server closes a plain-HTTP connection");
        assert!(
            read.is_err() || !answer.starts_with(b"HTTP/1.1 200"),
            "plain HTTP was served: {:?}",
            String::from_utf8_lossy(&answer)
        );

        // The server goes on serving TLS, to HTTP/2 clients too (by ALPN).
        let (status, body) = srv.get(key, "/me").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        taskq::install_crypto_provider();
        let h2 = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).unwrap())
            .build()
            .expect("an HTTP/2 client");
        let answer = h2
            .get(format!("{}/me", srv.base_url))
            .header("x-api-key", key)
            .send()
            .await
            .expect("an answer over HTTP/2");
        assert_eq!(
            (answer.status(), answer.version()),
            (StatusCode::OK, reqwest::Version::HTTP_2)
        );
    }
);
