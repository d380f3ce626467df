//! The MCP front end through the real server: `POST /mcp` speaks JSON-RPC
//! (streamable HTTP, stateless), behind the same key as the API; every
//! operation is a tool whose result is the route's body and whose failure
//! carries the route's error message as text and its whole error body as
//! structured content.

use crate::common::*;
use reqwest::Method;

const PROTOCOL: &str = "2025-11-25";

/// A JSON-RPC request to `/mcp` with `key`; answers status and body.
async fn rpc(
    srv: &TestServer,
    key: Option<&str>,
    method: &str,
    params: Value,
) -> (StatusCode, Value) {
    let mut headers = vec![("accept", "application/json, text/event-stream")];
    // After the handshake a client names the version it agreed to.
    if method != "initialize" {
        headers.push(("mcp-protocol-version", PROTOCOL));
    }
    if let Some(key) = key {
        headers.push(("x-api-key", key));
    }
    let request = json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params });
    let (status, text) = srv
        .raw(Method::POST, "/mcp", &headers, Some(request.to_string()))
        .await;
    let body = serde_json::from_str(&text).unwrap_or_else(|_| json!({ "unparsed": text }));
    (status, body)
}

/// Calls a tool; answers the tool result (`content`, `isError`, ...).
async fn call(srv: &TestServer, key: &str, tool: &str, arguments: Value) -> Value {
    let (status, body) = rpc(
        srv,
        Some(key),
        "tools/call",
        json!({ "name": tool, "arguments": arguments }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{tool}: {body}");
    assert!(body["error"].is_null(), "{tool}: {body}");
    body["result"].clone()
}

/// A tool's successful answer: the route's JSON body.
async fn ok(srv: &TestServer, key: &str, tool: &str, arguments: Value) -> Value {
    let result = call(srv, key, tool, arguments).await;
    assert_eq!(result["isError"], false, "{tool}: {result}");
    let text = str_field(&result["content"][0], "text");
    let body: Value = serde_json::from_str(&text).expect("the text is JSON");
    if body.is_object() {
        assert_eq!(result["structuredContent"], body, "{tool}: {result}");
    }
    body
}

/// A tool's failure: its text, the bare error message.
async fn failed(srv: &TestServer, key: &str, tool: &str, arguments: Value) -> String {
    let structured = failure(srv, key, tool, arguments).await;
    str_field(&structured, "error")
}

/// A tool's failure: its `structuredContent`, the route's whole error body
/// (plus `retry_after` where HTTP sends `Retry-After`); the text beside it
/// is the bare `error` message.
async fn failure(srv: &TestServer, key: &str, tool: &str, arguments: Value) -> Value {
    let result = call(srv, key, tool, arguments).await;
    assert_eq!(result["isError"], true, "{tool}: {result}");
    let text = str_field(&result["content"][0], "text");
    let structured = result["structuredContent"].clone();
    assert_eq!(structured["error"], text.as_str(), "{tool}: {result}");
    structured
}

backend_tests!(mcp_needs_a_key_and_initializes, |srv| async move {
    let org = srv.create_org("dev").await;
    let init = json!({
        "protocolVersion": PROTOCOL,
        "capabilities": {},
        "clientInfo": { "name": "black-box", "version": "1" }
    });
    let (status, body) = rpc(&srv, None, "initialize", init.clone()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body, json!({ "error": "invalid api key" }));
    let (status, body) = rpc(&srv, Some("tq_nope"), "initialize", init.clone()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");

    let (status, body) = rpc(&srv, Some(&org.owner_key), "initialize", init.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let result = &body["result"];
    assert_eq!(result["protocolVersion"], PROTOCOL, "{body}");
    assert_eq!(result["serverInfo"]["name"], "taskq", "{body}");
    assert!(result["capabilities"]["tools"].is_object(), "{body}");

    // Every protocol version with a handshake is agreed to as asked.
    for version in ["2024-11-05", "2025-03-26", "2025-06-18"] {
        let mut asked = init.clone();
        asked["protocolVersion"] = json!(version);
        let (status, body) = rpc(&srv, Some(&org.owner_key), "initialize", asked).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["result"]["protocolVersion"], version, "{body}");
    }
});

backend_tests!(
    tools_list_every_built_operation_with_its_schema,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let (status, body) = rpc(&srv, Some(&org.owner_key), "tools/list", json!({})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let tools = body["result"]["tools"].as_array().expect("tools").clone();
        let mut names: Vec<String> = tools.iter().map(|t| str_field(t, "name")).collect();
        names.sort();
        let mut expected = vec![
            "create_tasks",
            "update_tasks",
            "get_tasks",
            "list_tasks",
            "claim_task",
            "list_tags",
            "create_tags",
            "update_tags",
            "delete_tags",
            "list_members",
            "update_member",
            "get_me",
            "update_me",
            "list_teams",
            "get_team",
            "create_team",
            "update_team",
            "delete_team",
            "add_team_member",
            "remove_team_member",
            "send_feedback",
            "get_quota",
            "search_tasks",
            "get_insights",
            "list_runbooks",
            "get_standup",
            "plan_tasks",
            "get_org_dek",
            "put_org_dek",
            "list_webhooks",
            "create_webhook",
            "delete_webhook",
            "rotate_webhook_secret",
            "list_webhook_deliveries",
            "test_webhook",
            "list_schedules",
            "create_schedule",
            "get_schedule",
            "update_schedule",
            "delete_schedule",
            "wait_for_tasks",
        ];
        expected.sort();
        assert_eq!(names, expected, "features not built yet are not listed");
        for tool in &tools {
            assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
            assert!(
                str_field(tool, "description").len() > 20,
                "a tool says when to use it: {tool}"
            );
        }
        let create = tools.iter().find(|t| t["name"] == "create_tasks").unwrap();
        let schema = &create["inputSchema"];
        assert_eq!(schema["required"], json!(["tasks"]), "{schema}");
        assert_eq!(schema["properties"]["tasks"]["maxItems"], 25, "{schema}");
        let team = tools.iter().find(|t| t["name"] == "update_team").unwrap();
        assert!(
            team["inputSchema"]["properties"]["name"].is_object()
                && team["inputSchema"]["properties"]["idp_only"].is_object(),
            "a path parameter and the body's fields: {team}"
        );
    }
);

backend_tests!(a_claim_work_complete_loop_through_tools, |srv| async move {
    let org = srv.create_org("dev").await;
    let agent = srv.add_member(&org, "agent@example.com", "user").await;
    let key = &org.owner_key;

    let created = ok(
        &srv,
        key,
        "create_tasks",
        json!({ "tasks": [
            { "title": "parent", "ref": "p" },
            { "title": "child", "blocked_by": ["ref:p"], "priority": 1 }
        ]}),
    )
    .await;
    assert_eq!(created["created"], 2, "{created}");
    let parent = str_field(&created["results"][0], "task_id");
    let child = str_field(&created["results"][1], "task_id");

    let claimed = ok(&srv, &agent, "claim_task", json!({ "lease_seconds": 120 })).await;
    assert_eq!(claimed["task_id"], parent.as_str(), "the child is blocked");
    assert_eq!(claimed["status"], "in_progress");
    assert_eq!(claimed["assignee"], "agent@example.com");
    let lease = str_field(&claimed, "lease_id");

    let done = ok(
        &srv,
        &agent,
        "update_tasks",
        json!({ "updates": [{
            "task_id": parent, "lease_id": lease, "status": "completed",
            "note": "done", "output": { "answer": 42 }
        }]}),
    )
    .await;
    assert_eq!(done["updated"], 1, "{done}");

    // The same answers as HTTP: the task and its unblocked dependent.
    let fetched = ok(&srv, key, "get_tasks", json!({ "task_ids": [parent] })).await;
    assert_eq!(fetched["tasks"][0]["output"], json!({ "answer": 42 }));
    assert_eq!(
        fetched,
        srv.post(key, "/tasks/get", json!({ "task_ids": [parent] }))
            .await
            .1
    );
    let next = ok(
        &srv,
        &agent,
        "claim_task",
        json!({ "include_context": true }),
    )
    .await;
    assert_eq!(next["task_id"], child.as_str(), "{next}");
    assert_eq!(
        next["context"]["blockers"][0]["output"],
        json!({ "answer": 42 })
    );

    let listed = ok(&srv, key, "list_tasks", json!({ "status": "completed" })).await;
    assert_eq!(
        ids(listed["tasks"].as_array().unwrap()),
        vec![parent.clone()]
    );

    // An empty queue answers null, as the route does.
    let result = call(&srv, &agent, "claim_task", json!({})).await;
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["content"][0]["text"], "null");
    assert!(result.get("structuredContent").is_none(), "{result}");
});

backend_tests!(tool_failures_carry_the_routes_error, |srv| async move {
    let org = srv.create_org("pro").await;
    let user = srv.add_member(&org, "user@example.com", "user").await;

    // Roles: the same refusal as POST /tags.
    let tags = json!({ "tags": [{ "name": "gpu" }] });
    let structured = failure(&srv, &user, "create_tags", tags.clone()).await;
    let (status, body) = srv.post(&user, "/tags", tags).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(structured, body);

    // A client-minted id that is taken: the body names it, as on the route.
    let task = srv.new_task(&user, "taken").await;
    let again = json!({ "tasks": [{ "task_id": task, "title": "again" }] });
    let structured = failure(&srv, &user, "create_tasks", again.clone()).await;
    let (status, body) = srv.post(&user, "/tasks", again).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(structured, body);
    assert_eq!(
        structured,
        json!({ "error": "task_id already exists", "task_id": task })
    );

    // Bad arguments: the decoder's message, naming the field.
    let bad = json!({ "tasks": [{ "title": "t", "priority": 9 }] });
    let text = failed(&srv, &user, "create_tasks", bad.clone()).await;
    let (status, body) = srv.post(&user, "/tasks", bad).await;
    assert_bad_request(status, &body, "priority");
    assert_eq!(text, str_field(&body, "error"));
    let text = failed(&srv, &user, "get_team", json!({})).await;
    assert!(text.starts_with("name:"), "{text}");
    let text = failed(&srv, &user, "get_me", json!({ "colour": "blue" })).await;
    assert!(text.starts_with("colour:"), "{text}");

    // Not found, as on the route.
    let text = failed(&srv, &user, "get_team", json!({ "name": "nobody" })).await;
    assert_eq!(text, "team 'nobody' not found");

    // An unknown tool is a protocol error, not a tool result.
    let (status, body) = rpc(
        &srv,
        Some(&user),
        "tools/call",
        json!({ "name": "no_such_tool", "arguments": {} }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no_such_tool"));
});

backend_tests!(tools_obey_the_org_limits, |srv| async move {
    let org = srv.create_org("dev").await;
    srv.set_limits(&org, json!({ "writes_per_minute": 2 }))
        .await;
    let key = &org.owner_key;
    ok(
        &srv,
        key,
        "create_tasks",
        json!({ "tasks": [{ "title": "a" }] }),
    )
    .await;
    // A call that does not decode counts too, as over HTTP.
    failed(&srv, key, "claim_task", json!({ "lease_seconds": -1 })).await;
    let mut refused = failure(
        &srv,
        key,
        "create_tasks",
        json!({ "tasks": [{ "title": "b" }] }),
    )
    .await;
    // How long to wait, which HTTP says in `Retry-After`: whole seconds
    // within the bucket's minute.
    let retry_after = refused
        .as_object_mut()
        .and_then(|o| o.remove("retry_after"))
        .and_then(|v| v.as_u64())
        .unwrap_or_else(|| panic!("a rate limit says how long to wait: {refused}"));
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    let (status, body) = srv
        .post(key, "/tasks", json!({ "tasks": [{ "title": "c" }] }))
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "one bucket for both");
    assert_eq!(refused, body, "the route's error body");
    assert_eq!(
        refused,
        json!({ "error": "rate limit exceeded", "limit_type": "write", "limit": 2,
                "window_seconds": 60, "tier": "dev" })
    );
    // Reads have their own bucket.
    let me = ok(&srv, key, "get_me", json!({})).await;
    assert_eq!(me["role"], "owner");

    // A free org hears that teams need an upgrade.
    let free = srv.create_org("free").await;
    let refused = failure(&srv, &free.owner_key, "list_teams", json!({})).await;
    assert!(
        str_field(&refused, "error").contains("paid plan"),
        "{refused}"
    );
    assert_eq!(refused["upgrade"], true, "{refused}");
    assert!(refused.get("retry_after").is_none(), "no wait: {refused}");
});

/// The route of every tool, from the OpenAPI document: its operation id is
/// the tool's name.
/// Answers the method, the path template, whether the route reads a query
/// and whether it reads a body.
async fn route_of(srv: &TestServer, tool: &str) -> (Method, String, bool, bool) {
    let (_, text) = srv.raw(Method::GET, "/openapi.json", &[], None).await;
    let document: Value = serde_json::from_str(&text).expect("the document");
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            if operation["operationId"] == tool {
                let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
                let query = operation["parameters"]
                    .as_array()
                    .is_some_and(|ps| ps.iter().any(|p| p["in"] == "query"));
                let body = operation["requestBody"].is_object();
                return (method, path.clone(), query, body);
            }
        }
    }
    panic!("{tool} is no operation of the document");
}

/// Sends `arguments` to the route of `tool` as HTTP does: path parameters
/// in the path, the rest as the query or the body.
async fn over_http(
    srv: &TestServer,
    key: &str,
    tool: &str,
    arguments: &Value,
) -> (StatusCode, Value) {
    let (method, mut path, query, _) = route_of(srv, tool).await;
    let mut rest = arguments.as_object().cloned().unwrap_or_default();
    for name in ["name", "email"] {
        if let Some(value) = rest
            .get(name)
            .filter(|_| path.contains(&format!("{{{name}}}")))
        {
            path = path.replace(&format!("{{{name}}}"), value.as_str().unwrap());
            rest.remove(name);
        }
    }
    let body = if query {
        let pairs: Vec<String> = rest
            .iter()
            .map(|(k, v)| {
                format!(
                    "{k}={}",
                    encode_query(v.as_str().map_or(&v.to_string(), |s| s))
                )
            })
            .collect();
        if !pairs.is_empty() {
            path = format!("{path}?{}", pairs.join("&"));
        }
        None
    } else if matches!(method, Method::GET | Method::DELETE) {
        None
    } else {
        Some(Value::Object(rest).to_string())
    };
    let (status, text) = srv.raw(method, &path, &[("x-api-key", key)], body).await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

backend_tests!(every_tool_answers_as_its_route, |srv| async move {
    let org = srv.create_org("pro").await;
    let key = &org.owner_key;
    srv.add_member(&org, "member@example.com", "user").await;
    srv.create_tags(key, json!([{ "name": "backend" }])).await;
    srv.create_team(key, json!({ "name": "core", "tags": ["backend"] }))
        .await;
    let task = srv.new_task(key, "parity").await;
    let (_, listed) = rpc(&srv, Some(key), "tools/list", json!({})).await;
    let tools = listed["result"]["tools"].as_array().expect("tools").clone();
    // Arguments every tool accepts: its path parameters, and for reads a
    // valid request that changes nothing.
    let reads: &[(&str, Value)] = &[
        ("get_tasks", json!({ "task_ids": [task] })),
        (
            "wait_for_tasks",
            json!({ "task_ids": [task], "wait_seconds": 0 }),
        ),
        ("list_tasks", json!({ "status": "pending", "limit": 5 })),
        ("list_tags", json!({})),
        ("list_members", json!({})),
        ("get_me", json!({})),
        ("list_teams", json!({})),
        ("get_team", json!({ "name": "core" })),
        ("get_quota", json!({})),
        ("get_insights", json!({})),
        ("list_runbooks", json!({})),
        ("get_standup", json!({ "cadence": "daily" })),
        ("search_tasks", json!({ "query": "parity" })),
        ("list_webhooks", json!({})),
    ];
    for tool in &tools {
        let name = str_field(tool, "name");
        let (_, path, query, body) = route_of(&srv, &name).await;
        // A refused request: an unknown field beside the path parameters.
        let mut refused = json!({ "zzz_unknown": 1 });
        for (param, value) in [
            ("name", "core"),
            ("email", "member@example.com"),
            ("schedule_id", "01a233c9-cb7f-73d6-a5f5-1374e1a05688"),
        ] {
            if path.contains(&format!("{{{param}}}")) {
                refused[param] = json!(value);
            }
        }
        // A route that reads neither body nor query has no input to refuse.
        if query || body {
            let (status, body) = over_http(&srv, key, &name, &refused).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{name}: {body}");
            let text = failed(&srv, key, &name, refused.clone()).await;
            assert_eq!(text, str_field(&body, "error"), "{name}: the same refusal");
        }
        if let Some((_, arguments)) = reads.iter().find(|(t, _)| *t == name) {
            let (status, body) = over_http(&srv, key, &name, arguments).await;
            assert_eq!(status, StatusCode::OK, "{name}: {body}");
            let answer = ok(&srv, key, &name, arguments.clone()).await;
            assert_eq!(answer, body, "{name}: the same answer");
        }
    }
    // Every read was compared.
    for (name, _) in reads {
        assert!(tools.iter().any(|t| t["name"] == *name), "{name} is a tool");
    }
});
