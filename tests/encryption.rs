//! Encryption at rest: no plaintext in storage, ciphertext bound to its task
//! and field, client envelopes refused by managed orgs, master key file.

#[macro_use]
mod common;
use common::*;

/// Text renderings of the stored `tasks` and `task_events` rows (PostgreSQL),
/// or the raw bytes of the database files (SQLite).
async fn stored_bytes(srv: &TestServer) -> Vec<u8> {
    match srv.open_db().await {
        Db::Sqlite(mut conn) => {
            // Committed data lives in the main file or in the WAL: read both.
            let _: (i64,) = sqlx::query_as("SELECT count(*) FROM tasks")
                .fetch_one(&mut conn)
                .await
                .expect("the tasks table exists");
            let mut bytes = Vec::new();
            for suffix in ["", "-wal"] {
                let path = format!("{}{suffix}", srv.sqlite_path().display());
                if let Ok(b) = std::fs::read(&path) {
                    bytes.extend(b);
                }
            }
            bytes
        }
        Db::Postgres(mut conn) => {
            let mut text = String::new();
            for table in ["tasks", "task_events"] {
                let row: (Option<String>,) = sqlx::query_as(&format!(
                    "SELECT string_agg(t::text, E'\\n') FROM {table} t"
                ))
                .fetch_one(&mut conn)
                .await
                .unwrap_or_else(|e| panic!("read {table}: {e}"));
                text.push_str(&row.0.unwrap_or_default());
                text.push('\n');
            }
            text.into_bytes()
        }
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// Copies task `from`'s stored title over task `to`'s (both in the tasks table).
async fn copy_stored_title(srv: &TestServer, from: &str, to: &str) {
    let affected = match srv.open_db().await {
        Db::Sqlite(mut conn) => sqlx::query(
            "UPDATE tasks SET title = (SELECT t2.title FROM tasks t2 WHERE t2.task_id = ?) WHERE task_id = ?",
        )
        .bind(from)
        .bind(to)
        .execute(&mut conn)
        .await
        .expect("tamper with sqlite")
        .rows_affected(),
        Db::Postgres(mut conn) => sqlx::query(
            "UPDATE tasks SET title = (SELECT t2.title FROM tasks t2 WHERE t2.task_id::text = $1) WHERE task_id::text = $2",
        )
        .bind(from)
        .bind(to)
        .execute(&mut conn)
        .await
        .expect("tamper with postgres")
        .rows_affected(),
    };
    assert_eq!(affected, 1, "tamper UPDATE matched no row");
}

fn assert_binding_failure(status: StatusCode, body: &Value, task_id: &str) {
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert_eq!(body["code"], "ciphertext_binding_failure", "{body}");
    assert_eq!(body["task_id"], task_id, "{body}");
    assert_eq!(body["field"], "title", "{body}");
    assert!(body["error"].is_string(), "{body}");
}

backend_tests!(
    managed_content_is_not_stored_in_plaintext,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let canaries = [
            unique("title-canary"),
            unique("description-canary"),
            unique("metadata-canary"),
            unique("output-canary"),
            unique("note-canary"),
        ];
        let id = srv
            .create_task(
                &org.owner_key,
                json!({
                    "title": canaries[0],
                    "description": canaries[1],
                    "metadata": { "secret": canaries[2] },
                    "assignee": org.owner_email,
                }),
            )
            .await;
        srv.update_ok(
        &org.owner_key,
        json!({ "task_id": id, "status": "completed", "output": { "secret": canaries[3] }, "note": canaries[4] }),
    )
    .await;
        // The service itself still reads it all back.
        let task = srv.get_task(&org.owner_key, &id).await;
        assert_eq!(task["title"], canaries[0].as_str());
        assert_eq!(task["output"]["secret"], canaries[3].as_str());
        assert_eq!(history(&task)[1]["note"], canaries[4].as_str());

        let stored = stored_bytes(&srv).await;
        assert!(
            contains(&stored, &id),
            "control: the task id is stored in clear"
        );
        for canary in &canaries {
            assert!(
                !contains(&stored, canary),
                "plaintext {canary} found in storage"
            );
        }
    }
);

backend_tests!(swapped_ciphertext_is_never_served, |mut srv| async move {
    let org = srv.create_org("dev").await;
    let title_a = unique("alpha-title");
    let title_b = unique("bravo-title");
    let a = srv.new_task(&org.owner_key, &title_a).await;
    let b = srv.new_task(&org.owner_key, &title_b).await;

    copy_stored_title(&srv, &b, &a).await;

    // A server may still hold the task in memory; it must never serve B's title as A's.
    let (status, body) = srv
        .post(&org.owner_key, "/tasks/get", json!({ "task_ids": [a] }))
        .await;
    assert!(
        !body.to_string().contains(&title_b),
        "served another task's title: {body}"
    );
    if status != StatusCode::OK {
        assert_binding_failure(status, &body, &a);
    } else {
        assert_eq!(body["tasks"][0]["title"], title_a.as_str(), "{body}");
    }

    // After a restart the stored value is all there is.
    srv.kill9().await;
    srv.start_again().await;
    let (status, body) = srv
        .post(&org.owner_key, "/tasks/get", json!({ "task_ids": [a] }))
        .await;
    assert_binding_failure(status, &body, &a);
    assert!(!body.to_string().contains(&title_b), "{body}");

    // Asked together with the intact task, still no partial answer.
    let (status, body) = srv
        .post(&org.owner_key, "/tasks/get", json!({ "task_ids": [b, a] }))
        .await;
    assert_binding_failure(status, &body, &a);
    let (status, body) = srv.get(&org.owner_key, "/tasks").await;
    assert_binding_failure(status, &body, &a);
    assert!(!body.to_string().contains(&title_b), "{body}");

    // The intact task alone is fine, and the failure is not transient.
    assert_eq!(
        srv.get_task(&org.owner_key, &b).await["title"],
        title_b.as_str()
    );
    let (status, body) = srv
        .post(&org.owner_key, "/tasks/get", json!({ "task_ids": [a] }))
        .await;
    assert_binding_failure(status, &body, &a);
});

backend_tests!(
    ciphertext_from_another_org_is_never_served,
    |mut srv| async move {
        let mine = srv.create_org("dev").await;
        let theirs = srv.create_org("dev").await;
        let my_title = unique("mine");
        let their_title = unique("theirs");
        let a = srv.new_task(&mine.owner_key, &my_title).await;
        let b = srv.new_task(&theirs.owner_key, &their_title).await;

        copy_stored_title(&srv, &b, &a).await;
        srv.kill9().await;
        srv.start_again().await;

        let (status, body) = srv
            .post(&mine.owner_key, "/tasks/get", json!({ "task_ids": [a] }))
            .await;
        assert_binding_failure(status, &body, &a);
        assert!(!body.to_string().contains(&their_title), "{body}");
    }
);

backend_tests!(managed_org_refuses_client_envelopes, |srv| async move {
    let org = srv.create_org("dev").await;
    let envelope = json!({ "__service_enc__": { "v": 1, "ct": "AAAA" } });
    for item in [
        json!({ "title": envelope }),
        json!({ "title": "t", "description": envelope }),
        json!({ "title": "t", "metadata": envelope }),
    ] {
        let (status, body) = srv
            .post(
                &org.owner_key,
                "/tasks",
                json!({ "tasks": [{ "title": "fine" }, item] }),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{item}: {body}");
        assert!(body["error"].is_string(), "{body}");
    }
    assert!(
        srv.list_all(&org.owner_key, "").await.is_empty(),
        "a refused create wrote tasks"
    );

    let id = srv.new_task(&org.owner_key, "plain").await;
    for item in [
        json!({ "task_id": id, "output": envelope }),
        json!({ "task_id": id, "metadata": envelope }),
        json!({ "task_id": id, "title": envelope }),
    ] {
        let (status, body) = srv.update(&org.owner_key, json!([item.clone()])).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{item}: {body}");
    }
    let task = srv.get_task(&org.owner_key, &id).await;
    assert_eq!(task["title"], "plain");
    assert!(task["output"].is_null(), "{task}");
    assert_eq!(task["metadata"], json!({}));
});

backend_tests!(byok_org_keeps_client_envelopes_verbatim, |srv| async move {
    let org = srv
        .create_org_with(json!({ "tier": "dev", "encryption": "byok" }))
        .await;
    let title = json!({ "__service_enc__": { "v": 1, "iv": "aXY=", "ct": "dGl0bGU=" } });
    let metadata = json!({ "__service_enc__": { "v": 1, "iv": "aXY=", "ct": "bWV0YQ==" } });
    let output = json!({ "__service_enc__": { "v": 1, "iv": "aXY=", "ct": "b3V0" } });
    let id = srv
        .create_task(
            &org.owner_key,
            json!({ "title": title, "metadata": metadata, "priority": 2 }),
        )
        .await;
    srv.update_ok(&org.owner_key, json!({ "task_id": id, "output": output }))
        .await;

    let task = srv.get_task(&org.owner_key, &id).await;
    assert_eq!(task["title"], title);
    assert_eq!(task["metadata"], metadata);
    assert_eq!(task["output"], output);
    assert_eq!(task["priority"], 2);

    // Plaintext is accepted too (the server cannot tell).
    let plain = srv.new_task(&org.owner_key, "plain words").await;
    assert_eq!(
        srv.get_task(&org.owner_key, &plain).await["title"],
        "plain words"
    );
});

backend_tests!(
    master_key_file_is_private_and_reused,
    |mut srv| async move {
        let org = srv.create_org("dev").await;
        let id = srv.new_task(&org.owner_key, "survives restarts").await;
        let path = srv.dir().join("taskq-data").join("master.key");
        let before = std::fs::read(&path).expect("taskq-data/master.key is created");
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "master key mode {mode:o}");
        }

        srv.restart().await;
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "master key rewritten"
        );
        assert_eq!(
            srv.get_task(&org.owner_key, &id).await["title"],
            "survives restarts"
        );
    }
);
