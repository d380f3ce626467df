//! GET /tasks: lean and full items, order, pagination, cursors, filters.

use crate::common::*;
use std::collections::HashSet;

const STATUS_ORDER: [&str; 8] = [
    "pending",
    "paused",
    "in_progress",
    "feedback",
    "blocked",
    "canceled",
    "completed",
    "failed",
];

fn status_rank(status: &str) -> usize {
    STATUS_ORDER
        .iter()
        .position(|s| *s == status)
        .unwrap_or_else(|| panic!("unknown status {status}"))
}

/// GET /tasks with the given query (no `?`), expecting 200.
/// Every task, following `next_cursor` from pages of 4.
async fn pages_of_four(srv: &TestServer, key: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    let mut query = "limit=4".to_string();
    for _ in 0..100 {
        let body = page(srv, key, &query).await;
        seen.extend(body["tasks"].as_array().unwrap().iter().cloned());
        match body["next_cursor"].as_str() {
            Some(c) => query = format!("limit=4&cursor={}", encode_query(c)),
            None => return seen,
        }
    }
    panic!("pagination does not end");
}

async fn page(srv: &TestServer, key: &str, query: &str) -> Value {
    let (status, body) = srv.get(key, &format!("/tasks?{query}")).await;
    assert_eq!(status, StatusCode::OK, "GET /tasks?{query}: {body}");
    body
}

backend_tests!(lean_items_omit_unset_and_heavy_fields, |srv| async move {
    let org = srv.create_org("dev").await;
    let parent = srv.new_task(&org.owner_key, "bare").await;
    let rich = srv
        .create_task(
            &org.owner_key,
            json!({
                "title": "rich",
                "description": "long text",
                "assignee": org.owner_email,
                "tags": ["x"],
                "metadata": { "m": 1 },
                "parent_task_id": parent,
                "blocked_by": [parent],
            }),
        )
        .await;
    srv.update_ok(
        &org.owner_key,
        json!({ "task_id": rich, "output": { "o": 1 } }),
    )
    .await;

    let body = page(&srv, &org.owner_key, "").await;
    assert!(body["next_cursor"].is_null(), "{body}");
    let tasks = body["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 2);
    let find = |id: &str| tasks.iter().find(|t| t["task_id"] == id).cloned().unwrap();

    let bare = find(&parent);
    let keys: HashSet<&str> = bare
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    assert_eq!(
        keys,
        HashSet::from(["task_id", "title", "status", "priority", "updated_at"]),
        "unset fields are omitted: {bare}"
    );

    let item = find(&rich);
    assert_eq!(item["title"], "rich");
    assert_eq!(item["status"], "blocked");
    assert_eq!(item["priority"], 3);
    assert_eq!(item["assignee"], org.owner_email.as_str());
    assert_eq!(item["tags"], json!(["x"]));
    assert_eq!(item["blocked_by"], json!([parent]));
    assert_eq!(item["parent_task_id"], parent.as_str());
    ts(&item, "updated_at");
    for heavy in ["description", "metadata", "output"] {
        assert!(
            item.get(heavy).is_none(),
            "lean item carries {heavy}: {item}"
        );
    }
    for value in item.as_object().unwrap().values() {
        assert!(!value.is_null(), "lean item has a null: {item}");
    }

    let full = page(&srv, &org.owner_key, "full=true").await;
    let full_item = full["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task_id"] == rich.as_str())
        .cloned()
        .unwrap();
    assert_eq!(full_item["description"], "long text");
    assert_eq!(full_item["metadata"], json!({ "m": 1 }));
    assert_eq!(full_item["output"], json!({ "o": 1 }));
    ts(&full_item, "created_at");
    ts(&full_item, "updated_at");
});

backend_tests!(open_work_first_then_priority_then_age, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let blocker = srv
        .create_task(key, json!({ "title": "blocker", "priority": 4 }))
        .await;
    let mut expected_status = std::collections::HashMap::new();
    for (i, status) in STATUS_ORDER.iter().enumerate() {
        for priority in [5, 1, 3] {
            let item = if *status == "blocked" {
                json!({ "title": format!("{status} p{priority}"), "priority": priority, "blocked_by": [blocker] })
            } else {
                json!({ "title": format!("{status} p{priority}"), "priority": priority, "assignee": org.owner_email })
            };
            let id = srv.create_task(key, item).await;
            match *status {
                "pending" | "blocked" => {}
                "completed" | "failed" | "canceled" => {
                    srv.update_ok(key, json!({ "task_id": id, "status": status, "note": "n" }))
                        .await;
                }
                _ => {
                    srv.update_ok(key, json!({ "task_id": id, "status": status }))
                        .await;
                }
            }
            expected_status.insert(id, i);
        }
    }
    expected_status.insert(blocker, 0);

    let items = srv.list_all(key, "full=true").await;
    assert_eq!(items.len(), expected_status.len());
    let sort_key = |t: &Value| {
        (
            status_rank(t["status"].as_str().unwrap()),
            t["priority"].as_i64().unwrap(),
            ts(t, "created_at"),
            t["task_id"].as_str().unwrap().to_string(),
        )
    };
    for pair in items.windows(2) {
        assert!(
            sort_key(&pair[0]) < sort_key(&pair[1]),
            "out of order:\n{}\n{}",
            pair[0],
            pair[1]
        );
    }
    for t in &items {
        let id = t["task_id"].as_str().unwrap();
        assert_eq!(
            status_rank(t["status"].as_str().unwrap()),
            expected_status[id],
            "{t}"
        );
    }

    // A page cap drops only finished work.
    let first = page(&srv, key, "limit=10").await;
    let statuses: Vec<&str> = first["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"].as_str().unwrap())
        .collect();
    assert_eq!(&statuses[..4], ["pending"; 4], "{statuses:?}");
});

backend_tests!(pagination_covers_every_item_once, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let mut created = Vec::new();
    for chunk in 0..2 {
        let items: Vec<Value> = (0..15)
            .map(|i| json!({ "title": format!("t{chunk}-{i}"), "priority": 1 + (i % 5) }))
            .collect();
        created.extend(ids(&srv.create_tasks(key, json!(items)).await));
    }

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut query = "limit=7".to_string();
        if let Some(c) = &cursor {
            query.push_str(&format!("&cursor={}", encode_query(c)));
        }
        let body = page(&srv, key, &query).await;
        let tasks = body["tasks"].as_array().unwrap();
        assert!(tasks.len() <= 7);
        seen.extend(ids(tasks));
        pages += 1;
        match body["next_cursor"].as_str() {
            Some(c) => {
                assert_eq!(tasks.len(), 7, "short page before the end");
                cursor = Some(c.to_string());
            }
            None => break,
        }
        assert!(pages < 10, "pagination does not end");
    }
    assert_eq!(pages, 5);
    assert_eq!(seen.len(), 30);
    assert_eq!(
        seen.iter().collect::<HashSet<_>>().len(),
        30,
        "an item repeated"
    );
    assert_eq!(
        seen.iter().collect::<HashSet<_>>(),
        created.iter().collect::<HashSet<_>>()
    );
    assert_eq!(
        seen,
        srv.list_ids(key, "").await,
        "pages follow the single-page order"
    );

    // `limit` may change between pages.
    let first = page(&srv, key, "limit=7").await;
    let c = encode_query(first["next_cursor"].as_str().unwrap());
    let second = page(&srv, key, &format!("limit=23&cursor={c}")).await;
    assert_eq!(second["tasks"].as_array().unwrap().len(), 23);
    assert!(second["next_cursor"].is_null());
    assert_eq!(ids(second["tasks"].as_array().unwrap()), seen[7..].to_vec());
});

backend_tests!(
    pages_run_from_open_to_finished_work_and_reopened_tasks_move_back,
    |mut srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let items: Vec<Value> = (0..9)
            .map(|i| {
                json!({ "title": format!("t{i}"), "priority": 1 + (i % 3), "assignee": org.owner_email })
            })
            .collect();
        let created = ids(&srv.create_tasks(key, json!(items)).await);
        for (id, status) in
            created[..5]
                .iter()
                .zip(["completed", "failed", "completed", "failed", "canceled"])
        {
            srv.update_ok(key, json!({ "task_id": id, "status": status, "note": "n" }))
                .await;
        }
        // Pages of 4 follow the single page's order and cross from the
        // open tasks to the finished ones without losing or repeating any.
        let statuses = |tasks: &[Value]| {
            tasks
                .iter()
                .map(|t| t["status"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        let listed = pages_of_four(&srv, key).await;
        assert_eq!(ids(&listed), srv.list_ids(key, "").await);
        assert_eq!(
            statuses(&listed),
            [
                "pending",
                "pending",
                "pending",
                "pending",
                "canceled",
                "completed",
                "completed",
                "failed",
                "failed"
            ]
        );

        // A failed task put back to pending is listed with the open work,
        // once, and no longer among the failed; also after a restart, when
        // the org's tasks are read back from the store.
        let reopened = created[1].clone();
        srv.update_ok(key, json!({ "task_id": reopened, "status": "pending" }))
            .await;
        for round in 0..2 {
            let listed = pages_of_four(&srv, key).await;
            assert_eq!(listed.len(), 9, "round {round}");
            let position = ids(&listed).iter().position(|id| *id == reopened);
            assert!(position.is_some_and(|p| p < 5), "round {round}: {listed:?}");
            assert_eq!(
                statuses(&listed).iter().filter(|s| *s == "pending").count(),
                5,
                "round {round}"
            );
            assert_eq!(
                srv.list_ids(key, "status=failed").await,
                [created[3].clone()],
                "round {round}"
            );
            let pending = srv.list_ids(key, "status=pending").await;
            assert!(pending.contains(&reopened), "round {round}");
            srv.restart().await;
        }
    }
);

backend_tests!(cursor_is_bound_to_its_query, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let items: Vec<Value> = (0..6)
        .map(|i| json!({ "title": format!("t{i}"), "tags": ["a"] }))
        .collect();
    srv.create_tasks(key, json!(items)).await;

    let first = page(&srv, key, "limit=2").await;
    let cursor = encode_query(first["next_cursor"].as_str().expect("next_cursor"));
    for other in [
        "status=pending",
        "full=true",
        "tags=a",
        "priority_max=3",
        "assignee=x%40y.z",
    ] {
        let (status, body) = srv
            .get(key, &format!("/tasks?limit=2&{other}&cursor={cursor}"))
            .await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "replayed with {other}: {body}"
        );
        assert_eq!(body["error"], "Invalid pagination cursor");
    }
    let (status, body) = srv.get(key, "/tasks?cursor=garbage").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"], "Invalid pagination cursor");
    // No cursor is empty, as the document says: a first page is asked
    // for without one, never by an empty one.
    let (status, body) = srv.get(key, "/tasks?cursor=").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"], "cursor: must not be empty");

    // Cursors are signed: any edit is detected.
    let raw = first["next_cursor"].as_str().unwrap().to_string();
    for pos in [0, raw.len() / 3, raw.len() / 2] {
        let mut bytes = raw.clone().into_bytes();
        bytes[pos] = if bytes[pos] == b'A' { b'B' } else { b'A' };
        let forged = String::from_utf8(bytes).unwrap();
        let (status, body) = srv
            .get(
                key,
                &format!("/tasks?limit=2&cursor={}", encode_query(&forged)),
            )
            .await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "forged cursor {forged}: {body}"
        );
        assert_eq!(body["error"], "Invalid pagination cursor");
    }

    // A cursor minted by one filter works with that filter.
    let filtered = page(&srv, key, "limit=2&tags=a").await;
    let c = encode_query(filtered["next_cursor"].as_str().unwrap());
    let second = page(&srv, key, &format!("limit=2&tags=a&cursor={c}")).await;
    assert_eq!(second["tasks"].as_array().unwrap().len(), 2);
});

backend_tests!(
    a_cursor_outlives_a_restart_but_not_its_master_key,
    |mut srv| async move {
        let org = srv.create_org("dev").await;
        let items: Vec<Value> = (0..5)
            .map(|i| json!({ "title": format!("t{i}") }))
            .collect();
        srv.create_tasks(&org.owner_key, json!(items)).await;
        let first = page(&srv, &org.owner_key, "limit=2").await;
        let cursor = encode_query(first["next_cursor"].as_str().unwrap());
        let second = page(&srv, &org.owner_key, &format!("limit=2&cursor={cursor}")).await;

        // Its key comes from the master key (and the schema), not from the
        // process: after a restart the same cursor reads the same page, as
        // it does on every node of a cluster.
        srv.restart().await;
        let again = page(&srv, &org.owner_key, &format!("limit=2&cursor={cursor}")).await;
        assert_eq!(again, second);

        // A server under another master key refuses it.
        let other = TestServer::start(srv.backend).await;
        let stranger = other.create_org("dev").await;
        let (status, body) = other
            .get(
                &stranger.owner_key,
                &format!("/tasks?limit=2&cursor={cursor}"),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["error"], "Invalid pagination cursor");
    }
);

backend_tests!(limit_bounds, |srv| async move {
    let org = srv.create_org("dev").await;
    srv.new_task(&org.owner_key, "one").await;
    for bad in ["0", "201", "-1", "many"] {
        let (status, body) = srv
            .get(&org.owner_key, &format!("/tasks?limit={bad}"))
            .await;
        assert_bad_request(status, &body, "limit");
    }
    for good in ["1", "200"] {
        let body = page(&srv, &org.owner_key, &format!("limit={good}")).await;
        assert_eq!(body["tasks"].as_array().unwrap().len(), 1);
    }
    let items: Vec<Value> = (0..25)
        .map(|i| json!({ "title": format!("t{i}") }))
        .collect();
    srv.create_tasks(&org.owner_key, json!(items.clone())).await;
    srv.create_tasks(&org.owner_key, json!(items)).await;
    let body = page(&srv, &org.owner_key, "").await;
    assert_eq!(
        body["tasks"].as_array().unwrap().len(),
        50,
        "default limit is 50"
    );
    assert!(body["next_cursor"].is_string());
});

backend_tests!(filters, |srv| async move {
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    srv.add_member(&org, "gus@example.com", "user").await;
    let parent = srv.new_task(key, "parent").await;
    let results = srv
        .create_tasks(
            key,
            json!([
                { "title": "a", "tags": ["red"], "priority": 1, "assignee": "gus@example.com", "parent_task_id": parent },
                { "title": "b", "tags": ["blue", "green"], "priority": 2, "parent_task_id": parent },
                { "title": "c", "tags": ["green"], "priority": 4, "assignee": org.owner_email },
                { "title": "d", "priority": 5 },
            ]),
        )
        .await;
    let [a, b, c, d] = [0, 1, 2, 3].map(|i| str_field(&results[i], "task_id"));
    srv.update_ok(key, json!({ "task_id": c, "status": "in_progress" }))
        .await;

    let set = |v: Vec<String>| v.into_iter().collect::<HashSet<_>>();
    let want = |v: &[&String]| v.iter().map(|s| s.to_string()).collect::<HashSet<_>>();

    assert_eq!(
        set(srv.list_ids(key, "status=in_progress").await),
        want(&[&c])
    );
    assert_eq!(
        set(srv.list_ids(key, "status=pending").await),
        want(&[&parent, &a, &b, &d])
    );
    assert_eq!(
        set(srv.list_ids(key, "assignee=gus%40example.com").await),
        want(&[&a])
    );
    assert_eq!(
        set(srv.list_ids(key, "tags=red,blue").await),
        want(&[&a, &b])
    );
    assert_eq!(set(srv.list_ids(key, "tags=green").await), want(&[&b, &c]));
    assert_eq!(set(srv.list_ids(key, "tags=purple").await), want(&[]));
    assert_eq!(
        set(srv.list_ids(key, "priority_max=2").await),
        want(&[&a, &b])
    );
    assert_eq!(
        set(srv.list_ids(key, &format!("parent_task_id={parent}")).await),
        want(&[&a, &b])
    );
    assert_eq!(
        set(srv.list_ids(key, "status=pending&priority_max=1").await),
        want(&[&a])
    );
    let (status, body) = srv.get(key, "/tasks?priority_max=abc").await;
    assert_bad_request(status, &body, "priority_max");
});

backend_tests!(
    pages_stay_exact_while_other_items_change,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let items: Vec<Value> = (0..20)
        .map(|i| json!({ "title": format!("t{i}"), "priority": 1 + (i % 5), "assignee": org.owner_email }))
        .collect();
        let original = ids(&srv.create_tasks(key, json!(items)).await);

        let first = page(&srv, key, "limit=5").await;
        let first_ids = ids(first["tasks"].as_array().unwrap());
        let mut cursor = first["next_cursor"].as_str().unwrap().to_string();

        // Between pages: finish an item already seen, add new urgent work, and
        // edit (without reordering) an item not yet seen.
        let changed_seen = first_ids[0].clone();
        srv.update_ok(
            key,
            json!({ "task_id": changed_seen, "status": "completed", "note": "n" }),
        )
        .await;
        srv.create_tasks(key, json!([{ "title": "new urgent", "priority": 1 }, { "title": "new late", "priority": 5 }]))
        .await;
        let unseen = original
            .iter()
            .find(|id| !first_ids.contains(id))
            .unwrap()
            .clone();
        srv.update_ok(key, json!({ "task_id": unseen, "title": "edited" }))
            .await;

        let mut seen = first_ids.clone();
        for _ in 0..20 {
            let body = page(
                &srv,
                key,
                &format!("limit=5&cursor={}", encode_query(&cursor)),
            )
            .await;
            seen.extend(ids(body["tasks"].as_array().unwrap()));
            match body["next_cursor"].as_str() {
                Some(c) => cursor = c.to_string(),
                None => break,
            }
        }
        for id in original
            .iter()
            .filter(|id| **id != changed_seen && **id != unseen)
        {
            let n = seen.iter().filter(|s| *s == id).count();
            assert_eq!(n, 1, "unchanged task {id} seen {n} times");
        }
    }
);
