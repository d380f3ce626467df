//! The board's reads and writes: each is the API operation of the same
//! name, called through the operation table (`super::super::operations()`)
//! exactly as its HTTP route and its MCP tool call it. The request is
//! decoded, checked, admitted and counted by the same code, so the board
//! can do nothing the caller's key could not do over the API, and no rule
//! of the service is written twice. The answer is read back into the
//! operation's own answer type ([`Call`]), so the board reads the fields
//! the API writes, by name and type, or fails loudly.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::LazyLock;

use serde::de::DeserializeOwned;
use serde_json::Value;
use taskq_actors::api::{
    CreateAnswer, GetAnswer, InsightsAnswer, KeyList, ListAnswer, MemberView, ScheduleList,
    ScheduleView, SearchAnswer, StandupAnswer, TagView, TagsCreated, TeamView, UpdateAnswer,
};
use taskq_actors::{Caller, EngineError};

use super::super::{AppState, Arguments, MemberCall};

/// Every member operation of the table, by id, built once.
static CALLS: LazyLock<HashMap<&'static str, MemberCall>> = LazyLock::new(|| {
    super::super::operations()
        .into_iter()
        .filter_map(|op| Some((op.id, op.member_call()?)))
        .collect()
});

/// An operation the board calls, by its id, with the type of its answer.
pub struct Call<A> {
    id: &'static str,
    answer: PhantomData<fn() -> A>,
}

impl<A> Call<A> {
    const fn new(id: &'static str) -> Self {
        Self {
            id,
            answer: PhantomData,
        }
    }
}

impl<A> Clone for Call<A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for Call<A> {}

pub const LIST_TASKS: Call<ListAnswer> = Call::new("list_tasks");
pub const GET_TASKS: Call<GetAnswer> = Call::new("get_tasks");
pub const CREATE_TASKS: Call<CreateAnswer> = Call::new("create_tasks");
pub const UPDATE_TASKS: Call<UpdateAnswer> = Call::new("update_tasks");
pub const SEARCH_TASKS: Call<SearchAnswer> = Call::new("search_tasks");
pub const LIST_KEYS: Call<KeyList> = Call::new("list_keys");
pub const GET_INSIGHTS: Call<InsightsAnswer> = Call::new("get_insights");
pub const GET_STANDUP: Call<StandupAnswer> = Call::new("get_standup");
pub const LIST_TAGS: Call<Vec<TagView>> = Call::new("list_tags");
pub const CREATE_TAGS: Call<TagsCreated> = Call::new("create_tags");
pub const LIST_MEMBERS: Call<Vec<MemberView>> = Call::new("list_members");
pub const LIST_TEAMS: Call<Vec<TeamView>> = Call::new("list_teams");
pub const LIST_SCHEDULES: Call<ScheduleList> = Call::new("list_schedules");
pub const CREATE_SCHEDULE: Call<ScheduleView> = Call::new("create_schedule");
pub const UPDATE_SCHEDULE: Call<ScheduleView> = Call::new("update_schedule");
pub const DELETE_SCHEDULE: Call<()> = Call::new("delete_schedule");

/// Where an operation's request goes.
pub enum Input {
    /// No request beyond the path (`GET /tags`).
    None,
    /// The JSON body.
    Body(Value),
    /// The query string's pairs.
    Query(Vec<(String, String)>),
    /// The path's parameters and the JSON body.
    At(Vec<String>, Value),
}

/// Calls the operation for `caller`: its answer, or its refusal or
/// failure as the engine gave it.
pub async fn call<A: DeserializeOwned>(
    state: &AppState,
    caller: &Caller,
    operation: Call<A>,
    input: Input,
) -> Result<A, EngineError> {
    let id = operation.id;
    let call = CALLS
        .get(id)
        .unwrap_or_else(|| panic!("the board calls {id}, which the table lacks"));
    let (path, input, query) = match input {
        Input::None => (Vec::new(), Value::Object(Default::default()), None),
        Input::Body(body) => (Vec::new(), body, None),
        Input::Query(pairs) => (Vec::new(), Value::Null, Some(pairs)),
        Input::At(path, body) => (path, body, None),
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
    let read = match reply.body {
        Some(bytes) => serde_json::from_slice(&bytes),
        // 204: no body, which reads as JSON's null.
        None => A::deserialize(Value::Null),
    };
    read.map_err(|e| EngineError::Internal(format!("the answer of {id} does not read: {e}")))
}

#[cfg(test)]
mod tests {
    use schemars::{JsonSchema, SchemaGenerator};

    use super::super::super::operation::Answer;
    use super::*;

    /// The operation is a member's, and every JSON answer of its success
    /// is of the type the board reads it as.
    fn reads_its_answer<A: JsonSchema>(call: Call<A>) {
        assert!(
            CALLS.contains_key(call.id),
            "{} is not a member operation",
            call.id
        );
        let operations = super::super::super::operations();
        let operation = operations
            .iter()
            .find(|o| o.id == call.id)
            .expect("in the table");
        let mut generator = SchemaGenerator::default();
        let read = generator.subschema_for::<A>();
        let written: Vec<_> = operation
            .answers
            .iter()
            .filter(|(status, ..)| (200..300).contains(status))
            .filter_map(|(_, _, answer)| match answer {
                Answer::Json(schema) => Some(schema(&mut generator)),
                _ => None,
            })
            .collect();
        assert!(!written.is_empty(), "{} answers no JSON", call.id);
        for schema in written {
            assert_eq!(schema, read, "{} answers another type", call.id);
        }
    }

    #[test]
    fn every_call_reads_the_type_its_operation_answers() {
        reads_its_answer(LIST_TASKS);
        reads_its_answer(GET_TASKS);
        reads_its_answer(CREATE_TASKS);
        reads_its_answer(UPDATE_TASKS);
        reads_its_answer(SEARCH_TASKS);
        reads_its_answer(LIST_KEYS);
        reads_its_answer(GET_INSIGHTS);
        reads_its_answer(GET_STANDUP);
        reads_its_answer(LIST_TAGS);
        reads_its_answer(CREATE_TAGS);
        reads_its_answer(LIST_MEMBERS);
        reads_its_answer(LIST_TEAMS);
        reads_its_answer(LIST_SCHEDULES);
        reads_its_answer(CREATE_SCHEDULE);
        reads_its_answer(UPDATE_SCHEDULE);
    }
}
