//! Cross-org isolation on every key-authenticated route.
//!
//! Org A (pro tier) has tasks (with tags, a parent, a blocker, a claim, an
//! output), a tag vocabulary with a strict tag, a team with two members, a
//! second member and extra keys. Org B (also pro) is an ordinary neighbour.
//! With B's owner key every route that takes an id, a name, an email or a
//! key id is called with A's values, and once more with values that exist
//! nowhere. Isolation means:
//!
//! - B's answer for A's value is the answer for an unknown value (same
//!   status, same body once the value itself is blanked out), so B cannot
//!   even learn that A's value exists;
//! - no answer to B carries anything of A's (a title, a description, an
//!   email, a tag, a team, a key) beyond what B itself sent;
//! - A, re-read with A's own keys afterwards, has the same tasks, tags,
//!   team, members and keys, and every one of A's keys still works.

use crate::common::*;
use reqwest::Method;

/// Org A's fixture: its keys, ids and every string B must never see.
struct OrgA {
    org: Org,
    member_email: String,
    member_key: String,
    second_key: String,
    key_ids: Vec<String>,
    task_ids: Vec<String>,
    tags: Vec<String>,
    team: String,
    emails: Vec<String>,
    secrets: Vec<String>,
}

/// Org B: the caller of every probe.
struct OrgB {
    org: Org,
    own_task: String,
    team: String,
}

async fn setup(srv: &TestServer) -> (OrgA, OrgB) {
    let a = srv.create_org("pro").await;
    let u = unique("a");
    let tag = format!("{u}-tag");
    let strict = format!("{u}-strict");
    let team = format!("{u}-team");
    let member_email = format!("{u}-member@a.example");
    srv.create_tags(
        &a.owner_key,
        json!([
            { "name": tag },
            { "name": strict, "strict": true, "description": format!("{u} strict tag") },
        ]),
    )
    .await;
    let member_key = srv.add_member(&a, &member_email, "user").await;
    let (_, second_key) = srv.new_key(&a.owner_key, &format!("{u}-key")).await;
    srv.create_team(
        &a.owner_key,
        json!({ "name": team, "tags": [tag], "description": format!("{u} team") }),
    )
    .await;
    srv.add_to_team(&a.owner_key, &team, &a.owner_email).await;
    srv.add_to_team(&a.owner_key, &team, &member_email).await;

    let results = srv
        .create_tasks(
            &a.owner_key,
            json!([
                {
                    "title": format!("{u} parent title"),
                    "description": format!("{u} description"),
                    "tags": [tag],
                    "metadata": { "m": format!("{u} metadata") },
                    "ref": "parent",
                },
                { "title": format!("{u} child title"), "blocked_by": ["ref:parent"] },
                { "title": format!("{u} claimed title"), "priority": 1, "assignee": member_email },
                { "title": format!("{u} done title"), "assignee": a.owner_email, "tags": [strict] },
            ]),
        )
        .await;
    let mut task_ids = ids(&results);
    let parent = task_ids[0].clone();
    let sub = srv
        .create_task(
            &a.owner_key,
            json!({ "title": format!("{u} subtask title"), "parent_task_id": parent }),
        )
        .await;
    task_ids.push(sub);
    let claimed = srv
        .claim(&member_key, json!({ "include_context": false }))
        .await
        .expect("A's urgent task");
    assert_eq!(claimed["task_id"], task_ids[2].as_str());
    srv.update_ok(
        &a.owner_key,
        json!({ "task_id": task_ids[3], "status": "completed", "note": format!("{u} note"),
                "output": { "o": format!("{u} output") } }),
    )
    .await;

    let mut key_ids = Vec::new();
    for key in [&a.owner_key, &member_key] {
        let (status, body) = srv.get(key, "/keys").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        for k in body["keys"].as_array().unwrap() {
            key_ids.push(str_field(k, "key_id"));
        }
    }
    assert_eq!(key_ids.len(), 3, "owner's two keys and the member's");

    let emails = vec![a.owner_email.clone(), member_email.clone()];
    // Every string of A's that B could recognise.
    let mut secrets: Vec<String> = [
        "parent title",
        "child title",
        "claimed title",
        "done title",
        "subtask title",
        "description",
        "metadata",
        "note",
        "output",
        "strict tag",
        "team",
    ]
    .iter()
    .map(|s| format!("{u} {s}"))
    .collect();
    secrets.extend([
        format!("{u}-key"),
        tag.clone(),
        strict.clone(),
        team.clone(),
        a.org_id.clone(),
    ]);
    secrets.extend(emails.iter().cloned());
    secrets.extend(task_ids.iter().cloned());
    secrets.extend(key_ids.iter().cloned());
    let a = OrgA {
        org: a,
        member_email,
        member_key,
        second_key,
        key_ids,
        task_ids,
        tags: vec![tag, strict],
        team,
        emails,
        secrets,
    };

    let b = srv.create_org("pro").await;
    let own_task = srv.new_task(&b.owner_key, "b's own task").await;
    let team = unique("b-team");
    srv.create_team(&b.owner_key, json!({ "name": team })).await;
    (
        a,
        OrgB {
            org: b,
            own_task,
            team,
        },
    )
}

/// Everything A's keys can read about A, for a before/after comparison.
async fn snapshot(srv: &TestServer, a: &OrgA) -> Value {
    let key = &a.org.owner_key;
    let mut tasks = srv.list_all(key, "full=true").await;
    tasks.sort_by_key(|t| str_field(t, "task_id"));
    let mut histories = Vec::new();
    for id in &a.task_ids {
        histories.push(srv.get_task(key, id).await);
    }
    let mut reads = json!({ "tasks": tasks, "histories": histories });
    for (name, key, path) in [
        ("tags", key, "/tags".to_string()),
        ("teams", key, "/teams".to_string()),
        ("team", key, format!("/teams/{}", a.team)),
        ("members", key, "/members".to_string()),
        ("quota", key, "/quota".to_string()),
        ("owner_keys", key, "/keys".to_string()),
        ("member_keys", &a.member_key, "/keys".to_string()),
        ("owner_me", key, "/me".to_string()),
        ("second_key_me", &a.second_key, "/me".to_string()),
        ("member_me", &a.member_key, "/me".to_string()),
    ] {
        let (status, body) = srv.get(key, &path).await;
        assert_eq!(status, StatusCode::OK, "A reading {path}: {body}");
        reads[name] = body;
    }
    reads
}

/// Asserts that `text`, an answer to B, carries none of A's strings except
/// those B sent itself.
fn assert_no_leak(a: &OrgA, what: &str, text: &str, sent: &[String]) {
    for secret in &a.secrets {
        if sent.iter().any(|s| s.contains(secret.as_str())) {
            continue;
        }
        assert!(
            !text.contains(secret.as_str()),
            "{what}: the answer to org B carries org A's {secret:?}: {text}"
        );
    }
}

/// Calls a route with B's key, once with A's values and once with values
/// that exist nowhere; both answers must be the same (the values blanked
/// out) and leak nothing. Returns the status and body of the first.
async fn same_as_unknown(
    srv: &TestServer,
    a: &OrgA,
    b_key: &str,
    method: Method,
    a_values: &[&str],
    unknown: &[&str],
    request: impl Fn(&[&str]) -> (String, Option<Value>),
) -> (StatusCode, Value) {
    let mut answers = Vec::new();
    for values in [a_values, unknown] {
        let (path, body) = request(values);
        let sent: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        let (status, text) = srv
            .raw(
                method.clone(),
                &path,
                &[("x-api-key", b_key)],
                body.map(|b| b.to_string()),
            )
            .await;
        let mut blanked = text.clone();
        for (i, v) in values.iter().enumerate() {
            blanked = blanked.replace(v, &format!("<value {i}>"));
        }
        answers.push((path, status, text, blanked, sent));
    }
    let (path, status, text, blanked, sent) = &answers[0];
    let (unknown_path, unknown_status, _, unknown_blanked, _) = &answers[1];
    let what = format!("{method} {path}");
    assert_no_leak(a, &what, text, sent);
    assert_eq!(
        (status, blanked),
        (unknown_status, unknown_blanked),
        "{what} answers B differently for A's values than for unknown ones \
         ({method} {unknown_path})"
    );
    let body = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(text).unwrap_or_else(|_| panic!("{what}: non-JSON answer {text}"))
    };
    (*status, body)
}

fn unknown_email() -> String {
    format!("{}@nowhere.example", unique("nobody"))
}

backend_tests!(
    task_routes_never_reach_another_orgs_tasks,
    |srv| async move {
        let (a, b) = setup(&srv).await;
        let before = snapshot(&srv, &a).await;
        let bk = b.org.owner_key.as_str();

        for id in &a.task_ids {
            let other = new_uuid();
            let (status, body) =
                same_as_unknown(&srv, &a, bk, Method::POST, &[id], &[&other], |v| {
                    ("/tasks/get".into(), Some(json!({ "task_ids": [v[0]] })))
                })
                .await;
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(body["count"], 0, "{body}");
            assert_eq!(body["not_found"], json!([id]), "{body}");

            let (status, body) =
                same_as_unknown(&srv, &a, bk, Method::POST, &[id], &[&other], |v| {
                    (
                        "/tasks/update".into(),
                        Some(json!({ "updates": [{
                            "task_id": v[0],
                            "title": "hijacked",
                            "tags": [],
                            "metadata": { "m": "hijacked" },
                            "priority": 5,
                        }] })),
                    )
                })
                .await;
            assert_eq!(status, StatusCode::MULTI_STATUS, "{body}");
            assert_eq!(body["results"][0]["error"], "task not found", "{body}");

            let (status, body) =
                same_as_unknown(&srv, &a, bk, Method::POST, &[id], &[&other], |v| {
                    (
                        "/tasks/update".into(),
                        Some(json!({ "updates": [{
                            "task_id": v[0],
                            "status": "canceled",
                            "note": "hijacked",
                            "assignee": b.org.owner_email,
                        }] })),
                    )
                })
                .await;
            assert_eq!(status, StatusCode::MULTI_STATUS, "{body}");
            assert_eq!(body["results"][0]["error"], "task not found", "{body}");

            // B's own task cannot be made to wait on A's.
            let (status, body) =
                same_as_unknown(&srv, &a, bk, Method::POST, &[id], &[&other], |v| {
                    (
                        "/tasks/update".into(),
                        Some(
                            json!({ "updates": [{ "task_id": b.own_task, "blocked_by": [v[0]] }] }),
                        ),
                    )
                })
                .await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

            let (status, body) =
                same_as_unknown(&srv, &a, bk, Method::GET, &[id], &[&other], |v| {
                    (format!("/tasks?parent_task_id={}", v[0]), None)
                })
                .await;
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(body["tasks"], json!([]), "{body}");

            let (status, body) =
                same_as_unknown(&srv, &a, bk, Method::POST, &[id], &[&other], |v| {
                    (
                        "/tasks".into(),
                        Some(json!({ "tasks": [{ "title": "b child", "parent_task_id": v[0] }] })),
                    )
                })
                .await;
            assert!(status.is_client_error(), "{status}: {body}");

            let (status, body) =
                same_as_unknown(&srv, &a, bk, Method::POST, &[id], &[&other], |v| {
                    (
                        "/tasks".into(),
                        Some(json!({ "tasks": [{ "title": "b blocked", "blocked_by": [v[0]] }] })),
                    )
                })
                .await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        }

        for tag in &a.tags {
            let other = unique("no-tag");
            let (status, body) =
                same_as_unknown(&srv, &a, bk, Method::GET, &[tag], &[&other], |v| {
                    (format!("/tasks?tags={}", v[0]), None)
                })
                .await;
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(body["tasks"], json!([]), "{body}");
            let (status, body) =
                same_as_unknown(&srv, &a, bk, Method::POST, &[tag], &[&other], |v| {
                    (
                        "/tasks/claim".into(),
                        Some(json!({ "tags": [v[0]], "include_context": false })),
                    )
                })
                .await;
            assert_eq!((status, body), (StatusCode::OK, Value::Null));
        }

        for email in &a.emails {
            let other = unknown_email();
            let (status, body) =
                same_as_unknown(&srv, &a, bk, Method::GET, &[email], &[&other], |v| {
                    (format!("/tasks?assignee={}", encode_query(v[0])), None)
                })
                .await;
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(body["tasks"], json!([]), "{body}");
            let (status, body) =
                same_as_unknown(&srv, &a, bk, Method::POST, &[email], &[&other], |v| {
                    (
                        "/tasks".into(),
                        Some(json!({ "tasks": [{ "title": "b's", "assignee": v[0] }] })),
                    )
                })
                .await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        }

        // B's queue holds B's one task; A's pending work is never handed out.
        let claimed = srv
            .claim(bk, json!({}))
            .await
            .expect("B's own pending task");
        assert_eq!(claimed["task_id"], b.own_task.as_str());
        assert_no_leak(&a, "B's claim", &claimed.to_string(), &[]);
        assert!(srv.claim(bk, json!({})).await.is_none());
        let listed = srv.list_all(bk, "full=true").await;
        assert_eq!(ids(&listed), vec![b.own_task.clone()]);
        assert_no_leak(&a, "B's task list", &json!(listed).to_string(), &[]);

        // An id of A's reads as free to B: B may mint it for a task of its
        // own (a 409 would tell B that it exists), and A's task is untouched.
        let taken = &a.task_ids[0];
        let (status, body) = srv
            .post(
                bk,
                "/tasks",
                json!({ "tasks": [{ "task_id": taken, "title": "b's namesake" }] }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["results"][0]["task_id"], taken.as_str(), "{body}");
        let mine = srv.get_task(bk, taken).await;
        assert_eq!(mine["title"], "b's namesake", "{mine}");
        assert_no_leak(
            &a,
            "B's namesake task",
            &mine.to_string(),
            std::slice::from_ref(taken),
        );

        assert_eq!(snapshot(&srv, &a).await, before, "org A changed");
    }
);

backend_tests!(
    tag_member_team_and_key_routes_never_reach_another_org,
    |srv| async move {
        let (a, b) = setup(&srv).await;
        let before = snapshot(&srv, &a).await;
        let bk = b.org.owner_key.as_str();

        // What B reads about its own org holds nothing of A's.
        for path in ["/tags", "/members", "/keys", "/me", "/quota", "/teams"] {
            let (status, text) = srv.raw(Method::GET, path, &[("x-api-key", bk)], None).await;
            assert_eq!(status, StatusCode::OK, "GET {path}: {text}");
            assert_no_leak(&a, &format!("GET {path}"), &text, &[]);
        }
        assert!(srv.list_tags(bk).await.is_empty());
        let members = srv.list_members(bk).await;
        assert_eq!(members.len(), 1, "{members:?}");
        assert_eq!(members[0]["email"], b.org.owner_email.as_str());
        let (_, quota) = srv.get(bk, "/quota").await;
        assert_eq!(quota["used"], 1, "B's quota counts B's one task: {quota}");
        let (_, teams) = srv.get(bk, "/teams").await;
        assert_eq!(teams.as_array().map(Vec::len), Some(1), "{teams}");

        for tag in &a.tags {
            let other = unique("no-tag");
            let (status, body) =
                same_as_unknown(&srv, &a, bk, Method::POST, &[tag], &[&other], |v| {
                    (
                        "/tags/update".into(),
                        Some(json!({ "tags": [{ "name": v[0], "description": "hijacked" }] })),
                    )
                })
                .await;
            assert!(status.is_client_error(), "{status}: {body}");
            let (status, body) =
                same_as_unknown(&srv, &a, bk, Method::POST, &[tag], &[&other], |v| {
                    ("/tags/delete".into(), Some(json!({ "names": [v[0]] })))
                })
                .await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        }

        for email in &a.emails {
            let other = unknown_email();
            for patch in [
                json!({ "role": "admin" }),
                json!({ "role": "user" }),
                json!({ "profile_tags": [] }),
                json!({ "seated": false }),
            ] {
                let (status, body) =
                    same_as_unknown(&srv, &a, bk, Method::PATCH, &[email], &[&other], |v| {
                        (format!("/members/{}", v[0]), Some(patch.clone()))
                    })
                    .await;
                assert!(status.is_client_error(), "{status}: {body}");
            }
            // A's member cannot be put on B's team.
            let (status, body) =
                same_as_unknown(&srv, &a, bk, Method::POST, &[email], &[&other], |v| {
                    (
                        format!("/teams/{}/members", b.team),
                        Some(json!({ "email": v[0] })),
                    )
                })
                .await;
            assert!(status.is_client_error(), "{status}: {body}");
        }

        let team = a.team.as_str();
        let other_team = unique("no-team");
        let (status, body) =
            same_as_unknown(&srv, &a, bk, Method::GET, &[team], &[&other_team], |v| {
                (format!("/teams/{}", v[0]), None)
            })
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        for patch in [
            json!({ "description": "hijacked" }),
            json!({ "tags": [] }),
            json!({ "idp_only": true }),
        ] {
            let (status, body) =
                same_as_unknown(&srv, &a, bk, Method::PATCH, &[team], &[&other_team], |v| {
                    (format!("/teams/{}", v[0]), Some(patch.clone()))
                })
                .await;
            assert!(status.is_client_error(), "{status}: {body}");
        }
        let (status, body) =
            same_as_unknown(&srv, &a, bk, Method::POST, &[team], &[&other_team], |v| {
                (
                    format!("/teams/{}/members", v[0]),
                    Some(json!({ "email": b.org.owner_email })),
                )
            })
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        let other_email = unknown_email();
        let (status, body) = same_as_unknown(
            &srv,
            &a,
            bk,
            Method::DELETE,
            &[team, &a.member_email],
            &[&other_team, &other_email],
            |v| (format!("/teams/{}/members/{}", v[0], v[1]), None),
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        let (status, body) =
            same_as_unknown(&srv, &a, bk, Method::DELETE, &[team], &[&other_team], |v| {
                (format!("/teams/{}", v[0]), None)
            })
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

        for key_id in &a.key_ids {
            let other = new_uuid();
            let (status, body) =
                same_as_unknown(&srv, &a, bk, Method::DELETE, &[key_id], &[&other], |v| {
                    (format!("/keys/{}", v[0]), None)
                })
                .await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        }

        // B's own org still works, and A is unchanged with every key working.
        let (status, _) = srv.get(bk, "/me").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(snapshot(&srv, &a).await, before, "org A changed");
    }
);

/// `tools/call` over `POST /mcp` as the tool's JSON-RPC request.
fn tool_call(tool: &str, arguments: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": { "name": tool, "arguments": arguments },
    })
}

backend_tests!(mcp_tools_never_reach_another_orgs_tasks, |srv| async move {
    let (a, b) = setup(&srv).await;
    let before = snapshot(&srv, &a).await;
    let bk = b.org.owner_key.as_str();
    let headers = [
        ("x-api-key", bk),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    for id in &a.task_ids {
        let other = new_uuid();
        let mut answers = Vec::new();
        for (value, request) in [
            (
                id.as_str(),
                tool_call("get_tasks", json!({ "task_ids": [id] })),
            ),
            (
                other.as_str(),
                tool_call("get_tasks", json!({ "task_ids": [other] })),
            ),
            (
                id.as_str(),
                tool_call(
                    "update_tasks",
                    json!({ "updates": [{ "task_id": id, "title": "hijacked" }] }),
                ),
            ),
            (
                other.as_str(),
                tool_call(
                    "update_tasks",
                    json!({ "updates": [{ "task_id": other, "title": "hijacked" }] }),
                ),
            ),
        ] {
            let (status, text) = srv
                .raw(Method::POST, "/mcp", &headers, Some(request.to_string()))
                .await;
            assert_eq!(status, StatusCode::OK, "{request}: {text}");
            assert_no_leak(&a, "POST /mcp", &text, &[value.to_string()]);
            let body: Value = serde_json::from_str(&text).expect("a JSON-RPC answer");
            assert!(body["result"].is_object(), "{request}: {body}");
            answers.push(text.replace(value, "<id>"));
        }
        assert_eq!(
            answers[0], answers[1],
            "get_tasks of A's id vs an unknown one"
        );
        assert_eq!(
            answers[2], answers[3],
            "update_tasks of A's id vs an unknown one"
        );
        let result: Value = serde_json::from_str(&answers[0]).unwrap();
        let text = str_field(&result["result"]["content"][0], "text");
        let got: Value = serde_json::from_str(&text).expect("the tool's text is JSON");
        assert_eq!(got["count"], 0, "{got}");
        assert_eq!(got["not_found"], json!(["<id>"]), "{got}");
    }
    assert_eq!(snapshot(&srv, &a).await, before, "org A changed");
});
