//! An operation as an HTTP route: its arguments read from the request,
//! its reply written as the response.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::on;
use serde_json::Value;

use super::super::error::ApiError;
use super::super::extract::{query_pairs, Auth, Operator};
use super::super::AppState;
use super::serve::{Arguments, Reply};
use super::{Input, Operation, Serve, Source};

impl Operation {
    /// Adds the operation to a router; with several nodes, behind the
    /// forwarding of requests to the node that owns their org.
    pub fn register(
        self,
        router: axum::Router<AppState>,
        state: &AppState,
    ) -> axum::Router<AppState> {
        let source = self.source;
        let optional_body = matches!(self.input(), Input::Body(_, false));
        let org_of = self.org_of();
        let member_call = self.member_call();
        let success = self.success();
        let method_router = match self.serve {
            Some(Serve::Handler(handler)) => *handler,
            Some(Serve::Member(..)) => {
                let call = member_call.expect("a member's operation has its call");
                on(
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
                )
            }
            Some(Serve::Operator(call, _)) => on(
                self.filter,
                move |State(state): State<AppState>, _: Operator, request: Request| {
                    let call = Arc::clone(&call);
                    async move {
                        let args = arguments(source, optional_body, request, &state).await?;
                        call(state, success, args).await.map(respond)
                    }
                },
            ),
            None => panic!("{} {} has nothing serving it", self.method, self.path),
        };
        router.route(
            self.path,
            super::super::cluster::forwarded(state, org_of, method_router),
        )
    }
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

/// A query string's parameters, a repeated one's values joined by commas
/// (`?status=a&status=b` is `status=a,b`).
pub(in crate::http) fn query_params(
    query: Option<&str>,
) -> Result<Vec<(String, String)>, ApiError> {
    let mut params: Vec<(String, String)> = Vec::new();
    for (key, value) in query_pairs(query.unwrap_or(""))? {
        match params.iter_mut().find(|(k, _)| *k == key) {
            Some((_, joined)) => {
                joined.push(',');
                joined.push_str(&value);
            }
            None => params.push((key, value)),
        }
    }
    Ok(params)
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
        Source::Query => (Value::Null, Some(query_params(parts.uri.query())?)),
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
