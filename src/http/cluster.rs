//! Several nodes on one PostgreSQL: a request for an org that another node
//! owns is forwarded to that node and its answer relayed, long polls and
//! MCP included; the owner authenticates and limits it again, so it is the
//! one authority for its org. A forwarded request is never forwarded again:
//! a node that no longer owns the org answers 503 `org moving`, and the
//! node that forwarded it looks the owner up afresh and tries once more.
//!
//! The org of a request is its path's (`/admin/orgs/{id}/...`, after the
//! operator token is checked here, so that wrong tokens count against the
//! client that sent them), its key's, or its board session's. Anything
//! else is served here.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use taskq_actors::{parse_org_id, EngineError, PeerAnswer, PeerCall, PeerOp, Peers, Placement};

use super::error::{ApiError, ORG_MOVING_HEADER};
use super::extract::{Operator, MAX_BODY_BYTES};
use super::AppState;

/// Set on a request one node forwards to another.
pub const FORWARDED_HEADER: &str = "x-taskq-forwarded";

/// Headers of one hop only, never passed on (RFC 9110, 7.6.1).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
];

/// The middleware in front of every route.
pub async fn route(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if !state.engine.is_clustered() {
        return next.run(request).await;
    }
    let forwarded = request.headers().contains_key(FORWARDED_HEADER);
    let (mut parts, body) = request.into_parts();
    let org = match org_of(&state, &mut parts).await {
        Ok(Some(org)) => org,
        Ok(None) => return next.run(Request::from_parts(parts, body)).await,
        Err(refused) => return refused.into_response(),
    };
    let url = match state.engine.place(org, forwarded, false).await {
        Ok(Placement::Here) => return next.run(Request::from_parts(parts, body)).await,
        Ok(Placement::At(url)) => url,
        Ok(Placement::Moving) => return moving(),
        Err(e) => return ApiError::from(e).into_response(),
    };
    let body = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
                .into_response()
        }
    };
    if let Some(answer) = forward(&state, org, &url, &parts, &body).await {
        return answer;
    }
    // The owner moved or is gone: ask the directory afresh, once.
    match state.engine.place(org, false, true).await {
        Ok(Placement::Here) => next.run(Request::from_parts(parts, Body::from(body))).await,
        Ok(Placement::At(url)) => forward(&state, org, &url, &parts, &body)
            .await
            .unwrap_or_else(moving),
        Ok(Placement::Moving) => moving(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// The owner's answer to a forwarded request; `None` when it was not the
/// owner (`org moving`), could not be reached, or stopped being live (a
/// node that dies or freezes never answers) before it answered.
async fn forward(
    state: &AppState,
    org: taskq_actors::domain::OrgId,
    url: &str,
    parts: &Parts,
    body: &Bytes,
) -> Option<Response> {
    let answer = tokio::select! {
        answer = send(state, url, parts, body.clone()) => answer,
        () = state.engine.until_gone(url) => return None,
    };
    match answer {
        Ok(answer) if !answer.headers().contains_key(ORG_MOVING_HEADER) => Some(answer),
        Ok(_) => None,
        Err(e) => {
            tracing::debug!(org_id = %org, url, error = %e, "forwarding failed");
            None
        }
    }
}

/// 503 `org moving`: the org is between nodes; retry shortly.
fn moving() -> Response {
    ApiError::from(EngineError::OrgMoving).into_response()
}

/// The org a request belongs to, if it belongs to one.
async fn org_of(
    state: &AppState,
    parts: &mut Parts,
) -> Result<Option<taskq_actors::domain::OrgId>, Response> {
    let path = parts.uri.path();
    if let Some(rest) = path.strip_prefix("/admin/orgs/") {
        let Ok(org) = parse_org_id(rest.split('/').next().unwrap_or_default()) else {
            return Ok(None);
        };
        Operator::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        return Ok(Some(org));
    }
    if path.starts_with("/admin") || matches!(path, "/healthz" | "/openapi.json" | "/metrics") {
        return Ok(None);
    }
    if path.starts_with("/board") {
        // A board page acts for the org of its session.
        let Some(id) = super::board::session_id(&parts.headers) else {
            return Ok(None);
        };
        return state
            .engine
            .board_session_org(id)
            .await
            .map_err(|e| ApiError::from(e).into_response());
    }
    let Some(key) = parts.headers.get("x-api-key").and_then(|v| v.to_str().ok()) else {
        return Ok(None);
    };
    state
        .engine
        .org_of_api_key(key)
        .await
        .map_err(|e| ApiError::from(e).into_response())
}

/// Sends the request to another node and streams its answer back.
async fn send(
    state: &AppState,
    base: &str,
    parts: &Parts,
    body: Bytes,
) -> Result<Response, reqwest::Error> {
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = state.peers.request(
        parts.method.clone(),
        format!("{}{path}", base.trim_end_matches('/')),
    );
    for (name, value) in &parts.headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            request = request.header(name, value);
        }
    }
    let answer = request
        .header(FORWARDED_HEADER, "1")
        .body(body)
        .send()
        .await?;
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            response = response.header(name, value);
        }
    }
    Ok(response
        .body(Body::from_stream(answer.bytes_stream()))
        .unwrap_or_else(|_| {
            ApiError::new(StatusCode::BAD_GATEWAY, "bad answer from a node").into_response()
        }))
}

/// What nodes present to each other on `/internal/peer`.
const PEER_TOKEN_HEADER: &str = "x-taskq-peer-token";

/// `POST /internal/peer`: an operation another node of the cluster asks of
/// this one, for an org this node owns (not part of the public API).
pub async fn peer(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    axum::Json(op): axum::Json<PeerOp>,
) -> Result<axum::Json<PeerAnswer>, ApiError> {
    let token = headers
        .get(PEER_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    Ok(axum::Json(state.engine.run_peer_op(token, op).await?))
}

/// The other nodes, reached over HTTP at their advertise URLs.
pub struct HttpPeers {
    client: reqwest::Client,
}

impl HttpPeers {
    pub fn new(client: reqwest::Client) -> Self {
        HttpPeers { client }
    }
}

impl Peers for HttpPeers {
    fn call<'a>(&'a self, url: &'a str, token: &'a str, op: &'a PeerOp) -> PeerCall<'a> {
        Box::pin(async move {
            // A node that cannot be reached is a node the org moves from.
            let answer = self
                .client
                .post(format!("{}/internal/peer", url.trim_end_matches('/')))
                .header(PEER_TOKEN_HEADER, token)
                .json(op)
                .send()
                .await
                .map_err(|_| EngineError::OrgMoving)?;
            if answer.headers().contains_key(ORG_MOVING_HEADER) {
                return Err(EngineError::OrgMoving);
            }
            let status = answer.status();
            if !status.is_success() {
                let body = answer.text().await.unwrap_or_default();
                return Err(EngineError::Internal(format!(
                    "node {url} refused an operation: {status} {body}"
                )));
            }
            answer
                .json::<PeerAnswer>()
                .await
                .map_err(|e| EngineError::Internal(format!("node {url} answered badly: {e}")))
        })
    }
}
