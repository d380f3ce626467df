//! The event stream (`GET /events`, CONTRACT §10): every transition once,
//! in commit order, with the webhook body and no content; filters; the
//! keep-alive; resuming by id (across a restart too) without a gap or a
//! repeat, also while many writers change the org; the per-key limit.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::sse::{SseEvent, SseItem, SseStream};
use crate::common::*;

const SOON: Duration = Duration::from_secs(20);

/// A task created as a marker: the next event on a stream that keeps
/// everything must be its creation, so nothing else came before it.
async fn marker(srv: &TestServer, key: &str, events: &mut SseStream) -> SseEvent {
    let id = srv.new_task(key, "marker").await;
    let next = events.next_event(SOON).await.expect("the marker's event");
    assert_eq!(next.task_id(), id, "{next:?}");
    assert_eq!(next.event.as_deref(), Some("task.created"));
    next
}

fn names(events: &[SseEvent]) -> Vec<(String, Option<String>)> {
    events
        .iter()
        .map(|e| (e.task_id().to_owned(), e.event.clone()))
        .collect()
}

fn assert_rising(events: &[SseEvent]) {
    let ids: Vec<i64> = events.iter().map(SseEvent::id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids rise: {ids:?}");
}

backend_tests!(
    every_transition_arrives_once_in_order_with_the_webhook_body,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let mut events = srv.open_events(key, "", None).await;

        let a = srv
            .create_task(key, json!({ "title": "secret a", "description": "hidden" }))
            .await;
        let created = srv
            .create_tasks(key, json!([{ "title": "secret b", "blocked_by": [a] }]))
            .await;
        let b = str_field(&created[0], "task_id");
        srv.claim(key, json!({})).await.expect("a to claim");
        srv.update_ok(
        key,
        json!({ "task_id": a, "status": "completed", "output": { "secret": 1 }, "note": "secret" }),
    )
    .await;
        srv.claim(key, json!({})).await.expect("b to claim");
        srv.update_ok(
            key,
            json!({ "task_id": b, "status": "failed", "note": "secret note" }),
        )
        .await;
        let c = srv
            .create_task(key, json!({ "title": "c", "assignee": org.owner_email }))
            .await;
        srv.update_ok(key, json!({ "task_id": c, "status": "paused" }))
            .await;
        srv.update_ok(
            key,
            json!({ "task_id": c, "status": "canceled", "note": "n" }),
        )
        .await;
        let d = srv.create_task(key, json!({ "title": "d" })).await;
        srv.claim(key, json!({ "lease_seconds": 1 }))
            .await
            .expect("d to claim");
        advance_clock(&srv, 5).await;

        let got = events.events(13).await;
        let name = |s: &str| Some(s.to_owned());
        assert_eq!(
            names(&got),
            [
                (a.clone(), name("task.created")),
                (b.clone(), name("task.created")),
                (a.clone(), name("task.claimed")),
                (a.clone(), name("task.completed")),
                (b.clone(), name("task.unblocked")),
                (b.clone(), name("task.claimed")),
                (b.clone(), name("task.failed")),
                (c.clone(), name("task.created")),
                // A pause has no type of its own: an unnamed event.
                (c.clone(), None),
                (c.clone(), name("task.canceled")),
                (d.clone(), name("task.created")),
                (d.clone(), name("task.claimed")),
                (d.clone(), name("task.lease_expired")),
            ]
        );
        assert_rising(&got);
        for event in &got {
            let body = &event.data;
            let kind = event.event.as_deref().unwrap_or("task.status_changed");
            assert_eq!(body["type"], kind, "{body}");
            assert!(
                body["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')),
                "{body}"
            );
            let keys: BTreeSet<&str> = body
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(
                keys,
                BTreeSet::from(["type", "timestamp", "data"]),
                "{body}"
            );
            let data: BTreeSet<&str> = body["data"]
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(
                data,
                BTreeSet::from(["org_id", "task_id", "from_status", "to_status", "agent_id"]),
                "{body}"
            );
            assert_eq!(body["data"]["org_id"], org.org_id.as_str());
            assert!(!body.to_string().contains("secret"), "no content: {body}");
        }
        assert_eq!(got[0].data["data"]["from_status"], Value::Null);
        assert_eq!(got[0].data["data"]["to_status"], "pending");
        assert_eq!(got[1].data["data"]["to_status"], "blocked");
        assert_eq!(got[12].data["data"]["agent_id"], "system");
        // Nothing more came: the next event is the next change.
        marker(&srv, key, &mut events).await;
    }
);

backend_tests!(
    a_burst_committed_together_arrives_in_fewer_chunks_each_event_once,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let mut events = srv.open_events(key, "", None).await;
        let mut watching_one = srv.open_events(key, "types=task.created", None).await;
        let first = marker(&srv, key, &mut events).await;
        let seen = watching_one
            .next_event(SOON)
            .await
            .expect("the marker's event");
        assert_eq!(seen.id(), first.id(), "{seen:?}");
        let before = (events.chunks(), watching_one.chunks());

        // One call, one commit: 25 creations, as many as a call takes.
        const BURST: usize = 25;
        let items: Vec<Value> = (0..BURST)
            .map(|i| json!({ "title": format!("t{i}") }))
            .collect();
        let created: Vec<String> = srv
            .create_tasks(key, Value::Array(items))
            .await
            .iter()
            .map(|r| str_field(r, "task_id"))
            .collect();

        for (stream, before) in [(&mut events, before.0), (&mut watching_one, before.1)] {
            let got = stream.events(BURST).await;
            let chunks = stream.chunks() - before;
            assert!(chunks < BURST, "{BURST} events in {chunks} chunks");
            assert_rising(&got);
            let ids: Vec<&str> = got.iter().map(SseEvent::task_id).collect();
            assert_eq!(ids, created, "each event once, in commit order");
            for event in &got {
                assert_eq!(event.event.as_deref(), Some("task.created"));
                assert_eq!(event.data["type"], "task.created", "{:?}", event.data);
                assert_eq!(event.data["data"]["org_id"], org.org_id.as_str());
                assert_eq!(event.data["data"]["from_status"], Value::Null);
                assert_eq!(event.data["data"]["to_status"], "pending");
            }
        }
        // Nothing more came: the next event is the next change.
        let next = srv.new_task(key, "marker").await;
        for stream in [&mut events, &mut watching_one] {
            let event = stream.next_event(SOON).await.expect("the marker's event");
            assert_eq!(event.task_id(), next, "{event:?}");
        }
    }
);

backend_tests!(
    filters_keep_the_types_and_tasks_asked_for,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let owned = |title: &str| json!({ "title": title, "assignee": org.owner_email });
        let a = srv.create_task(key, owned("a")).await;
        let b = srv.create_task(key, owned("b")).await;
        let mut done = srv
            .open_events(key, "types=task.completed,task.canceled", None)
            .await;
        let mut only_b = srv.open_events(key, &format!("task_id={b}"), None).await;

        srv.update_ok(
            key,
            json!({ "task_id": a, "status": "canceled", "note": "n" }),
        )
        .await;
        srv.update_ok(key, json!({ "task_id": b, "status": "paused" }))
            .await;
        srv.update_ok(
            key,
            json!({ "task_id": b, "status": "canceled", "note": "n" }),
        )
        .await;

        let got = done.events(2).await;
        assert_eq!(
            names(&got),
            [
                (a.clone(), Some("task.canceled".to_owned())),
                (b.clone(), Some("task.canceled".to_owned()))
            ]
        );
        let got = only_b.events(2).await;
        assert_eq!(
            names(&got),
            [
                (b.clone(), None),
                (b.clone(), Some("task.canceled".to_owned()))
            ]
        );
    }
);

backend_tests!(bad_queries_are_refused_with_400, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let many: Vec<String> = (0..101).map(|_| new_uuid()).collect();
    for (query, field) in [
        ("types=task.exploded", "types"),
        ("types=", "types"),
        ("task_id=not-a-uuid", "task_id"),
        (&format!("task_id={}", many.join(",")) as &str, "task_id"),
        ("since=-1", "since"),
        ("since=abc", "since"),
        ("colour=blue", "colour"),
    ] {
        let response = srv.try_open_events(key, query, None).await;
        let status = response.status();
        let body: Value = response.json().await.expect("a JSON error");
        assert_bad_request(status, &body, field);
    }
    let response = reqwest::Client::new()
        .get(format!("{}/events", srv.base_url))
        .header("x-api-key", key.as_str())
        .header("last-event-id", "yesterday")
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_bad_request(status, &body, "Last-Event-ID");
    let response = srv.try_open_events("tq_not_a_key", "", None).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
});

backend_tests!(
    a_quiet_stream_sends_a_comment_every_15_seconds,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let mut events = srv.open_events(&org.owner_key, "", None).await;
        // The server's clock moves 16 s: the keep-alive is due at once, not
        // after 15 real seconds.
        advance_clock(&srv, 16).await;
        match events.next(Duration::from_secs(5)).await {
            Some(SseItem::Comment(_)) => {}
            other => panic!("a keep-alive comment, got {other:?}"),
        }
        // Still open and live afterwards.
        marker(&srv, &org.owner_key, &mut events).await;
    }
);

backend_tests!(
    resuming_after_an_id_misses_nothing_and_repeats_nothing,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let mut events = srv.open_events(key, "", None).await;
        let mut tasks = Vec::new();
        for i in 0..3 {
            tasks.push(srv.new_task(key, &format!("before {i}")).await);
        }
        let first = events.events(3).await;
        drop(events);
        for i in 0..3 {
            tasks.push(srv.new_task(key, &format!("after {i}")).await);
        }
        let k = first[1].id();

        // Last-Event-ID: everything after k, then live.
        let mut resumed = srv.open_events(key, "", Some(k)).await;
        let got = resumed.events(4).await;
        let seen: Vec<&str> = got.iter().map(SseEvent::task_id).collect();
        assert_eq!(
            seen,
            tasks[2..].iter().map(String::as_str).collect::<Vec<_>>()
        );
        assert_eq!(got[0].id(), first[2].id());
        assert_rising(&got);
        marker(&srv, key, &mut resumed).await;

        // `since` does the same; the header wins over it.
        let mut since = srv.open_events(key, &format!("since={k}"), None).await;
        assert_eq!(since.events(1).await[0].id(), first[2].id());
        let mut both = srv.open_events(key, "since=0", Some(first[2].id())).await;
        assert_eq!(both.events(1).await[0].task_id(), tasks[3]);
    }
);

backend_tests!(a_stream_resumes_across_a_restart, |mut srv| async move {
    let org = srv.create_org("dev").await;
    let key = org.owner_key.clone();
    let mut events = srv.open_events(&key, "", None).await;
    let a = srv
        .create_task(&key, json!({ "title": "a", "assignee": org.owner_email }))
        .await;
    let last = events.events(1).await[0].id();
    srv.restart().await;
    // The stream ended with the server.
    assert!(events.next_event(SOON).await.is_none());
    let b = srv.new_task(&key, "b").await;
    srv.update_ok(
        &key,
        json!({ "task_id": a, "status": "canceled", "note": "n" }),
    )
    .await;
    let mut resumed = srv.open_events(&key, "", Some(last)).await;
    let got = resumed.events(2).await;
    assert_eq!(
        names(&got),
        [
            (b.clone(), Some("task.created".to_owned())),
            (a.clone(), Some("task.canceled".to_owned()))
        ]
    );
    assert!(got[0].id() > last);
    assert_rising(&got);
});

backend_tests!(
    a_key_holds_ten_streams_and_opening_one_is_a_read,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let mut open = Vec::new();
        for _ in 0..10 {
            open.push(srv.open_events(key, "", None).await);
        }
        let refused = srv.try_open_events(key, "", None).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["limit_type"], "streams", "{body}");
        assert_eq!(body["limit"], 10, "{body}");
        // Another key of the org has streams of its own.
        let (_, other) = srv.new_key(key, "watcher").await;
        let mut theirs = srv.open_events(&other, "", None).await;
        // A stream given up frees its place, once the server finds the
        // connection gone: at its next write, which a change makes.
        drop(open.pop());
        let _reopened = eventually(SOON, "a place freed", || async {
            srv.new_task(key, "nudge").await;
            let response = srv.try_open_events(key, "", None).await;
            (response.status() == StatusCode::OK).then_some(response)
        })
        .await;
        // The other key's stream saw the changes meanwhile.
        let nudge = theirs
            .next_event(SOON)
            .await
            .expect("the other key's stream is live");
        assert_eq!(nudge.event.as_deref(), Some("task.created"));
    }
);

backend_tests!(
    a_reconnecting_subscriber_sees_the_whole_history_under_concurrent_writers,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = org.owner_key.clone();
        let email = org.owner_email.clone();
        const WRITERS: usize = 4;
        const TASKS: usize = 15;
        let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (base, key, email) = (srv.base_url.clone(), key.clone(), email.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                for i in 0..TASKS {
                    let created: Value = http
                        .post(format!("{base}/tasks"))
                        .header("x-api-key", &key)
                        .json(&json!({ "tasks": [{ "title": format!("w{w} t{i}"), "assignee": email }] }))
                        .send()
                        .await
                        .unwrap()
                        .json()
                        .await
                        .unwrap();
                    let id = created["results"][0]["task_id"].as_str().unwrap().to_owned();
                    let response = http
                        .post(format!("{base}/tasks/update"))
                        .header("x-api-key", &key)
                        .json(&json!({ "updates": [{ "task_id": id, "status": "canceled", "note": "n" }] }))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(response.status(), StatusCode::OK);
                }
            })
        })
        .collect();
        let total = WRITERS * TASKS * 2;
        // A stream hung up on is noticed at the server's next write to it; the
        // reconnections take turns among keys so that none runs out of streams
        // meanwhile.
        let mut keys = vec![key.clone()];
        for i in 0..3 {
            keys.push(srv.new_key(&key, &format!("watcher {i}")).await.1);
        }
        let mut seen: Vec<SseEvent> = Vec::new();
        let mut last: Option<i64> = None;
        let mut round = 0usize;
        while seen.len() < total {
            // Since the beginning the first time, then from the last id seen,
            // reading a few events each time (1 to 7) before hanging up.
            let from = if last.is_none() { "since=0" } else { "" };
            let mut events = srv.open_events(&keys[round % keys.len()], from, last).await;
            let take = 1 + (round * 5 + 3) % 7;
            round += 1;
            for _ in 0..take.min(total - seen.len()) {
                let event = events.next_event(SOON).await.expect("the stream goes on");
                last = Some(event.id());
                seen.push(event);
            }
        }
        for writer in writers {
            writer.await.unwrap();
        }
        assert_rising(&seen);
        // The union is the org's history, as a replay from the start gives it.
        let mut whole = srv.open_events(&key, "since=0", None).await;
        let history = whole.events(total).await;
        assert_eq!(
            seen.iter().map(SseEvent::id).collect::<Vec<_>>(),
            history.iter().map(SseEvent::id).collect::<Vec<_>>()
        );
        assert_eq!(names(&seen), names(&history));
        marker(&srv, &key, &mut whole).await;
    }
);

/// Events a raw connection received: their ids, in order.
fn ids_in(raw: &str) -> Vec<i64> {
    raw.lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .map(|id| id.trim().parse().expect("an event id"))
        .collect()
}

backend_tests!(
    a_subscriber_that_reads_nothing_is_cut_off_and_resumes_losing_nothing,
    |srv| async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let org = srv.create_org("dev").await;
        let key = org.owner_key.clone();
        // A client that reads nothing, with a small receive window, so that
        // the server runs ahead of it by the buffer's 10,000 events soon.
        let addr: std::net::SocketAddr = srv
            .base_url
            .trim_start_matches("http://")
            .parse()
            .expect("the server's address");
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut slow = socket.connect(addr).await.unwrap();
        slow.write_all(
            format!(
                "GET /events HTTP/1.1\r\nHost: {addr}\r\nX-Api-Key: {key}\r\n\
             Accept: text/event-stream\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let mut head = [0u8; 12];
        slow.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 200");
        let mut watching = srv.open_events(&key, "", None).await;
        marker(&srv, &key, &mut watching).await;

        // 30,000 events while it reads nothing: the writer is never held
        // up by it.
        const CALLS: usize = 1_200;
        let total = 1 + CALLS * 25;
        drop(watching);
        let writers: Vec<_> = (0..4)
            .map(|_| {
                let (base, key) = (srv.base_url.clone(), key.clone());
                tokio::spawn(async move {
                    let http = reqwest::Client::new();
                    let items: Vec<Value> = (0..25)
                        .map(|i| json!({ "title": format!("t{i}") }))
                        .collect();
                    let mut created = 0;
                    while created < CALLS / 4 {
                        let response = http
                            .post(format!("{base}/tasks"))
                            .header("x-api-key", &key)
                            .json(&json!({ "tasks": items }))
                            .send()
                            .await
                            .unwrap();
                        let status = response.status();
                        let body = response.text().await.unwrap();
                        if status == StatusCode::SERVICE_UNAVAILABLE {
                            // Overloaded (two backends' runs share two cores):
                            // nothing was written, and a client retries.
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                        assert_eq!(status, StatusCode::CREATED, "{body}");
                        created += 1;
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.await.unwrap();
        }

        // The server gave up on it: what it holds ends before the last event.
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(60), slow.read_to_end(&mut raw))
            .await
            .expect("the server ended the slow stream")
            .unwrap();
        let received = ids_in(&String::from_utf8_lossy(&raw));
        assert!(
            received.len() < total,
            "cut off before the end: {} of {total}",
            received.len()
        );
        let last = *received.last().expect("some events reached it");

        // Resuming from its last id gives exactly the rest.
        let mut resumed = srv.open_events(&key, "", Some(last)).await;
        let rest = resumed.events(total - received.len()).await;
        assert!(rest[0].id() > last);
        assert_rising(&rest);
        marker(&srv, &key, &mut resumed).await;
    }
);
