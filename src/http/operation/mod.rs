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
//!
//! The builder's methods each set one part and read none: an entry reads
//! the same whatever order its parts are written in, and what depends on
//! several parts (the request a member's call reads, its status, what it
//! is counted as) is worked out when the entry is used.

mod http;
mod serve;

pub(super) use http::query_params;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use axum::handler::Handler;
use axum::http::{Method, StatusCode};
use axum::routing::{on, MethodFilter, MethodRouter};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::Value;
use taskq_actors::api::{Decode, RequestKind};

use super::cluster::OrgOf;
use super::AppState;
pub use serve::{Arguments, MemberCall, Reply};
use serve::{MemberServe, OperatorServe};

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
    /// The board's pages: each acts for the member of the browser's board
    /// session, and sends a browser without one to the sign-in form (which,
    /// with the sign-in itself, needs none).
    BoardSession,
}

/// What an operation answers with a given status.
pub(super) enum Answer {
    Json(SchemaFn),
    Text,
    Html,
    /// Newline-delimited JSON (`application/x-ndjson`), streamed.
    Ndjson,
    /// A stream of Server-Sent Events.
    EventStream,
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

/// The request type of an engine operation, as its schemas: where it is
/// read from is the entry's `Source`.
#[derive(Clone, Copy)]
struct RequestSchemas {
    body: SchemaFn,
    body_required: bool,
    query: SchemaFn,
    tool: fn() -> Value,
}

impl RequestSchemas {
    fn of<R: Decode>() -> Self {
        Self {
            body: subschema::<R>,
            body_required: R::BODY_REQUIRED,
            query: object_schema::<R>,
            tool: super::openapi::tool_schema::<R>,
        }
    }
}

/// What a member's call takes from the rest of its entry: what it is
/// counted as, and the status of its success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Terms {
    kind: RequestKind,
    feature: Option<&'static str>,
    success: StatusCode,
}

/// What serves an operation.
enum Serve {
    /// A handler of its own (pages, the document, metrics).
    Handler(Box<MethodRouter<AppState>>),
    Member(MemberServe, RequestSchemas),
    Operator(OperatorServe, RequestSchemas),
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
    source: Source,
    /// The fields of its HTML form, when it reads one.
    form: Option<SchemaFn>,
    /// The query parameters of an operation served by a handler of its
    /// own, when it reads some.
    handler_query: Option<SchemaFn>,
    /// By status, lowest first.
    pub(super) answers: Vec<(u16, &'static str, Answer)>,
    /// Lowest first, each once.
    pub(super) errors: Vec<u16>,
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
            source: Source::None,
            form: None,
            handler_query: None,
            answers: Vec::new(),
            errors: Vec::new(),
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
        self.form = Some(subschema::<T>);
        self
    }

    /// The query parameters, the fields of `T`, that a handler of its own
    /// reads.
    pub fn query_of<T: JsonSchema>(mut self) -> Self {
        self.handler_query = Some(object_schema::<T>);
        self
    }

    /// A JSON answer of type `T` with `status`.
    pub fn answer<T: JsonSchema>(self, status: u16, description: &'static str) -> Self {
        self.answered(status, description, Answer::Json(subschema::<T>))
    }

    /// An answer without a body.
    pub fn empty(self, status: u16, description: &'static str) -> Self {
        self.answered(status, description, Answer::Empty)
    }

    /// A stream of Server-Sent Events.
    pub fn event_stream(self, status: u16, description: &'static str) -> Self {
        self.answered(status, description, Answer::EventStream)
    }

    /// A plain-text answer.
    pub fn text(self, status: u16, description: &'static str) -> Self {
        self.answered(status, description, Answer::Text)
    }

    /// A stream of JSON objects, one a line.
    pub fn ndjson(self, status: u16, description: &'static str) -> Self {
        self.answered(status, description, Answer::Ndjson)
    }

    /// An HTML page.
    pub fn html(self, status: u16, description: &'static str) -> Self {
        self.answered(status, description, Answer::Html)
    }

    fn answered(mut self, status: u16, description: &'static str, answer: Answer) -> Self {
        assert!(
            self.answers.iter().all(|(s, ..)| *s != status),
            "{} {} lists the answer {status} twice",
            self.method,
            self.path
        );
        let at = self.answers.partition_point(|(s, ..)| *s < status);
        self.answers.insert(at, (status, description, answer));
        self
    }

    /// Error statuses beyond those every operation of its kind can give.
    pub fn errors(mut self, statuses: &[u16]) -> Self {
        self.errors.extend_from_slice(statuses);
        self.errors.sort_unstable();
        self.errors.dedup();
        self
    }

    /// Served by a handler of its own.
    pub fn handler<H: Handler<T, AppState>, T: 'static>(mut self, handler: H) -> Self {
        self.serve = Some(Serve::Handler(Box::new(on(self.filter, handler))));
        self
    }

    /// The status of a success: the lowest 2xx the table lists (200
    /// when it lists none).
    fn success(&self) -> StatusCode {
        self.answers
            .iter()
            .map(|(s, ..)| *s)
            .find(|s| (200..300).contains(s))
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::OK)
    }

    /// What the operation reads besides its path parameters.
    pub(super) fn input(&self) -> Input {
        if let Some(form) = self.form {
            return Input::Form(form);
        }
        let request = match &self.serve {
            Some(Serve::Member(_, request) | Serve::Operator(_, request)) => request,
            Some(Serve::Handler(_)) | None => {
                return self.handler_query.map_or(Input::None, Input::Query)
            }
        };
        match self.source {
            Source::None => Input::None,
            Source::Body => Input::Body(request.body, request.body_required),
            Source::Query => Input::Query(request.query),
        }
    }

    /// What a member's call is counted as and answers on success; `None`
    /// for an operation that is no member's call.
    pub(super) fn terms(&self) -> Option<Terms> {
        if !matches!(self.serve, Some(Serve::Member(..))) {
            return None;
        }
        let Access::Member(kind, feature) = self.access else {
            panic!(
                "{}: a member's operation needs reads() or writes()",
                self.id
            );
        };
        Some(Terms {
            kind,
            feature,
            success: self.success(),
        })
    }

    /// The member's call, for the MCP dispatch and the board.
    pub fn member_call(&self) -> Option<MemberCall> {
        let Some(Serve::Member(serve, _)) = &self.serve else {
            return None;
        };
        let terms = self.terms()?;
        let serve = Arc::clone(serve);
        Some(Arc::new(move |state, caller, args| {
            serve(state, caller, terms, args)
        }))
    }

    /// The JSON Schema of the tool's arguments: the request's, with the
    /// path parameters as properties (a member's operation only).
    pub fn tool_input_schema(&self) -> Option<Value> {
        let Some(Serve::Member(_, request)) = &self.serve else {
            return None;
        };
        Some(super::openapi::with_path_params(
            request.tool,
            self.path_params().collect(),
        ))
    }

    /// Which org a request of the operation acts for: where a cluster
    /// serves it.
    pub(super) fn org_of(&self) -> OrgOf {
        OrgOf::of(self.access, self.path)
    }

    pub fn path_params(&self) -> impl Iterator<Item = &'static str> {
        self.path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
    }
}
