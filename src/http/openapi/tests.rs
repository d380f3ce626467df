//! The document against the table it is built from.

use std::collections::BTreeSet;

use super::*;

fn operations(document: &Value) -> Vec<(String, String, &Value)> {
    let mut out = Vec::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            out.push((method.to_uppercase(), path.clone(), operation));
        }
    }
    out
}

#[test]
fn every_route_is_one_operation_and_nothing_else_is() {
    let routes = crate::http::operations();
    let document = document(&routes);
    let served: BTreeSet<(String, String)> = routes
        .iter()
        .map(|r| (r.method.to_string(), r.path.to_owned()))
        .collect();
    assert_eq!(served.len(), routes.len(), "a route is in the table twice");
    let documented: BTreeSet<(String, String)> = operations(&document)
        .into_iter()
        .map(|(m, p, _)| (m, p))
        .collect();
    assert_eq!(served, documented);
    let ids: BTreeSet<&str> = routes.iter().map(|r| r.id).collect();
    assert_eq!(ids.len(), routes.len(), "operation ids are unique");
    for route in &routes {
        assert!(!route.id.is_empty() && !route.summary.is_empty() && !route.tag.is_empty());
        assert!(
            route.answers.iter().any(|(s, ..)| (200..400).contains(s)),
            "{} {} has a success answer",
            route.method,
            route.path
        );
    }
}

/// The router is built from the table: the only routes registered
/// beside it are `/mcp` (a JSON-RPC transport, described in the
/// document's description) and the test hooks.
#[test]
fn the_router_registers_nothing_outside_the_table() {
    let source = include_str!("../mod.rs");
    let mut calls: Vec<usize> = [".route(", ".route_service(", ".nest("]
        .iter()
        .flat_map(|call| source.match_indices(call).map(|(i, _)| i))
        .collect();
    calls.sort_unstable();
    let registered: Vec<&str> = calls
        .into_iter()
        .map(|i| {
            let rest = &source[i..];
            let start = rest.find('"').map_or(0, |s| s + 1);
            let end = rest[start..].find('"').map_or(start, |e| start + e);
            &rest[start..end]
        })
        .collect();
    assert_eq!(
        registered,
        [
            "/admin/orgs/{org_id}/crash",
            "/admin/test/clock",
            "/admin/test/retention",
            "/admin/test/retention/paced",
            "/admin/test/purge",
            "/admin/test/purge/hold",
            "/admin/test/store",
            "/admin/test/deliveries",
            "/internal/peer",
            "/mcp"
        ],
        "register routes through `operations()` so that the document has them"
    );
    for other in ["admin.rs", "cluster.rs", "metrics.rs", "ui/mod.rs"] {
        let source = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("src/http")
                .join(other),
        )
        .expect("read the handlers");
        assert!(!source.contains(".route("), "{other} registers a route");
    }
}

#[test]
fn every_ref_resolves_and_errors_are_error_bodies() {
    let document = document(&crate::http::operations());
    fn walk(v: &Value, schemas: &Map<String, Value>) {
        match v {
            Value::Object(o) => {
                if let Some(Value::String(r)) = o.get("$ref") {
                    let name = r.strip_prefix(SCHEMAS).expect("refs point at components");
                    assert!(schemas.contains_key(name), "{r} is defined");
                }
                o.values().for_each(|v| walk(v, schemas));
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, schemas)),
            _ => {}
        }
    }
    let schemas = document["components"]["schemas"].as_object().unwrap();
    walk(&document, schemas);
    for (method, path, operation) in operations(&document) {
        for (status, response) in operation["responses"].as_object().unwrap() {
            // The operator page answers its sign-in form as HTML.
            let html = response["content"].get("text/html").is_some();
            if (status.starts_with('4') || status.starts_with('5')) && !html {
                assert_eq!(
                    response["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ErrorBody",
                    "{method} {path} {status}"
                );
            }
        }
    }
}

#[test]
fn security_follows_the_path() {
    let document = document(&crate::http::operations());
    for (method, path, operation) in operations(&document) {
        // The operator page and the board sign in by themselves; the
        // operator's figures take the token or the page's session.
        let page = path.starts_with("/admin/ui") || path.starts_with("/board");
        let expected = if page {
            json!([])
        } else if path == "/admin/stats" {
            json!([{ "OperatorToken": [] }, { "OperatorSession": [] }])
        } else if path.starts_with("/admin/") || path == "/metrics" {
            json!([{ "OperatorToken": [] }])
        } else if path == "/healthz" || path == "/openapi.json" {
            json!([])
        } else {
            json!([{ "ApiKey": [] }])
        };
        assert_eq!(operation["security"], expected, "{method} {path}");
        let has_401 = operation["responses"].get("401").is_some();
        if !page {
            assert_eq!(has_401, expected != json!([]), "{method} {path}");
        }
    }
}

#[test]
fn the_list_query_has_a_parameter_per_field() {
    let document = document(&crate::http::operations());
    let mut generator = SchemaSettings::draft2020_12().into_generator();
    let list =
        super::super::operation::object_schema::<taskq_actors::api::ListTasks>(&mut generator)
            .to_value();
    let fields: BTreeSet<&str> = list["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let parameters = document["paths"]["/tasks"]["get"]["parameters"]
        .as_array()
        .unwrap();
    let names: BTreeSet<&str> = parameters
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, fields);
    for p in parameters {
        assert_eq!(p["in"], "query");
        let schema = p["schema"].to_string();
        assert!(
            !schema.contains("null"),
            "a query value is never null: {schema}"
        );
    }
}

#[test]
fn answers_and_requests_keep_their_own_forms() {
    let document = document(&crate::http::operations());
    let schemas = &document["components"]["schemas"];
    // Left out when there is none: optional in the answer.
    let detail = schemas["TaskDetail"].to_string();
    assert!(
        !schemas["TaskDetail"]["required"]
            .as_array()
            .is_some_and(|r| r.contains(&json!("history"))),
        "{detail}"
    );
    // Defaulted in a request: optional there.
    let claim = &schemas["ClaimRequest"];
    assert!(claim.get("required").is_none(), "{claim}");
    // Optional but never null: no `null` default is advertised.
    let role = &schemas["MemberPatch"]["properties"]["role"];
    assert!(role.get("default").is_none(), "{role}");
    assert_eq!(schemas["MemberPatch"]["minProperties"], 1);
    assert_eq!(document["openapi"], "3.1.0");
}
