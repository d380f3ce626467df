//! The OpenAPI 3.1 document, built once from the router's own route table.
//!
//! Each [`Route`] pairs a handler with what the document says of it: its
//! operation id, summary and tag, who may call it, the request type it
//! decodes (a JSON body or the query string) and the answer type of each
//! status. The router registers exactly the routes of that table, so a
//! route cannot be served without being documented, nor documented without
//! being served. Schemas come from the `api` types through schemars (JSON
//! Schema 2020-12, the dialect of OpenAPI 3.1): requests as they are read,
//! answers as they are written; their definitions go to
//! `components/schemas`. Nothing here is a hand-written schema of a type.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use axum::http::header;
use axum::response::IntoResponse;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{json, Map, Value};
use taskq_actors::ErrorBody;

use super::operation::{Access, Answer, Input, Operation};

/// Every error status the route can answer: those of its access (a bad
/// key, a suspended org, a limit, an overload or outage), of its input
/// (a malformed body, query or path; a body too large), and its own.
fn error_statuses(route: &Operation) -> BTreeSet<u16> {
    let mut statuses: BTreeSet<u16> = route.errors.iter().copied().collect();
    match route.access {
        // A board page without a session is the sign-in form, not an error.
        Access::Public | Access::BoardSession => {}
        Access::Member(..) => statuses.extend([401, 403, 429, 503]),
        // The operator routes are all 404 when no token is configured.
        // 429: too many wrong tokens from the caller's address.
        Access::Operator | Access::OperatorOrSession => statuses.extend([401, 404, 429, 503]),
    }
    let has_path = route.path_params().next().is_some();
    match route.input() {
        Input::Body(..) | Input::Form(_) => statuses.extend([400, 413]),
        Input::Query(_) => {
            statuses.insert(400);
        }
        Input::None if has_path => {
            statuses.insert(400);
        }
        Input::None => {}
    }
    if has_path {
        statuses.insert(404);
    }
    // A status the route documents as an answer of its own (a page, for
    // the board's refusals) is that answer, not the JSON error.
    statuses.retain(|s| !route.answers.iter().any(|(answer, ..)| answer == s));
    statuses
}

/// A tool's input schema: the request's own (the one requests are checked
/// against), with the operation's path parameters as properties.
pub(super) fn tool_schema<T: JsonSchema>() -> Value {
    taskq_actors::api::request_schema::<T>()
}

/// `schema` with the path parameters `names` as required string
/// properties, ready for `tools/list`.
pub(super) fn with_path_params(schema: fn() -> Value, names: Vec<&'static str>) -> Value {
    let mut schema = schema();
    drop_null_defaults(&mut schema);
    if let Some(object) = schema.as_object_mut() {
        // Clients read the properties; the generator's bookkeeping stays out.
        object.remove("$schema");
        object.remove("title");
        let properties = object.entry("properties").or_insert_with(|| json!({}));
        for name in &names {
            properties[*name] = json!({
                "type": "string",
                "minLength": 1,
                "description": path_param_description(name),
            });
        }
        if !names.is_empty() {
            let required = object.entry("required").or_insert_with(|| json!([]));
            if let Some(list) = required.as_array_mut() {
                list.extend(names.iter().map(|n| json!(n)));
            }
        }
    }
    schema
}

/// The `Retry-After` header of an answer that asks the client to wait.
fn document_retry_after(status: u16, response: &mut Value) {
    if matches!(status, 429 | 503) {
        response["headers"] = json!({
            "Retry-After": {
                "description": "Seconds to wait before retrying",
                "schema": { "type": "integer", "minimum": 0 },
            }
        });
    }
}

/// What each error status means, for the document.
fn error_description(status: u16) -> &'static str {
    match status {
        400 => "Malformed JSON, a body or query of the wrong shape, or a bad path parameter; `error` names the field",
        401 => "Missing, unknown or revoked key (or operator token)",
        403 => "Not allowed: the caller's role, a suspended org, a blocked member, or a feature outside the plan (`upgrade: true`)",
        404 => "No such resource (or, for operator routes, no operator token configured)",
        409 => "Conflicts with the current state (an existing name or id, a rule of the org's state, an org being deleted)",
        413 => "The request body is over 2 MiB; the connection is closed",
        429 => "A rate, monthly or tier limit refused the request (per-minute limits send `Retry-After`), or, on operator routes, too many wrong operator tokens came from the caller's address (with `Retry-After`)",
        500 => "A stored value failed its integrity check (`code: ciphertext_binding_failure`)",
        502 => "The planner's model gave no usable plan; the call still counts (`plan_calls_remaining`)",
        503 => "Overloaded, restarting, a dependency or the store unavailable; retry after `Retry-After` seconds",
        _ => "Error",
    }
}

fn path_param_description(name: &str) -> &'static str {
    match name {
        "org_id" => "The org's id (a UUID)",
        "email" => "A member's email",
        "name" => "A team's name",
        "key_id" => "The key's id",
        _ => "A path parameter",
    }
}

/// The document, built and serialized once.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| document(&super::operations()).to_string());

/// `GET /openapi.json`.
pub async fn serve() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
}

/// Builds the OpenAPI document of `routes`.
pub fn document(routes: &[Operation]) -> Value {
    // Requests are described as they are read, answers as they are
    // written (a field left out when empty is not required in an answer).
    let mut requests = generator(SchemaSettings::draft2020_12().for_deserialize());
    let mut answers = generator(SchemaSettings::draft2020_12().for_serialize());
    let mut paths = Map::new();
    for route in routes {
        let operation = operation(route, &mut requests, &mut answers);
        let item = paths
            .entry(route.path)
            .or_insert_with(|| Value::Object(Map::new()));
        item[route.method.as_str().to_lowercase()] = operation;
    }
    let mut webhooks = receivers(&mut answers);
    let mut schemas = requests.take_definitions(true);
    let answer_schemas = answers.take_definitions(true);
    let renamed = merge_definitions(&mut schemas, answer_schemas);
    let mut schemas = Value::Object(schemas);
    drop_null_defaults(&mut schemas);
    let mut document = json!({
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "taskq",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "A task-queue service for fleets of AI agents and the people who work beside them. Members authenticate with `X-Api-Key`; the operator API (`/admin/*`, `/metrics`) with `Authorization: Bearer <operator token>`. Every error is JSON with an `error` string (`ErrorBody`). `POST /mcp` speaks the Model Context Protocol (streamable HTTP, JSON-RPC 2.0) with the same key and is not described here: its tools are listed by the protocol itself.",
        },
        "paths": paths,
        "webhooks": Value::Null,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "ApiKey": { "type": "apiKey", "in": "header", "name": "X-Api-Key" },
                "OperatorToken": { "type": "http", "scheme": "bearer" },
                "OperatorSession": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": "taskq_operator",
                    "description": "The operator page's session, set by `POST /admin/ui/login`",
                },
            },
        },
    });
    // Answers were generated with the answers' names: point them at the
    // renamed definitions (requests keep theirs).
    for item in document["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|p| p.values_mut())
    {
        for operation in item
            .as_object_mut()
            .into_iter()
            .flat_map(|o| o.values_mut())
        {
            rename_refs(&mut operation["responses"], &renamed);
        }
    }
    rename_refs(&mut webhooks, &renamed);
    document["webhooks"] = webhooks;
    document
}

/// What an endpoint receives (CONTRACT §7), as OpenAPI 3.1 `webhooks`: the
/// body's schema is the one the delivery worker serializes, so a receiver
/// can generate its type.
fn receivers(answers: &mut SchemaGenerator) -> Value {
    let body = answers.subschema_for::<taskq_actors::api::EventBody>();
    let header = |name: &str, description: &str| {
        json!({
            "name": name,
            "in": "header",
            "required": true,
            "description": description,
            "schema": {"type": "string"},
        })
    };
    json!({
        "taskEvent": {
            "post": {
                "operationId": "task_event",
                "summary": "A task's transition (or a test event) sent to a webhook endpoint",
                "description": "Sent for every event type the endpoint subscribed to, signed as Standard Webhooks sign (`v1,` and the base64 HMAC-SHA256 of `{webhook-id}.{webhook-timestamp}.{body}` under the secret's bytes; two signatures, space-separated, while a rotated-out secret still signs). A task's events arrive in order; an event is sent again until a 2xx answer comes (see the guide's retry schedule, docs/guide/webhooks.md). Never carries a task's content.",
                "parameters": [
                    header("webhook-id", "The event's id: the same on every attempt"),
                    header("webhook-timestamp", "Unix seconds of this attempt"),
                    header("webhook-signature", "`v1,<base64>`, one per secret in use"),
                ],
                "requestBody": {
                    "required": true,
                    "content": {"application/json": {"schema": body}},
                },
                "responses": {
                    "2XX": {"description": "Received: the event is not sent again"},
                    "410": {"description": "Gone: the endpoint is disabled, nothing more is sent"},
                    "default": {"description": "Not received: the event is sent again later (a `Retry-After` is honoured)"},
                },
            }
        }
    })
}

fn generator(settings: SchemaSettings) -> SchemaGenerator {
    settings
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
        .into_generator()
}

/// Moves the answers' definitions next to the requests'. A type described
/// the same both ways is kept once; one that differs (a field optional in
/// a request but always written in an answer) gets its answer form under
/// `<Name>Answer`. Returns those renamings.
fn merge_definitions(
    schemas: &mut Map<String, Value>,
    answers: Map<String, Value>,
) -> Vec<(String, String)> {
    let mut renamed = Vec::new();
    for (name, schema) in &answers {
        if schemas.get(name).is_some_and(|s| s != schema) {
            renamed.push((name.clone(), format!("{name}Answer")));
        }
    }
    for (name, mut schema) in answers {
        rename_refs(&mut schema, &renamed);
        let name = renamed
            .iter()
            .find(|(from, _)| *from == name)
            .map_or(name, |(_, to)| to.clone());
        schemas.insert(name, schema);
    }
    renamed
}

/// Removes `"default": null` from schemas that do not admit `null`: an
/// optional field whose absence means "unchanged" but which refuses an
/// explicit `null` has no default value to advertise.
pub(crate) fn drop_null_defaults(value: &mut Value) {
    match value {
        Value::Object(object) => {
            if object.get("default").is_some_and(Value::is_null) && !admits_null(object) {
                object.remove("default");
            }
            object.values_mut().for_each(drop_null_defaults);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_null_defaults),
        _ => {}
    }
}

fn admits_null(schema: &Map<String, Value>) -> bool {
    let null = json!("null");
    match schema.get("type") {
        Some(Value::Array(types)) if types.contains(&null) => return true,
        Some(t) if *t == null => return true,
        _ => {}
    }
    ["anyOf", "oneOf"].iter().any(|k| {
        schema
            .get(*k)
            .and_then(Value::as_array)
            .is_some_and(|options| options.iter().any(|o| o.get("type") == Some(&null)))
    })
}

/// Points the `$ref`s of an answer schema at renamed definitions.
fn rename_refs(value: &mut Value, renamed: &[(String, String)]) {
    match value {
        Value::Object(object) => {
            for (key, v) in object.iter_mut() {
                if key == "$ref" {
                    let Value::String(target) = v else { continue };
                    let name = target.strip_prefix(SCHEMAS).unwrap_or_default();
                    if let Some((_, to)) = renamed.iter().find(|(from, _)| from == name) {
                        *target = format!("{SCHEMAS}{to}");
                    }
                } else {
                    rename_refs(v, renamed);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| rename_refs(v, renamed)),
        _ => {}
    }
}

/// Where a `$ref` points for a named schema.
const SCHEMAS: &str = "#/components/schemas/";

/// The operation object of a route.
pub(super) fn operation(
    route: &Operation,
    requests: &mut SchemaGenerator,
    answers: &mut SchemaGenerator,
) -> Value {
    let mut operation = Map::new();
    operation.insert("operationId".into(), route.id.into());
    operation.insert("summary".into(), route.summary.into());
    if let Some(description) = route.tool {
        operation.insert("description".into(), description.into());
    }
    operation.insert("tags".into(), json!([route.tag]));
    let security = match route.access {
        // The board signs in by itself, with a form.
        Access::Public | Access::BoardSession => json!([]),
        Access::Member(..) => json!([{ "ApiKey": [] }]),
        Access::Operator => json!([{ "OperatorToken": [] }]),
        Access::OperatorOrSession => json!([{ "OperatorToken": [] }, { "OperatorSession": [] }]),
    };
    operation.insert("security".into(), security);
    let mut parameters: Vec<Value> = route
        .path_params()
        .map(|name| {
            json!({
                "name": name,
                "in": "path",
                "required": true,
                "description": path_param_description(name),
                "schema": { "type": "string", "minLength": 1 },
            })
        })
        .collect();
    match route.input() {
        Input::None => {}
        Input::Body(schema, required) => {
            operation.insert(
                "requestBody".into(),
                json!({
                    "required": required,
                    "content": { "application/json": { "schema": schema(requests) } },
                }),
            );
        }
        Input::Form(schema) => {
            operation.insert(
                "requestBody".into(),
                json!({
                    "required": true,
                    "content": {
                        "application/x-www-form-urlencoded": { "schema": schema(requests) }
                    },
                }),
            );
        }
        Input::Query(schema) => parameters.extend(query_parameters(schema(requests))),
    }
    if !parameters.is_empty() {
        operation.insert("parameters".into(), parameters.into());
    }
    let mut responses = Map::new();
    for (status, description, answer) in &route.answers {
        let mut response = json!({ "description": description });
        match answer {
            Answer::Json(schema) => {
                response["content"] = json!({ "application/json": { "schema": schema(answers) } });
            }
            Answer::Text => {
                response["content"] = json!({ "text/plain": { "schema": { "type": "string" } } });
            }
            Answer::Html => {
                response["content"] = json!({ "text/html": { "schema": { "type": "string" } } });
            }
            Answer::Ndjson => {
                response["content"] =
                    json!({ "application/x-ndjson": { "schema": { "type": "string" } } });
            }
            Answer::EventStream => {
                response["content"] =
                    json!({ "text/event-stream": { "schema": { "type": "string" } } });
            }
            Answer::Empty => {}
        }
        document_retry_after(*status, &mut response);
        responses.insert(status.to_string(), response);
    }
    let error = answers.subschema_for::<ErrorBody>();
    for status in error_statuses(route) {
        let mut response = json!({
            "description": error_description(status),
            "content": { "application/json": { "schema": error } },
        });
        document_retry_after(status, &mut response);
        responses.insert(status.to_string(), response);
    }
    operation.insert("responses".into(), responses.into());
    operation.into()
}

/// One query parameter per property of a request's object schema. A query
/// value is never `null` (absent is how a client leaves a field unset), so
/// the `null` alternative of an optional field is dropped.
fn query_parameters(schema: Schema) -> Vec<Value> {
    let schema = schema.to_value();
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema["properties"].as_object() else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, property)| {
            let mut property = property.clone();
            let description = property
                .as_object_mut()
                .and_then(|p| p.remove("description"));
            drop_null(&mut property);
            // A default that is not a query value (an empty list, `null`)
            // only says "absent".
            if let Some(p) = property.as_object_mut() {
                if p.get("default")
                    .is_some_and(|d| d.is_null() || d.is_array())
                {
                    p.remove("default");
                }
            }
            let mut parameter = json!({
                "name": name,
                "in": "query",
                "required": required.contains(&name.as_str()),
                "schema": property,
            });
            if let Some(description) = description {
                parameter["description"] = description;
            }
            parameter
        })
        .collect()
}

/// Removes `null` from a schema's types (`["string", "null"]` → `"string"`,
/// `anyOf: [X, {type: null}]` → `X`).
fn drop_null(schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if let Some(Value::Array(types)) = object.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let only = types.remove(0);
            object.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(options)) = object.get("anyOf") {
        let rest: Vec<Value> = options
            .iter()
            .filter(|o| o.get("type") != Some(&json!("null")))
            .cloned()
            .collect();
        if rest.len() == 1 {
            object.remove("anyOf");
            if let Some(Value::Object(only)) = rest.into_iter().next() {
                for (k, v) in only {
                    object.entry(k).or_insert(v);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
