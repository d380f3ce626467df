//! The tools: the operations of the table marked as tools (named as
//! CONTRACT.md §4 says), each with its request type's own schema as input
//! schema (and the route's path parameters as properties), and the same
//! call as its HTTP route: read, counted and answered the same way.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::Value;
use taskq_actors::{Caller, EngineError, ValidationError};

use crate::http::{AppState, Arguments, MemberCall};

/// A tool's call and the names of its path parameters.
struct Callable {
    call: MemberCall,
    path: Vec<&'static str>,
}

/// The advertised tools and their calls, built once from the table.
static TOOLS: LazyLock<(Vec<Tool>, HashMap<&'static str, Callable>)> = LazyLock::new(|| {
    let mut tools = Vec::new();
    let mut calls = HashMap::new();
    for operation in crate::http::operations() {
        let (Some(description), Some(call), Some(Value::Object(schema))) = (
            operation.tool,
            operation.member_call(),
            operation.tool_input_schema(),
        ) else {
            continue;
        };
        let mut tool = Tool::new(operation.id, description, Arc::new(schema));
        if operation.read_only {
            tool = tool.with_annotations(ToolAnnotations::new().read_only(true));
        }
        tools.push(tool);
        let path = operation.path_params().collect();
        calls.insert(operation.id, Callable { call, path });
    }
    (tools, calls)
});

/// The advertised tools.
pub fn tools() -> Vec<Tool> {
    TOOLS.0.clone()
}

/// A route's JSON body: as the route writes it, and as a value.
pub struct Body {
    pub text: String,
    pub json: Value,
}

/// What a tool call answers: the route's JSON body, or the engine's error.
pub type Answer = Result<Body, EngineError>;

/// Calls the tool `name`; `None` when there is no such tool.
pub async fn call(
    state: &AppState,
    caller: &Caller,
    name: &str,
    mut arguments: JsonObject,
) -> Option<Answer> {
    let callable = TOOLS.1.get(name)?;
    let mut path = Vec::with_capacity(callable.path.len());
    let mut path_error = None;
    for key in &callable.path {
        match arguments.remove(*key) {
            Some(Value::String(s)) if !s.trim().is_empty() => path.push(s),
            Some(_) => {
                path_error.get_or_insert(ValidationError::field(key, "must be a non-empty string"));
            }
            None => {
                path_error.get_or_insert(ValidationError::field(key, "is required"));
            }
        }
    }
    let args = Arguments {
        path,
        path_error,
        input: Value::Object(arguments),
        query: None,
    };
    let reply = (callable.call)(state.clone(), caller.clone(), args).await;
    Some(reply.map(|reply| {
        let text = reply
            .body
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_else(|| "null".to_owned());
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Body { text, json }
    }))
}
