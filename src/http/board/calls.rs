//! The board's reads and writes: each is the API operation of the same
//! name, called through the operation table (`super::super::operations()`)
//! exactly as its HTTP route and its MCP tool call it. The request is
//! decoded, checked, admitted and counted by the same code, so the board
//! can do nothing the caller's key could not do over the API, and no rule
//! of the service is written twice.

use std::collections::HashMap;
use std::sync::LazyLock;

use serde_json::Value;
use taskq_actors::Caller;

use super::super::{ApiError, AppState, Arguments, MemberCall};

/// Every member operation of the table, by id, built once.
static CALLS: LazyLock<HashMap<&'static str, MemberCall>> = LazyLock::new(|| {
    super::super::operations()
        .into_iter()
        .filter_map(|op| Some((op.id, op.member_call()?)))
        .collect()
});

/// Where an operation's request goes.
pub enum Input {
    /// No request beyond the path (`GET /tags`).
    None,
    /// The JSON body.
    Body(Value),
    /// The query string's pairs.
    Query(Vec<(String, String)>),
}

/// An operation's answer: its JSON body (`null` for 204). A refusal or
/// failure is the `Err` of [`call`], with the operation's status.
pub struct Answer {
    pub body: Value,
}

/// Calls the operation `id` for `caller`.
pub async fn call(
    state: &AppState,
    caller: &Caller,
    id: &str,
    path: Vec<String>,
    input: Input,
) -> Result<Answer, ApiError> {
    let call = CALLS
        .get(id)
        .unwrap_or_else(|| panic!("the board calls {id}, which the table lacks"));
    let (input, query) = match input {
        Input::None => (Value::Object(Default::default()), None),
        Input::Body(body) => (body, None),
        Input::Query(pairs) => (Value::Null, Some(pairs)),
    };
    let reply = call(
        state.clone(),
        caller.clone(),
        Arguments {
            path,
            path_error: None,
            input,
            query,
        },
    )
    .await?;
    let body = match reply.body {
        Some(bytes) => serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        None => Value::Null,
    };
    Ok(Answer { body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_the_board_calls_is_in_the_table() {
        for id in super::super::CALLED {
            assert!(CALLS.contains_key(id), "{id} is not a member operation");
        }
    }
}
