//! Encryption at rest: no plaintext in storage, ciphertext bound to its task
//! and field, client envelopes refused by managed orgs, master key file.

use crate::common::*;

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
            let tables: Vec<(String,)> = sqlx::query_as(
                "SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema()",
            )
            .fetch_all(&mut conn)
            .await
            .expect("list tables");
            assert!(
                tables.iter().any(|(t,)| t == "tasks"),
                "no tasks table: {tables:?}"
            );
            let mut text = String::new();
            for (table,) in tables {
                let row: (Option<String>,) = sqlx::query_as(&format!(
                    "SELECT string_agg(t::text, E'\\n') FROM \"{table}\" t"
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

/// Runs one tampering statement on the server's database and returns the
/// number of rows it changed. `sql` uses `?` placeholders; for PostgreSQL they
/// become `$1, $2, ...` and `task_id` comparisons are made on text.
async fn tamper(srv: &TestServer, sql: &str, binds: &[&str]) -> u64 {
    match srv.backend {
        Backend::Sqlite => srv.execute(sql, binds).await,
        Backend::Postgres => {
            srv.execute(&sql.replace("task_id =", "task_id::text ="), binds)
                .await
        }
    }
}

/// Copies task `from`'s stored `column` over task `to`'s.
async fn copy_stored(srv: &TestServer, column: &str, from: &str, to: &str) {
    let sql = format!(
        "UPDATE tasks SET {column} = (SELECT t2.{column} FROM tasks t2 WHERE t2.task_id = ?) WHERE task_id = ?"
    );
    assert_eq!(
        tamper(srv, &sql, &[from, to]).await,
        1,
        "tamper UPDATE matched no row"
    );
}

async fn copy_stored_title(srv: &TestServer, from: &str, to: &str) {
    copy_stored(srv, "title", from, to).await;
}

fn assert_binding_failure(status: StatusCode, body: &Value, task_id: &str) {
    assert_field_binding_failure(status, body, task_id, "title");
}

fn assert_field_binding_failure(status: StatusCode, body: &Value, task_id: &str, field: &str) {
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert_eq!(body["code"], "ciphertext_binding_failure", "{body}");
    assert_eq!(body["task_id"], task_id, "{body}");
    assert_eq!(body["field"], field, "{body}");
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

backend_tests!(
    every_sealed_field_is_bound_to_its_task_and_field,
    |mut srv| async move {
        let org = srv.create_org("dev").await;
        let key = org.owner_key.clone();
        let full = |n: &str| {
            json!({
                "title": format!("title {n}"),
                "description": format!("description {n}"),
                "metadata": { "who": n },
                "assignee": org.owner_email,
            })
        };
        let mut pairs = Vec::new();
        for n in 0..4 {
            let results = srv
                .create_tasks(
                    &key,
                    json!([full(&format!("a{n}")), full(&format!("b{n}"))]),
                )
                .await;
            let (a, b) = (
                str_field(&results[0], "task_id"),
                str_field(&results[1], "task_id"),
            );
            for id in [&a, &b] {
                srv.update_ok(
                &key,
                json!({ "task_id": id, "status": "completed", "note": format!("note {id}"), "output": { "by": id } }),
            )
            .await;
            }
            pairs.push((a, b));
        }
        let same_row = srv.create_task(&key, full("same-row")).await;

        // Another task's ciphertext, field by field.
        copy_stored(&srv, "description", &pairs[0].1, &pairs[0].0).await;
        copy_stored(&srv, "metadata", &pairs[1].1, &pairs[1].0).await;
        copy_stored(&srv, "output", &pairs[2].1, &pairs[2].0).await;
        let changed = tamper(
        &srv,
        "UPDATE task_events SET note = (SELECT e2.note FROM task_events e2 WHERE e2.task_id = ? AND e2.to_status = 'completed') \
         WHERE task_id = ? AND to_status = 'completed'",
        &[&pairs[3].1, &pairs[3].0],
    )
    .await;
        assert_eq!(changed, 1, "tamper UPDATE matched no event");
        // The same task's ciphertext, moved to another field.
        let changed = tamper(
            &srv,
            "UPDATE tasks SET title = description WHERE task_id = ?",
            &[&same_row],
        )
        .await;
        assert_eq!(changed, 1);

        srv.kill9().await;
        srv.start_again().await;

        let expectations = [
            (&pairs[0].0, "description"),
            (&pairs[1].0, "metadata"),
            (&pairs[2].0, "output"),
            (&pairs[3].0, "note"),
            (&same_row, "title"),
        ];
        for (id, field) in expectations {
            let (status, body) = srv
                .post(&key, "/tasks/get", json!({ "task_ids": [id] }))
                .await;
            assert_field_binding_failure(status, &body, id, field);
            assert!(!body.to_string().contains("description b"), "{body}");
        }
        // The donors are intact.
        for (_, b) in &pairs {
            let task = srv.get_task(&key, b).await;
            assert_eq!(task["output"], json!({ "by": b }));
        }
    }
);

backend_tests!(
    api_key_secrets_are_stored_only_as_hashes,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let name = unique("key-name");
        let (_, secret) = srv.new_key(&org.owner_key, &name).await;
        let member_key = srv.add_member(&org, "hash@example.com", "user").await;
        let stored = stored_bytes(&srv).await;
        assert!(
            contains(&stored, &name),
            "control: key names are stored in clear"
        );
        for key in [&org.owner_key, &secret, &member_key] {
            assert!(
                !contains(&stored, key),
                "an API key secret is stored in clear"
            );
        }
    }
);
