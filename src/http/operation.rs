//! The operation table's entry: one operation, defined once.
//!
//! An [`Operation`] is its id (the OpenAPI `operationId`, and the MCP
//! tool's name when it is a tool), method and path, who may call it, the
//! request it reads and the answers it gives, and what serves it: for the
//! API's operations, one engine call on typed arguments. The router, the
//! OpenAPI document, `tools/list` and the MCP dispatch are all built from
//! the table (`super::operations()`), so adding an operation touches one
//! place, and a request is read and counted the same whichever way it
//! arrives.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::handler::Handler;
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter, MethodRouter};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;
use serde_json::Value;
use taskq_actors::api::{decode_query, Decode, RequestKind};
use taskq_actors::{Caller, EngineError, ValidationError};

use super::error::ApiError;
use super::extract::{query_pairs, Auth, Operator};
use super::AppState;

/// The schema of a type, from a generator (a `$ref` when it is named).
pub(super) type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

fn subschema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// The object schema of a type itself, properties inline (for a query).
pub(super) fn object_schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    T::json_schema(generator)
}

/// Who may call an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone.
    Public,
    /// A member's key in `X-Api-Key`: counted as a read or a write against
    /// the org's limits, also when refused, and gated by a paid feature.
    Member(RequestKind, Option<&'static str>),
    /// The operator token as `Authorization: Bearer`.
    Operator,
    /// The operator token, or the operator page's session cookie.
    OperatorOrSession,
}

/// What an operation answers with a given status.
pub(super) enum Answer {
    Json(SchemaFn),
    Text,
    Html,
    Empty,
}

/// Where an operation's request comes from, besides its path parameters.
#[derive(Clone, Copy)]
pub(super) enum Input {
    None,
    /// A JSON body; `false` when an absent body reads as `{}`.
    Body(SchemaFn, bool),
    /// An HTML form (`application/x-www-form-urlencoded`).
    Form(SchemaFn),
    Query(SchemaFn),
}

/// How the request of an engine operation is read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    None,
    Body,
    Query,
}

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

type OperatorCall =
    Arc<dyn Fn(AppState, Arguments) -> Pending<Result<Reply, ApiError>> + Send + Sync>;

/// What serves an operation.
enum Serve {
    /// A handler of its own (pages, the document, metrics).
    Handler(Box<MethodRouter<AppState>>),
    Member(MemberCall),
    Operator(OperatorCall),
}

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

/// One operation: what the table says of it.
pub struct Operation {
    pub method: Method,
    filter: MethodFilter,
    /// The path template; axum and OpenAPI both write parameters `{name}`.
    pub path: &'static str,
    pub id: &'static str,
    pub(super) summary: &'static str,
    pub(super) tag: &'static str,
    /// The MCP tool's description, when the operation is a tool.
    pub tool: Option<&'static str>,
    /// A tool that changes nothing.
    pub read_only: bool,
    pub(super) access: Access,
    pub(super) input: Input,
    source: Source,
    pub(super) answers: Vec<(u16, &'static str, Answer)>,
    pub(super) errors: Vec<u16>,
    /// The input schema of its tool: the request's, with the path
    /// parameters as properties.
    tool_schema: Option<fn() -> Value>,
    serve: Option<Serve>,
}

impl Operation {
    fn new(method: Method, filter: MethodFilter, path: &'static str) -> Self {
        Self {
            method,
            filter,
            path,
            id: "",
            summary: "",
            tag: "",
            tool: None,
            read_only: false,
            access: Access::Public,
            input: Input::None,
            source: Source::None,
            answers: Vec::new(),
            errors: Vec::new(),
            tool_schema: None,
            serve: None,
        }
    }

    pub fn get(path: &'static str) -> Self {
        Self::new(Method::GET, MethodFilter::GET, path)
    }

    pub fn post(path: &'static str) -> Self {
        Self::new(Method::POST, MethodFilter::POST, path)
    }

    pub fn put(path: &'static str) -> Self {
        Self::new(Method::PUT, MethodFilter::PUT, path)
    }

    pub fn patch(path: &'static str) -> Self {
        Self::new(Method::PATCH, MethodFilter::PATCH, path)
    }

    pub fn delete(path: &'static str) -> Self {
        Self::new(Method::DELETE, MethodFilter::DELETE, path)
    }

    /// The operation id, its tag and a one-line summary.
    pub fn doc(mut self, id: &'static str, tag: &'static str, summary: &'static str) -> Self {
        (self.id, self.tag, self.summary) = (id, tag, summary);
        self
    }

    /// Also an MCP tool, named by the operation id, described so.
    pub fn tool(mut self, description: &'static str) -> Self {
        self.tool = Some(description);
        self
    }

    /// A tool that only reads.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// A member's read (or write), gated by a paid feature or not.
    pub fn reads(mut self, feature: Option<&'static str>) -> Self {
        self.access = Access::Member(RequestKind::Read, feature);
        self
    }

    pub fn writes(mut self, feature: Option<&'static str>) -> Self {
        self.access = Access::Member(RequestKind::Write, feature);
        self
    }

    pub fn access(mut self, access: Access) -> Self {
        self.access = access;
        self
    }

    /// The request is the JSON body.
    pub fn body(mut self) -> Self {
        self.source = Source::Body;
        self
    }

    /// The request is the query string, one parameter per field.
    pub fn query(mut self) -> Self {
        self.source = Source::Query;
        self
    }

    /// A form body (`application/x-www-form-urlencoded`) with the fields of `T`.
    pub fn form<T: JsonSchema>(mut self) -> Self {
        self.input = Input::Form(subschema::<T>);
        self
    }

    /// A JSON answer of type `T` with `status`.
    pub fn answer<T: JsonSchema>(mut self, status: u16, description: &'static str) -> Self {
        self.answers
            .push((status, description, Answer::Json(subschema::<T>)));
        self
    }

    /// An answer without a body.
    pub fn empty(mut self, status: u16, description: &'static str) -> Self {
        self.answers.push((status, description, Answer::Empty));
        self
    }

    /// A plain-text answer.
    pub fn text(mut self, status: u16, description: &'static str) -> Self {
        self.answers.push((status, description, Answer::Text));
        self
    }

    /// An HTML page.
    pub fn html(mut self, status: u16, description: &'static str) -> Self {
        self.answers.push((status, description, Answer::Html));
        self
    }

    /// Error statuses beyond those every operation of its kind can give.
    pub fn errors(mut self, statuses: &[u16]) -> Self {
        self.errors.extend_from_slice(statuses);
        self
    }

    /// Served by a handler of its own.
    pub fn handler<H: Handler<T, AppState>, T: 'static>(mut self, handler: H) -> Self {
        self.serve = Some(Serve::Handler(Box::new(on(self.filter, handler))));
        self
    }

    /// The status of a success: the first 2xx the table lists.
    fn success(&self) -> StatusCode {
        self.answers
            .iter()
            .map(|(s, ..)| *s)
            .find(|s| (200..300).contains(s))
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::OK)
    }

    /// Records the request type `R` where the operation reads it from.
    fn input_of<R: Decode>(&mut self) {
        self.input = match self.source {
            Source::None => Input::None,
            Source::Body => Input::Body(subschema::<R>, R::BODY_REQUIRED),
            Source::Query => Input::Query(object_schema::<R>),
        };
        self.tool_schema = Some(super::openapi::tool_schema::<R>);
    }

    /// Served by one engine call on the member's typed request; `status`
    /// picks the answer's status (the table's first 2xx when `None`).
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
        self.input_of::<R>();
        let Access::Member(kind, feature) = self.access else {
            panic!(
                "{}: a member's operation needs reads() or writes()",
                self.id
            );
        };
        let success = self.success();
        let call = Arc::new(call);
        let erased: MemberCall =
            Arc::new(move |state: AppState, caller: Caller, args: Arguments| {
                let call = Arc::clone(&call);
                Box::pin(async move {
                    let (path, request) = match typed::<P, R>(args) {
                        Ok(typed) => typed,
                        Err(error) => {
                            return Err(state.engine.reject_as(&caller, kind, feature, error).await)
                        }
                    };
                    let answer = call(state, caller, path, request).await?;
                    Ok(reply(&answer, status(&answer).unwrap_or(success)))
                })
            });
        self.serve = Some(Serve::Member(erased));
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
        self.input_of::<R>();
        self.tool_schema = None;
        let success = self.success();
        let call = Arc::new(call);
        let erased: OperatorCall = Arc::new(move |state: AppState, args: Arguments| {
            let call = Arc::clone(&call);
            Box::pin(async move {
                let (path, request) = typed::<P, R>(args)?;
                let answer = call(state, path, request).await.map_err(Into::into)?;
                Ok(reply(&answer, success))
            })
        });
        self.serve = Some(Serve::Operator(erased));
        self
    }

    /// The member's call, for the MCP dispatch.
    pub fn member_call(&self) -> Option<MemberCall> {
        match &self.serve {
            Some(Serve::Member(call)) => Some(Arc::clone(call)),
            _ => None,
        }
    }

    /// The JSON Schema of the tool's arguments.
    pub fn tool_input_schema(&self) -> Option<Value> {
        let schema = self.tool_schema?;
        Some(super::openapi::with_path_params(
            schema,
            self.path_params().collect(),
        ))
    }

    pub fn path_params(&self) -> impl Iterator<Item = &'static str> {
        self.path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
    }

    /// Adds the operation to a router.
    pub fn register(self, router: axum::Router<AppState>) -> axum::Router<AppState> {
        let source = self.source;
        let optional_body = matches!(self.input, Input::Body(_, false));
        let method_router = match self.serve {
            Some(Serve::Handler(handler)) => *handler,
            Some(Serve::Member(call)) => on(
                self.filter,
                move |State(state): State<AppState>, Auth(caller): Auth, request: Request| {
                    let call = Arc::clone(&call);
                    async move {
                        let args = arguments(source, optional_body, request, &state).await?;
                        call(state, caller, args)
                            .await
                            .map(respond)
                            .map_err(ApiError::from)
                    }
                },
            ),
            Some(Serve::Operator(call)) => on(
                self.filter,
                move |State(state): State<AppState>, _: Operator, request: Request| {
                    let call = Arc::clone(&call);
                    async move {
                        let args = arguments(source, optional_body, request, &state).await?;
                        call(state, args).await.map(respond)
                    }
                },
            ),
            None => panic!("{} {} has nothing serving it", self.method, self.path),
        };
        router.route(self.path, method_router)
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

fn respond(reply: Reply) -> Response {
    match reply.body {
        Some(body) => (
            reply.status,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        None => reply.status.into_response(),
    }
}

/// An HTTP request's arguments: path parameters in order, then the body
/// or the query as the operation reads it. An absent body is `{}` where
/// the body is optional, else `null` (which no request type accepts).
async fn arguments(
    source: Source,
    optional_body: bool,
    request: Request,
    state: &AppState,
) -> Result<Arguments, ApiError> {
    let (mut parts, body) = request.into_parts();
    let path =
        match Option::<Path<Vec<(String, String)>>>::from_request_parts(&mut parts, state).await {
            Ok(Some(Path(pairs))) => pairs.into_iter().map(|(_, v)| v).collect(),
            Ok(None) => Vec::new(),
            Err(e) => return Err(ApiError::new(e.status(), e.body_text())),
        };
    let (input, query) = match source {
        Source::None => (Value::Object(Default::default()), None),
        Source::Query => {
            let mut params: Vec<(String, String)> = Vec::new();
            for (key, value) in query_pairs(parts.uri.query().unwrap_or(""))? {
                match params.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, joined)) => {
                        joined.push(',');
                        joined.push_str(&value);
                    }
                    None => params.push((key, value)),
                }
            }
            (Value::Null, Some(params))
        }
        Source::Body => {
            let request = Request::from_parts(parts, body);
            let bytes = Bytes::from_request(request, state)
                .await
                .map_err(|e| ApiError::new(e.status(), e.body_text()))?;
            let input = if !bytes.iter().all(u8::is_ascii_whitespace) {
                serde_json::from_slice(&bytes)
                    .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))?
            } else if optional_body {
                Value::Object(Default::default())
            } else {
                Value::Null
            };
            (input, None)
        }
    };
    Ok(Arguments {
        path,
        path_error: None,
        input,
        query,
    })
}
