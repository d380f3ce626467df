//! Data lifecycle (CONTRACT.md §11): an org's retention of finished tasks,
//! set by the operator and carried out by the background sweep, which the
//! test hook `POST /admin/test/retention` runs at once; and an org's
//! deletion, its keys and data key gone at once and its rows removed in
//! the background (`POST /admin/test/purge` runs the removal at once).

use crate::common::*;
use std::time::Duration;

use reqwest::Method;

const DAY: i64 = 86_400;

async fn patch_org(srv: &TestServer, org: &Org, body: Value) -> (StatusCode, Value) {
    srv.admin(
        Method::PATCH,
        &format!("/admin/orgs/{}", org.org_id),
        Some(body),
    )
    .await
}

async fn get_org(srv: &TestServer, org: &Org) -> Value {
    let (status, body) = srv
        .admin(Method::GET, &format!("/admin/orgs/{}", org.org_id), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// Runs the retention sweep and waits for it to finish.
async fn sweep(srv: &TestServer) -> i64 {
    let (status, body) = srv.admin(Method::POST, "/admin/test/retention", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["swept"].as_i64().expect("swept count")
}

/// Rows of `table` whose `column` is `value`, read from the database.
async fn rows(srv: &TestServer, table: &str, column: &str, value: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) FROM {table} WHERE {column} = $1");
    match srv.open_db().await {
        Db::Sqlite(mut c) => sqlx::query_scalar(&sql).bind(value).fetch_one(&mut c).await,
        Db::Postgres(mut c) => sqlx::query_scalar(&sql).bind(value).fetch_one(&mut c).await,
    }
    .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Stores a vector for the task, as the meaning worker would.
async fn insert_vector(srv: &TestServer, org: &Org, task_id: &str) {
    let sql = "INSERT INTO task_vectors (org_id, task_id, model, vector) VALUES ($1, $2, 'm', $3)";
    let vector = vec![0u8; 8];
    let q = sqlx::query(sql)
        .bind(&org.org_id)
        .bind(task_id)
        .bind(vector);
    match srv.open_db().await {
        Db::Sqlite(mut c) => q.execute(&mut c).await.map(|_| ()),
        Db::Postgres(mut c) => sqlx::query(sql)
            .bind(&org.org_id)
            .bind(task_id)
            .bind(vec![0u8; 8])
            .execute(&mut c)
            .await
            .map(|_| ()),
    }
    .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn finish(srv: &TestServer, org: &Org, id: &str, status: &str) {
    srv.update_ok(
        &org.owner_key,
        json!({ "task_id": id, "status": status, "note": format!("{status} by test") }),
    )
    .await;
}

/// Creates a task assigned to the owner (finishing one needs an assignee).
async fn assigned(srv: &TestServer, org: &Org, mut item: Value) -> String {
    item["assignee"] = json!(org.owner_email);
    srv.create_task(&org.owner_key, item).await
}

async fn done(srv: &TestServer, org: &Org, item: Value) -> String {
    let id = assigned(srv, org, item).await;
    finish(srv, org, &id, "completed").await;
    id
}

backend_tests!(retention_is_set_shown_and_cleared, |srv| async move {
    let org = srv.create_org("pro").await;
    assert_eq!(get_org(&srv, &org).await["retention_days"], Value::Null);

    for days in [1, 30, 3650] {
        let (status, body) = patch_org(&srv, &org, json!({ "retention_days": days })).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["retention_days"], days);
        assert_eq!(get_org(&srv, &org).await["retention_days"], days);
    }
    // Another change leaves it as it was.
    let (status, body) = patch_org(&srv, &org, json!({ "seats": 7 })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["retention_days"], 3650);

    for bad in [
        json!(0),
        json!(-1),
        json!(3651),
        json!(1.5),
        json!("30"),
        json!(true),
    ] {
        let (status, body) = patch_org(&srv, &org, json!({ "retention_days": bad })).await;
        assert_bad_request(status, &body, "retention_days");
    }
    assert_eq!(get_org(&srv, &org).await["retention_days"], 3650);

    let (status, body) = patch_org(&srv, &org, json!({ "retention_days": null })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["retention_days"], Value::Null);
    assert_eq!(get_org(&srv, &org).await["retention_days"], Value::Null);
});

backend_tests!(the_org_shows_what_the_store_holds, |srv| async move {
    let org = srv.create_org("pro").await;
    let other = srv.create_org("pro").await;
    let stored = |body: &Value| {
        (
            body["stored"]["tasks"].clone(),
            body["stored"]["events"].clone(),
        )
    };
    assert_eq!(stored(&get_org(&srv, &org).await), (json!(0), json!(0)));

    let (status, body) = patch_org(&srv, &org, json!({ "retention_days": 1 })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for i in 0..3 {
        done(&srv, &org, json!({ "title": format!("old {i}") })).await;
    }
    done(&srv, &other, json!({ "title": "elsewhere" })).await;
    let events = rows(&srv, "task_events", "org_id", &org.org_id).await;
    assert!(events >= 6, "{events} events for three finished tasks");
    let before = get_org(&srv, &org).await;
    assert_eq!(stored(&before), (json!(3), json!(events)), "{before}");

    advance_clock(&srv, 2 * DAY).await;
    let kept = srv.new_task(&org.owner_key, "recent").await;
    assert_eq!(sweep(&srv).await, 3);
    let kept_events = rows(&srv, "task_events", "task_id", &kept).await;
    let after = get_org(&srv, &org).await;
    assert_eq!(stored(&after), (json!(1), json!(kept_events)), "{after}");
    assert_eq!(
        get_org(&srv, &other).await["stored"]["tasks"],
        1,
        "another org's count is its own"
    );
});

backend_tests!(
    the_sweep_removes_exactly_the_eligible_tasks,
    |srv| async move {
        let org = srv.create_org("pro").await;
        let other = srv.create_org("pro").await;
        let key = &org.owner_key;
        let (status, body) = patch_org(&srv, &org, json!({ "retention_days": 1 })).await;
        assert_eq!(status, StatusCode::OK, "{body}");

        // Finished two days before the sweep: these go.
        let old_done = done(&srv, &org, json!({ "title": "old done" })).await;
        let old_canceled = assigned(&srv, &org, json!({ "title": "old canceled" })).await;
        finish(&srv, &org, &old_canceled, "canceled").await;
        let old_failed = assigned(&srv, &org, json!({ "title": "old failed" })).await;
        finish(&srv, &org, &old_failed, "failed").await;
        let old_parent_of_old = done(&srv, &org, json!({ "title": "old parent" })).await;
        let old_child_of_old = done(
            &srv,
            &org,
            json!({ "title": "old child", "parent_task_id": old_parent_of_old }),
        )
        .await;
        // Old, but named by a task that stays: these stay.
        let parent = done(&srv, &org, json!({ "title": "parent of open" })).await;
        let open_child = srv
            .create_task(
                key,
                json!({ "title": "open child", "parent_task_id": parent }),
            )
            .await;
        let blocker = done(&srv, &org, json!({ "title": "blocker" })).await;
        let dependent = srv
            .create_task(
                key,
                json!({ "title": "dependent", "blocked_by": [blocker] }),
            )
            .await;
        let grandparent = done(&srv, &org, json!({ "title": "grandparent" })).await;
        let middle = done(
            &srv,
            &org,
            json!({ "title": "middle", "parent_task_id": grandparent }),
        )
        .await;
        let recent_child = assigned(
            &srv,
            &org,
            json!({ "title": "recent", "parent_task_id": middle }),
        )
        .await;
        let open_old = srv.new_task(key, "never finished").await;
        // Another org keeps everything.
        let elsewhere = done(&srv, &other, json!({ "title": "elsewhere" })).await;
        // A vector of a task that goes.
        insert_vector(&srv, &org, &old_done).await;
        assert!(rows(&srv, "task_events", "task_id", &old_done).await > 0);

        advance_clock(&srv, 2 * DAY).await;
        // Finished after the clock moved: recent, so it stays, and keeps its
        // parent chain.
        finish(&srv, &org, &recent_child, "completed").await;
        let recent_done = done(&srv, &org, json!({ "title": "recent done" })).await;

        assert!(sweep(&srv).await >= 5);

        let gone = [
            &old_done,
            &old_canceled,
            &old_failed,
            &old_parent_of_old,
            &old_child_of_old,
        ];
        let kept = [
            &parent,
            &open_child,
            &blocker,
            &dependent,
            &grandparent,
            &middle,
            &recent_child,
            &open_old,
            &recent_done,
        ];
        let all: Vec<&String> = gone.iter().chain(kept.iter()).copied().collect();
        let (status, body) = srv
            .post(key, "/tasks/get", json!({ "task_ids": all }))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(sorted_strings(&body["not_found"]), {
            let mut g: Vec<String> = gone.iter().map(|s| s.to_string()).collect();
            g.sort();
            g
        });
        assert_eq!(body["count"], kept.len(), "{body}");
        let listed = srv.list_ids(key, "").await;
        for id in gone {
            assert!(!listed.contains(id), "{id} still listed");
            assert_eq!(rows(&srv, "tasks", "task_id", id).await, 0);
            assert_eq!(
                rows(&srv, "task_events", "task_id", id).await,
                0,
                "history of {id}"
            );
            assert_eq!(
                rows(&srv, "task_vectors", "task_id", id).await,
                0,
                "vector of {id}"
            );
        }
        for id in kept {
            assert!(listed.contains(id), "{id} not listed");
            assert!(
                rows(&srv, "task_events", "task_id", id).await > 0,
                "history of {id}"
            );
        }
        assert!(srv.task_exists(&other.owner_key, &elsewhere).await);

        // A second sweep finds nothing more; the org keeps working.
        assert_eq!(sweep(&srv).await, 0);
        let claimed = srv
            .claim(key, json!({}))
            .await
            .expect("a pending task to claim");
        assert!(kept.contains(&&str_field(&claimed, "task_id")), "{claimed}");
    }
);

backend_tests!(
    an_org_without_retention_keeps_everything,
    |srv| async move {
        let org = srv.create_org("pro").await;
        let id = done(&srv, &org, json!({ "title": "kept forever" })).await;
        advance_clock(&srv, 4000 * DAY).await;
        assert_eq!(sweep(&srv).await, 0);
        assert!(srv.task_exists(&org.owner_key, &id).await);
        // Retention set later applies to what is already there.
        let (status, body) = patch_org(&srv, &org, json!({ "retention_days": 3650 })).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(sweep(&srv).await, 1);
        assert!(!srv.task_exists(&org.owner_key, &id).await);
    }
);

backend_tests!(
    a_task_created_during_a_sweep_keeps_the_blocker_it_names,
    |srv| async move {
        let org = srv.create_org("pro").await;
        let key = &org.owner_key;
        patch_org(&srv, &org, json!({ "retention_days": 1 })).await;
        // Enough old finished tasks for the sweep to take many pages.
        let mut old = Vec::new();
        for _ in 0..48 {
            let items: Vec<Value> = (0..25)
                .map(|i| json!({ "title": format!("old {i}"), "assignee": org.owner_email }))
                .collect();
            let created = srv.create_tasks(key, json!(items)).await;
            let updates: Vec<Value> = created
                .iter()
                .map(|c| json!({ "task_id": c["task_id"], "status": "completed", "note": "done" }))
                .collect();
            let (status, body) = srv.update(key, json!(updates)).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            old.extend(created.iter().map(|c| str_field(c, "task_id")));
        }
        old.sort();
        advance_clock(&srv, 2 * DAY).await;

        // While the sweep removes them in id order, new tasks name the
        // latest of them as blockers.
        let sweeping = sweep(&srv);
        let naming = async {
            let mut kept = Vec::new();
            for blocker in old.iter().rev().take(60) {
                let (status, body) = srv
                    .post(
                        key,
                        "/tasks",
                        json!({ "tasks": [{ "title": "after", "blocked_by": [blocker] }] }),
                    )
                    .await;
                if status == StatusCode::CREATED {
                    kept.push((str_field(&body["results"][0], "task_id"), blocker.clone()));
                } else {
                    // Removed before this create came: refused, not dangling.
                    assert!(body.to_string().contains("blocked_by"), "{status} {body}");
                }
            }
            kept
        };
        let (_, kept) = tokio::join!(sweeping, naming);
        sweep(&srv).await;
        assert!(
            !kept.is_empty(),
            "some creates came before their blocker went"
        );
        for (task, blocker) in &kept {
            assert!(srv.task_exists(key, task).await);
            assert!(
                srv.task_exists(key, blocker).await,
                "{task} names {blocker}, which a sweep removed"
            );
        }
    }
);

/// Runs the removal of deleted orgs' rows and waits for it to finish.
async fn purge(srv: &TestServer) {
    let (status, body) = srv.admin(Method::POST, "/admin/test/purge", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Every table of the schema with an `org_id` column, and how many of its
/// rows are the org's.
async fn rows_of_org(srv: &TestServer, org_id: &str) -> Vec<(String, i64)> {
    let tables: Vec<String> = match srv.open_db().await {
        Db::Sqlite(mut c) => sqlx::query_scalar(
            "SELECT m.name FROM sqlite_master m, pragma_table_info(m.name) p \
             WHERE m.type = 'table' AND p.name = 'org_id' ORDER BY m.name",
        )
        .fetch_all(&mut c)
        .await
        .expect("tables"),
        Db::Postgres(mut c) => sqlx::query_scalar(
            "SELECT table_name::text FROM information_schema.columns \
             WHERE column_name = 'org_id' AND table_schema = current_schema() ORDER BY 1",
        )
        .fetch_all(&mut c)
        .await
        .expect("tables"),
    };
    assert!(tables.len() >= 15, "tables with an org column: {tables:?}");
    let mut counts = Vec::new();
    for table in tables {
        let n = rows(srv, &table, "org_id", org_id).await;
        counts.push((table, n));
    }
    counts
}

backend_tests!(
    a_deleted_org_is_shredded_then_removed,
    |backend: Backend| async move {
        let srv = TestServer::builder(backend)
            .env("TASKQ_WEBHOOKS_ALLOW_PRIVATE", "1")
            .start()
            .await;
        let org = srv.create_org("pro").await;
        let other = srv.create_org("pro").await;
        let key = &org.owner_key;
        let member_key = srv.add_member(&org, "agent@example.com", "user").await;
        srv.create_tags(key, json!([{ "name": "ops" }])).await;
        let (status, body) = srv
            .post(key, "/teams", json!({ "name": "crew", "tags": ["ops"] }))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let done_id = done(&srv, &org, json!({ "title": "done", "tags": ["ops"] })).await;
        let open_id = srv.new_task(key, "open").await;
        srv.claim(&member_key, json!({}))
            .await
            .expect("a task to claim");
        let (status, body) = srv
            .post(
                key,
                "/schedules",
                json!({ "name": "nightly", "cron": "0 3 * * *", "timezone": "UTC",
                    "task": { "title": "nightly" } }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let (status, body) = srv
            .post(
                key,
                "/webhooks",
                json!({ "url": "http://127.0.0.1:9/hook", "events": ["*"] }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let kept = srv.new_task(&other.owner_key, "elsewhere").await;
        let before = rows_of_org(&srv, &org.org_id).await;
        for table in [
            "tasks",
            "task_events",
            "members",
            "api_keys",
            "schedules",
            "webhooks",
        ] {
            assert!(
                before.iter().any(|(t, n)| t == table && *n > 0),
                "{table} holds none of the org before: {before:?}"
            );
        }

        let path = format!("/admin/orgs/{}", org.org_id);
        let (status, body) = srv.admin(Method::DELETE, &path, None).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        assert_eq!(body, json!({ "org_id": org.org_id, "deleting": true }));

        // At once: every key refused, the data key gone.
        for k in [key, &member_key] {
            let (status, body) = srv.get(k, "/tasks").await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
            let (status, body) = srv
                .post(k, "/tasks/get", json!({ "task_ids": [done_id, open_id] }))
                .await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        }
        assert_eq!(rows(&srv, "api_keys", "org_id", &org.org_id).await, 0);
        let wraps = srv
            .execute(
                "UPDATE orgs SET name = name WHERE org_id = ? AND wrapped_dek IS NOT NULL",
                &[&org.org_id],
            )
            .await;
        assert_eq!(wraps, 0, "the data key's wrap is still stored");

        purge(&srv).await;
        for (method, p) in [
            (Method::GET, path.clone()),
            (Method::PATCH, path.clone()),
            (Method::DELETE, path.clone()),
        ] {
            let body = (method == Method::PATCH).then(|| json!({ "seats": 3 }));
            let (status, answer) = srv.admin(method.clone(), &p, body).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{method} {p}: {answer}");
        }
        let (status, body) = srv
            .admin(
                Method::POST,
                &format!("{path}/members"),
                Some(json!({ "email": "late@example.com", "role": "user" })),
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        let left: Vec<_> = rows_of_org(&srv, &org.org_id)
            .await
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect();
        assert!(left.is_empty(), "rows of the deleted org remain: {left:?}");

        // The other org is untouched.
        assert!(srv.task_exists(&other.owner_key, &kept).await);
        assert!(rows(&srv, "orgs", "org_id", &other.org_id).await == 1);
    }
);

/// Holds the removals of deleted orgs' rows after `steps` more steps, or
/// (`None`) lets them run.
async fn hold_removals(srv: &TestServer, steps: Option<u64>) {
    let (status, body) = srv
        .admin(
            Method::POST,
            "/admin/test/purge/hold",
            Some(json!({ "steps": steps })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// The org's tasks and events as the database holds them.
async fn remaining(srv: &TestServer, org_id: &str) -> Value {
    json!({
        "tasks": rows(srv, "tasks", "org_id", org_id).await,
        "events": rows(srv, "task_events", "org_id", org_id).await,
    })
}

/// Every route under `/admin/orgs/{org_id}` but GET and DELETE, with a
/// body it takes, so that only the org's state decides its answer; the
/// test hook that crashes an org's actor is one of them.
fn other_org_routes(org: &Org) -> Vec<(Method, &'static str, String, Option<Value>)> {
    let path = format!("/admin/orgs/{}", org.org_id);
    let email = &org.owner_email;
    vec![
        (
            Method::PATCH,
            "/admin/orgs/{org_id}",
            path.clone(),
            Some(json!({ "seats": 3 })),
        ),
        (
            Method::GET,
            "/admin/orgs/{org_id}/export",
            format!("{path}/export"),
            None,
        ),
        (
            Method::POST,
            "/admin/orgs/{org_id}/members",
            format!("{path}/members"),
            Some(json!({ "email": "late@example.com", "role": "user" })),
        ),
        (
            Method::POST,
            "/admin/orgs/{org_id}/members/{email}/keys",
            format!("{path}/members/{email}/keys"),
            Some(json!({})),
        ),
        (
            Method::POST,
            "/admin/orgs/{org_id}/idp",
            format!("{path}/idp"),
            Some(json!({ "enrolled": true })),
        ),
        (
            Method::POST,
            "/admin/orgs/{org_id}/idp/sync",
            format!("{path}/idp/sync"),
            Some(json!({ "teams": {} })),
        ),
        (
            Method::POST,
            "/admin/orgs/{org_id}/recompute",
            format!("{path}/recompute"),
            Some(json!({ "reports": ["insights"] })),
        ),
        (
            Method::POST,
            "/admin/orgs/{org_id}/crash",
            format!("{path}/crash"),
            None,
        ),
    ]
}

/// The routes of the OpenAPI document under `/admin/orgs/{org_id}`, as
/// `METHOD path`.
async fn documented_org_routes(srv: &TestServer) -> Vec<String> {
    let (status, text) = srv.raw(Method::GET, "/openapi.json", &[], None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let document: Value = serde_json::from_str(&text).expect("the document");
    let mut routes: Vec<String> = document["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .filter(|(path, _)| path.starts_with("/admin/orgs/{org_id}"))
        .flat_map(|(path, item)| {
            item.as_object()
                .expect("a path item")
                .keys()
                .map(move |method| format!("{} {path}", method.to_uppercase()))
        })
        .collect();
    routes.sort();
    routes
}

backend_tests!(
    a_deleted_org_answers_while_its_rows_are_removed_and_is_gone_after,
    |backend: Backend| async move {
        let srv = TestServer::builder(backend)
            .env("TASKQ_WEBHOOKS_ALLOW_PRIVATE", "1")
            .start()
            .await;
        let org = srv.create_org("pro").await;
        let other = srv.create_org("pro").await;
        let key = &org.owner_key;
        let path = format!("/admin/orgs/{}", org.org_id);

        // The routes this test calls are every route the document has
        // under the org's path (the crash hook is not in the document).
        let mut listed: Vec<String> = other_org_routes(&org)
            .iter()
            .filter(|(_, template, _, _)| !template.ends_with("/crash"))
            .map(|(method, template, _, _)| format!("{method} {template}"))
            .chain([
                "GET /admin/orgs/{org_id}".into(),
                "DELETE /admin/orgs/{org_id}".into(),
            ])
            .collect();
        listed.sort();
        assert_eq!(listed, documented_org_routes(&srv).await);

        // More tasks than a step of the removal takes from a table (1,000).
        srv.create_many(key, 1100).await;
        srv.add_member(&org, "agent@example.com", "user").await;
        srv.create_tags(key, json!([{ "name": "ops" }])).await;
        let (status, body) = srv
            .post(
                key,
                "/schedules",
                json!({ "name": "nightly", "cron": "0 3 * * *", "timezone": "UTC",
                    "task": { "title": "nightly" } }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let (status, body) = srv
            .post(
                key,
                "/webhooks",
                json!({ "url": "http://127.0.0.1:9/hook", "events": ["*"] }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let kept = srv.new_task(&other.owner_key, "elsewhere").await;

        hold_removals(&srv, Some(0)).await;
        let (status, body) = srv.admin(Method::DELETE, &path, None).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        assert_eq!(body, json!({ "org_id": org.org_id, "deleting": true }));

        // Held before its first step: everything is left.
        let (status, body) = srv.admin(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let before = remaining(&srv, &org.org_id).await;
        assert_eq!(before["tasks"], 1100, "{before}");
        assert_eq!(
            body,
            json!({ "org_id": org.org_id, "deleting": true, "remaining": before })
        );

        // One step: the counts fall with the rows.
        hold_removals(&srv, Some(1)).await;
        let body = eventually(Duration::from_secs(30), "a step of the removal", || async {
            let (status, body) = srv.admin(Method::GET, &path, None).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            (body["remaining"] != before).then_some(body)
        })
        .await;
        let left = remaining(&srv, &org.org_id).await;
        assert_eq!(
            body,
            json!({ "org_id": org.org_id, "deleting": true, "remaining": left })
        );
        let tasks_left = left["tasks"].as_i64().expect("a count");
        assert!((1..1100).contains(&tasks_left), "{left}");

        let (status, body) = srv.admin(Method::DELETE, &path, None).await;
        assert_eq!(status, StatusCode::ACCEPTED, "a repeated delete: {body}");
        assert_eq!(body, json!({ "org_id": org.org_id, "deleting": true }));
        for (method, _, route, request) in other_org_routes(&org) {
            let (status, body) = srv.admin(method.clone(), &route, request).await;
            assert_eq!(status, StatusCode::CONFLICT, "{method} {route}: {body}");
            assert_eq!(
                body,
                json!({ "error": "organization is being deleted" }),
                "{method} {route}"
            );
        }
        assert_eq!(
            remaining(&srv, &org.org_id).await,
            left,
            "refused calls changed nothing"
        );

        // Let it run: at the first 404 nothing of the org is left.
        hold_removals(&srv, None).await;
        eventually(Duration::from_secs(60), "the removal's end", || async {
            let (status, body) = srv.admin(Method::GET, &path, None).await;
            match status {
                StatusCode::NOT_FOUND => Some(()),
                StatusCode::OK => {
                    assert_eq!(body["deleting"], true, "{body}");
                    None
                }
                _ => panic!("GET {path} while the removal runs: {status} {body}"),
            }
        })
        .await;
        let held: Vec<_> = rows_of_org(&srv, &org.org_id)
            .await
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect();
        assert!(
            held.is_empty(),
            "rows of the deleted org at its first 404: {held:?}"
        );
        for (method, _, route, request) in
            other_org_routes(&org)
                .into_iter()
                .chain([(Method::DELETE, "", path.clone(), None)])
        {
            let (status, body) = srv.admin(method.clone(), &route, request).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{method} {route}: {body}");
        }

        // Its id cannot be given to a new org.
        let (status, body) = srv
            .admin(
                Method::POST,
                "/admin/orgs",
                Some(json!({ "org_id": org.org_id, "name": "again", "owner_email": "again@example.com" })),
            )
            .await;
        assert_bad_request(status, &body, "org_id");
        let (status, body) = srv.admin(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

        assert!(srv.task_exists(&other.owner_key, &kept).await);
    }
);

/// `GET /admin/orgs/{id}/export`: the content type and the parsed lines.
async fn export(srv: &TestServer, org_id: &str) -> Vec<Value> {
    export_text(srv, org_id)
        .await
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// The export's body as sent.
async fn export_text(srv: &TestServer, org_id: &str) -> String {
    let resp = reqwest::Client::new()
        .get(format!("{}/admin/orgs/{org_id}/export", srv.base_url))
        .bearer_auth(&srv.admin_token)
        .send()
        .await
        .expect("export");
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/x-ndjson"
    );
    let text = resp.text().await.expect("export body");
    assert!(text.ends_with('\n'), "{text}");
    text
}

/// A list answer's items, whether it is the array or holds it.
fn listed(answer: &Value, field: &str) -> Value {
    if answer.is_array() {
        answer.clone()
    } else {
        answer[field].clone()
    }
}

/// The records of one kind, without their `kind`.
fn of_kind(lines: &[Value], kind: &str) -> Vec<Value> {
    lines
        .iter()
        .filter(|l| l["kind"] == kind)
        .map(|l| {
            let mut l = l.clone();
            l.as_object_mut().unwrap().remove("kind");
            l
        })
        .collect()
}

backend_tests!(
    an_export_holds_every_record_as_the_api_shows_it,
    |backend: Backend| async move {
        let srv = TestServer::builder(backend)
            .env("TASKQ_WEBHOOKS_ALLOW_PRIVATE", "1")
            .start()
            .await;
        let org = srv.create_org("pro").await;
        let other = srv.create_org("pro").await;
        let key = &org.owner_key;
        srv.add_member(&org, "agent@example.com", "user").await;
        srv.create_tags(key, json!([{ "name": "ops" }, { "name": "web" }]))
            .await;
        let (status, body) = srv
            .post(key, "/teams", json!({ "name": "crew", "tags": ["ops"] }))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        srv.add_to_team(key, "crew", "agent@example.com").await;
        let (status, schedule) = srv
            .post(
                key,
                "/schedules",
                json!({ "name": "nightly", "cron": "0 3 * * *", "timezone": "UTC",
                    "task": { "title": "nightly", "description": "secret plan" } }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{schedule}");
        let (status, webhook) = srv
            .post(
                key,
                "/webhooks",
                json!({ "url": "http://127.0.0.1:9/hook", "events": ["*"] }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{webhook}");
        let done_id = done(
            &srv,
            &org,
            json!({ "title": "finished", "description": "the body", "tags": ["ops"],
                "metadata": { "k": 1 } }),
        )
        .await;
        let blocked = srv
            .create_task(key, json!({ "title": "after", "blocked_by": [done_id] }))
            .await;
        let mut ids = vec![done_id.clone(), blocked.clone()];
        for i in 0..250 {
            ids.push(srv.new_task(key, &format!("bulk {i}")).await);
        }
        srv.new_task(&other.owner_key, "not exported").await;

        let lines = export(&srv, &org.org_id).await;
        let kinds: Vec<&str> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
        let order = [
            "org", "tag", "team", "member", "schedule", "webhook", "task",
        ];
        let ranks: Vec<usize> = kinds
            .iter()
            .map(|k| order.iter().position(|o| o == k).expect("a known kind"))
            .collect();
        assert!(
            ranks.windows(2).all(|w| w[0] <= w[1]),
            "kinds out of order: {kinds:?}"
        );
        assert_eq!(kinds[0], "org");

        let (_, mut org_view) = srv
            .admin(Method::GET, &format!("/admin/orgs/{}", org.org_id), None)
            .await;
        // The export is the org's record; what the store holds is counted
        // beside it, not part of it.
        let stored = org_view.as_object_mut().and_then(|o| o.remove("stored"));
        assert!(stored.is_some(), "{org_view}");
        assert_eq!(of_kind(&lines, "org"), vec![org_view]);
        assert_eq!(of_kind(&lines, "tag"), srv.list_tags(key).await);
        let (_, teams) = srv.get(key, "/teams").await;
        assert_eq!(
            Value::Array(of_kind(&lines, "team")),
            listed(&teams, "teams")
        );
        let mut members = srv.list_members(key).await;
        let mut exported = of_kind(&lines, "member");
        let email = |v: &Value| str_field(v, "email");
        members.sort_by_key(email);
        exported.sort_by_key(email);
        assert_eq!(exported, members);
        let (_, schedules) = srv.get(key, "/schedules").await;
        assert_eq!(
            Value::Array(of_kind(&lines, "schedule")),
            listed(&schedules, "schedules")
        );
        let (_, webhooks) = srv.get(key, "/webhooks").await;
        assert_eq!(
            Value::Array(of_kind(&lines, "webhook")),
            listed(&webhooks, "webhooks")
        );
        let secret = str_field(&webhook, "secret");
        let text = lines.iter().map(|l| l.to_string()).collect::<String>();
        assert!(!text.contains(&secret), "a webhook secret is exported");
        assert!(!text.contains("api_key") && !text.contains("secret_hash"));

        let tasks = of_kind(&lines, "task");
        let mut exported_ids: Vec<String> = tasks.iter().map(|t| str_field(t, "task_id")).collect();
        exported_ids.sort();
        ids.sort();
        assert_eq!(exported_ids, ids);
        for id in [&done_id, &blocked] {
            let task = tasks.iter().find(|t| t["task_id"] == **id).unwrap();
            assert_eq!(task, &srv.get_task(key, id).await);
            assert!(!history(task).is_empty());
        }
        assert_eq!(
            tasks.iter().find(|t| t["task_id"] == *done_id).unwrap()["description"],
            "the body"
        );

        let (status, body) = srv
            .admin(
                Method::GET,
                &format!("/admin/orgs/{}/export", new_uuid()),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    }
);

backend_tests!(
    a_byok_export_holds_the_envelopes_as_stored,
    |srv| async move {
        let org = srv
            .create_org_with(json!({ "tier": "dev", "encryption": "byok" }))
            .await;
        // Keys deliberately out of alphabetical order: a re-sorted copy is caught.
        let envelope = r#"{"__service_enc__":{"v":1,"kid":"k-7","iv":"aXY=","ct":"dGl0bGU=","alg":"A256GCM"}}"#;
        let (status, body) = srv
            .post_raw(
                &org.owner_key,
                "/tasks",
                &format!(r#"{{"tasks":[{{"title":{envelope}}}]}}"#),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let text = export_text(&srv, &org.org_id).await;
        let task_line = text
            .lines()
            .find(|l| l.starts_with(r#"{"kind":"task""#))
            .unwrap_or_else(|| panic!("no task in {text}"));
        assert!(
            task_line.contains(&format!(r#""title":{envelope}"#)),
            "{task_line}"
        );
    }
);

/// SQLite only: PostgreSQL's backup is `pg_dump`'s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_under_writes_holds_every_earlier_write() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let mut srv = TestServer::start(Backend::Sqlite).await;
    let org = srv.create_org("pro").await;
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acked, stop) = (acked.clone(), stop.clone());
        let (url, key) = (format!("{}/tasks", srv.base_url), org.owner_key.clone());
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let resp = http
                    .post(&url)
                    .header("x-api-key", &key)
                    .json(&json!({ "tasks": [{ "title": format!("write {i}") }] }))
                    .send()
                    .await
                    .expect("create");
                assert_eq!(resp.status(), StatusCode::CREATED);
                let body: Value = resp.json().await.expect("json");
                acked
                    .lock()
                    .unwrap()
                    .push(str_field(&body["results"][0], "task_id"));
            }
        })
    };
    eventually(Duration::from_secs(30), "writes acknowledged", || {
        let n = acked.lock().unwrap().len();
        async move { (n >= 50).then_some(()) }
    })
    .await;
    let before: Vec<String> = acked.lock().unwrap().clone();
    let copy = srv.dir().join("copy.db");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_taskq"))
        .args(["backup", "--to"])
        .arg(&copy)
        .env(
            "TASKQ_DATABASE_URL",
            format!("sqlite://{}", srv.sqlite_path().display()),
        )
        .output()
        .await
        .expect("taskq backup");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The server kept serving: writes went on during the copy.
    let during = acked.lock().unwrap().len();
    eventually(Duration::from_secs(30), "writes after the backup", || {
        let n = acked.lock().unwrap().len();
        async move { (n > during).then_some(()) }
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    writer.await.expect("writer");
    // A second backup into the same file is refused.
    let again = tokio::process::Command::new(env!("CARGO_BIN_EXE_taskq"))
        .args(["backup", "--to"])
        .arg(&copy)
        .env(
            "TASKQ_DATABASE_URL",
            format!("sqlite://{}", srv.sqlite_path().display()),
        )
        .output()
        .await
        .expect("taskq backup");
    assert!(!again.status.success());

    // A server on the copy (same master key) holds every earlier write.
    srv.stop().await;
    let db = srv.sqlite_path();
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    std::fs::rename(&copy, &db).expect("the copy in place");
    srv.start_again().await;
    for chunk in before.chunks(25) {
        let (status, body) = srv
            .post(&org.owner_key, "/tasks/get", json!({ "task_ids": chunk }))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["not_found"], json!([]), "{body}");
    }
}

backend_tests!(
    a_removal_cut_short_by_a_restart_resumes,
    |mut srv| async move {
        let org = srv.create_org("pro").await;
        let leased = assigned(&srv, &org, json!({ "title": "leased" })).await;
        srv.claim(&org.owner_key, json!({}))
            .await
            .expect("the task to claim");
        srv.stop().await;
        // As if the server stopped right after the shredding commit, its org
        // holding a lease.
        srv.execute(
            "UPDATE orgs SET deleted_at = 1, wrapped_dek = NULL WHERE org_id = ?",
            &[&org.org_id],
        )
        .await;
        srv.execute("DELETE FROM api_keys WHERE org_id = ?", &[&org.org_id])
            .await;
        srv.start_again().await;
        let path = format!("/admin/orgs/{}", org.org_id);
        let (status, body) = srv.admin(Method::DELETE, &path, None).await;
        assert_eq!(
            status,
            StatusCode::ACCEPTED,
            "a second delete while it runs: {body}"
        );
        purge(&srv).await;
        assert_eq!(rows(&srv, "tasks", "task_id", &leased).await, 0);
        let (status, body) = srv.admin(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    }
);
