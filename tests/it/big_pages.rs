//! The worst page a client may ask for: `GET /tasks?full=true&limit=200`
//! over tasks that carry the largest allowed content (a 1,000-character
//! title, 65,536-character description, 64 KiB of metadata and of output,
//! about 200 KiB each). A full page ends early at a byte budget and
//! `next_cursor` goes on, so four such listings at once leave the server's
//! memory within a stated bound instead of building 40 MB answers.

use std::sync::Arc;

use crate::common::*;

const TASKS: usize = 200;
/// The server's peak memory may grow this much over its resting memory
/// while four worst-case listings run at once.
const PEAK_GROWTH_MIB: u64 = 160;

fn big(c: char, len: usize) -> String {
    std::iter::repeat_n(c, len).collect()
}

/// Every task of a full listing, page by page; answers the tasks and the
/// largest page body in bytes.
async fn list_full(srv: &TestServer, key: &str) -> (Vec<Value>, usize, usize) {
    let (mut tasks, mut largest, mut pages) = (Vec::new(), 0, 0);
    let mut cursor: Option<String> = None;
    loop {
        let mut path = "/tasks?full=true&limit=200".to_string();
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={}", encode_query(c)));
        }
        let (status, text) = srv
            .raw(reqwest::Method::GET, &path, &[("x-api-key", key)], None)
            .await;
        assert_eq!(status, StatusCode::OK, "{}", &text[..text.len().min(300)]);
        largest = largest.max(text.len());
        pages += 1;
        let body: Value = serde_json::from_str(&text).expect("JSON");
        tasks.extend(body["tasks"].as_array().unwrap().iter().cloned());
        match body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return (tasks, largest, pages),
        }
    }
}

backend_tests!(
    the_worst_page_stays_within_its_memory_bound,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = org.owner_key.clone();
        // Creates of 10 (a body stays under 2 MiB), then each task's output.
        for batch in 0..TASKS / 10 {
            let items: Vec<Value> = (0..10)
                .map(|i| {
                    json!({
                        "title": format!("{batch:02}-{i} {}", big('t', 990)),
                        "description": big('d', 65_536),
                        "metadata": { "m": big('m', 65_520) },
                    })
                })
                .collect();
            let created = srv.create_tasks(&key, json!(items)).await;
            let updates: Vec<Value> = ids(&created)
                .into_iter()
                .map(|id| json!({ "task_id": id, "output": { "o": big('o', 65_520) } }))
                .collect();
            let (status, body) = srv.update(&key, json!(updates)).await;
            assert_eq!(status, StatusCode::OK, "{body}");
        }

        let (resting, _) = srv.rss_kb().await;
        let Some(resting) = resting else {
            eprintln!("note: no /proc here; skipping the memory reading");
            return;
        };
        assert!(srv.reset_peak_rss().await, "the peak can be reset");
        let srv = Arc::new(srv);
        let mut listings = tokio::task::JoinSet::new();
        for _ in 0..4 {
            let (srv, key) = (srv.clone(), key.clone());
            listings.spawn(async move { list_full(&srv, &key).await });
        }
        while let Some(done) = listings.join_next().await {
            let (tasks, largest, pages) = done.expect("listing");
            assert_eq!(tasks.len(), TASKS, "every task, across pages");
            assert!(pages > 1, "a full page ends early at its byte budget");
            assert!(largest < 6 * 1024 * 1024, "a page body of {largest} bytes");
            assert_eq!(tasks[0]["output"]["o"].as_str().map(str::len), Some(65_520));
        }
        let (_, peak) = srv.rss_kb().await;
        let growth_mib = peak.expect("a peak reading").saturating_sub(resting) / 1024;
        eprintln!(
            "{:?}: resting {} MiB, peak growth {growth_mib} MiB for four worst-case listings",
            srv.backend,
            resting / 1024
        );
        assert!(
            growth_mib <= PEAK_GROWTH_MIB,
            "peak memory grew {growth_mib} MiB (bound {PEAK_GROWTH_MIB} MiB)"
        );
    }
);
