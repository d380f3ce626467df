//! What serves an engine operation: one call on typed arguments, its
//! types erased so that HTTP, MCP and the board call it alike.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::http::StatusCode;
use serde::Serialize;
use serde_json::Value;
use taskq_actors::api::{decode_query, Decode};
use taskq_actors::{Caller, EngineError, ValidationError};

use super::super::error::ApiError;
use super::super::AppState;
use super::{Operation, RequestSchemas, Serve, Terms};

/// An operation's arguments before they are typed: its path parameters in
/// order, and its body, query or tool arguments as JSON.
pub struct Arguments {
    pub path: Vec<String>,
    /// Why the path parameters could not be read (a tool's arguments).
    pub path_error: Option<ValidationError>,
    pub input: Value,
    /// Query parameters, each a string (HTTP's `GET` operations).
    pub query: Option<Vec<(String, String)>>,
}

/// An operation's answer: its status and JSON body (none for 204).
pub struct Reply {
    pub status: StatusCode,
    pub body: Option<Vec<u8>>,
}

type Pending<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A member's operation with its types erased: what HTTP and MCP call.
pub type MemberCall =
    Arc<dyn Fn(AppState, Caller, Arguments) -> Pending<Result<Reply, EngineError>> + Send + Sync>;

/// A member's call before its entry's terms are known.
pub(super) type MemberServe = Arc<
    dyn Fn(AppState, Caller, Terms, Arguments) -> Pending<Result<Reply, EngineError>> + Send + Sync,
>;

/// An operator's call, given the status of its success.
pub(super) type OperatorServe =
    Arc<dyn Fn(AppState, StatusCode, Arguments) -> Pending<Result<Reply, ApiError>> + Send + Sync>;

/// Path parameters as a call takes them: none, one, or two.
pub trait PathArgs: Sized + Send + 'static {
    fn from_values(values: Vec<String>) -> Option<Self>;
}

impl PathArgs for () {
    fn from_values(values: Vec<String>) -> Option<Self> {
        values.is_empty().then_some(())
    }
}

impl PathArgs for String {
    fn from_values(values: Vec<String>) -> Option<Self> {
        let [one]: [String; 1] = values.try_into().ok()?;
        Some(one)
    }
}

impl PathArgs for (String, String) {
    fn from_values(values: Vec<String>) -> Option<Self> {
        let [a, b]: [String; 2] = values.try_into().ok()?;
        Some((a, b))
    }
}

impl Operation {
    /// Served by one engine call on the member's typed request; `status`
    /// picks the answer's status (the table's lowest 2xx when `None`).
    pub fn member<P, R, A, F, Fut>(self, call: F) -> Self
    where
        P: PathArgs,
        R: Decode,
        A: Serialize + Send + 'static,
        F: Fn(AppState, Caller, P, R) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<A, EngineError>> + Send + 'static,
    {
        self.member_with_status(call, |_: &A| None)
    }

    /// As [`Operation::member`], the status chosen by the answer.
    pub fn member_with_status<P, R, A, F, Fut>(
        mut self,
        call: F,
        status: fn(&A) -> Option<StatusCode>,
    ) -> Self
    where
        P: PathArgs,
        R: Decode,
        A: Serialize + Send + 'static,
        F: Fn(AppState, Caller, P, R) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<A, EngineError>> + Send + 'static,
    {
        let call = Arc::new(call);
        let erased: MemberServe = Arc::new(
            move |state: AppState, caller: Caller, terms: Terms, args: Arguments| {
                let call = Arc::clone(&call);
                Box::pin(async move {
                    let (path, request) = match typed::<P, R>(args) {
                        Ok(typed) => typed,
                        Err(error) => {
                            let Terms { kind, feature, .. } = terms;
                            return Err(state
                                .engine
                                .reject_as(&caller, kind, feature, error)
                                .await);
                        }
                    };
                    let answer = call(state, caller, path, request).await?;
                    Ok(reply(&answer, status(&answer).unwrap_or(terms.success)))
                })
            },
        );
        self.serve = Some(Serve::Member(erased, RequestSchemas::of::<R>()));
        self
    }

    /// Served by one call on the operator's typed request.
    pub fn operator<P, R, A, E, F, Fut>(mut self, call: F) -> Self
    where
        P: PathArgs,
        R: Decode,
        A: Serialize + Send + 'static,
        E: Into<ApiError>,
        F: Fn(AppState, P, R) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<A, E>> + Send + 'static,
    {
        let call = Arc::new(call);
        let erased: OperatorServe = Arc::new(
            move |state: AppState, success: StatusCode, args: Arguments| {
                let call = Arc::clone(&call);
                Box::pin(async move {
                    let (path, request) = typed::<P, R>(args)?;
                    let answer = call(state, path, request).await.map_err(Into::into)?;
                    Ok(reply(&answer, success))
                })
            },
        );
        self.serve = Some(Serve::Operator(erased, RequestSchemas::of::<R>()));
        self
    }
}

/// The typed path parameters and request of an operation's arguments.
fn typed<P: PathArgs, R: Decode>(args: Arguments) -> Result<(P, R), ValidationError> {
    if let Some(error) = args.path_error {
        return Err(error);
    }
    let path = P::from_values(args.path)
        .ok_or_else(|| ValidationError::new("path parameters: wrong number"))?;
    let request = match args.query {
        Some(pairs) => decode_query::<R>(pairs)?,
        None => R::decode(&args.input)?,
    };
    Ok((path, request))
}

/// An answer serialized once, for HTTP and MCP alike.
fn reply<A: Serialize>(answer: &A, status: StatusCode) -> Reply {
    let body = (status != StatusCode::NO_CONTENT)
        // An answer of plain data always serializes.
        .then(|| serde_json::to_vec(answer).unwrap_or_default());
    Reply { status, body }
}
