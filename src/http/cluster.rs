//! Several nodes on one PostgreSQL: a request for an org that another node
//! owns is forwarded to that node and its answer relayed, long polls and
//! MCP included; the owner authenticates and limits it again, so it is the
//! one authority for its org. A forwarded request is never forwarded again:
//! a node that no longer owns the org answers 503 `org moving`, and the
//! node that forwarded it looks the owner up afresh and tries once more.
//! Each request for an org is counted here (answered, forwarded, received
//! forwarded), so an operator sees whether the balancer in front sends
//! requests to their owners. Where the owner's operator named a public URL
//! the forwarded answer names it (`X-Taskq-Owner`), and clients that can
//! reach the nodes send the org's next requests there.
//!
//! Which org a request belongs to is the operation table's to say
//! ([`OrgOf::of`], from each operation's access and path): an operator's
//! operation on `/admin/orgs/{org_id}/...` belongs to that org (its token is
//! checked here first, so that wrong tokens count against the client that
//! sent them), a member's operation to its key's org, a board page to its
//! session's org, anything else to none, and is served where it arrives.
//! Each route of the table is registered behind its own forwarding
//! ([`forwarded`]), so a request is forwarded only once its route is known.
//!
//! The forwarding node reads no more of a request than the org's key or
//! session; its body goes on as it came, kept for a second try only when it
//! is short ([`KEPT_BODY_BYTES`]). A body over the API's bound is refused
//! where it arrives (declared so, or once it passes the bound), as the
//! owner would refuse it: an owner that answers 413 before reading a long
//! body closes the connection under it, and the forwarding node may see
//! the connection fail before the answer arrives, so relaying the owner's
//! 413 is a race. Nodes reach each other over HTTP/1.1
//! connections kept open between requests ([`peer_client`]): HTTP/2's one
//! multiplexed connection cost the forwarding node more CPU per request
//! (decision 0021).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, RawPathParams, Request, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use axum::{Json, Router};
use futures_util::StreamExt as _;
use taskq_actors::domain::OrgId;
use taskq_actors::{parse_org_id, EngineError, PeerAnswer, PeerCall, PeerOp, Peers, Placement};

use super::error::{close_if_body_unread, ApiError, ORG_MOVING_HEADER};
use super::extract::{body_too_large, Operator, MAX_BODY_BYTES};
use super::operation::Access;
use super::AppState;
use crate::outbound::{self, Proxies};

/// Set on a request one node forwards to another.
pub const FORWARDED_HEADER: &str = "x-taskq-forwarded";

/// Set on an answer forwarded from an org's owner whose operator named a
/// public URL: where the client may send the org's requests directly.
pub const OWNER_HEADER: &str = "x-taskq-owner";

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

/// The path parameter that names an operator's org.
const ORG_PARAM: &str = "org_id";

/// Which org the requests of an operation act for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrgOf {
    /// None: served by the node the request reaches.
    None,
    /// The org its `{org_id}` path parameter names, for the holder of the
    /// operator token.
    Path,
    /// The org of its `X-Api-Key`.
    Key,
    /// The org of its board session.
    Session,
}

impl OrgOf {
    /// What an operation's access and path say.
    pub fn of(access: Access, path: &str) -> OrgOf {
        match access {
            Access::Member(..) => OrgOf::Key,
            Access::BoardSession => OrgOf::Session,
            Access::Operator if has_param(path, ORG_PARAM) => OrgOf::Path,
            // The operator's figures are the whole node's, not an org's.
            Access::Operator | Access::OperatorOrSession | Access::Public => OrgOf::None,
        }
    }
}

fn has_param(path: &str, name: &str) -> bool {
    path.split('/')
        .any(|segment| segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) == Some(name))
}

/// The state of one route's forwarding.
#[derive(Clone)]
struct Forwarding {
    state: AppState,
    org_of: OrgOf,
}

/// `route` behind the forwarding of its requests to their org's node; as
/// it is on a node alone, or for an operation of no org.
pub fn forwarded(
    state: &AppState,
    org_of: OrgOf,
    route: MethodRouter<AppState>,
) -> MethodRouter<AppState> {
    if org_of == OrgOf::None || !state.engine.is_clustered() {
        return route;
    }
    let forwarding = Forwarding {
        state: state.clone(),
        org_of,
    };
    route.route_layer(from_fn_with_state(forwarding, forward_to_owner))
}

/// As [`forwarded`], for every route of `router` (`/mcp`, outside the table).
pub fn forwarded_router(
    state: &AppState,
    org_of: OrgOf,
    router: Router<AppState>,
) -> Router<AppState> {
    if org_of == OrgOf::None || !state.engine.is_clustered() {
        return router;
    }
    let forwarding = Forwarding {
        state: state.clone(),
        org_of,
    };
    router.route_layer(from_fn_with_state(forwarding, forward_to_owner))
}

/// A request for an org another node owns goes there; any other is served
/// here.
async fn forward_to_owner(
    State(Forwarding { state, org_of }): State<Forwarding>,
    request: Request,
    next: Next,
) -> Response {
    let forwarded = request.headers().contains_key(FORWARDED_HEADER);
    let (mut parts, body) = request.into_parts();
    let org = match org_of_request(&state, org_of, &mut parts).await {
        Ok(Some(org)) => org,
        Ok(None) => return next.run(Request::from_parts(parts, body)).await,
        Err(refused) => return refused.into_response(),
    };
    state.engine.count_request(forwarded);
    let url = match state.engine.place(org, forwarded, false).await {
        Ok(Placement::Here) => return next.run(Request::from_parts(parts, body)).await,
        Ok(Placement::At(url)) => url,
        Ok(Placement::Moving) => return moving(),
        Err(e) => return ApiError::from(e).into_response(),
    };
    if declared_length(&parts).is_some_and(|length| length > MAX_BODY_BYTES) {
        // Read up to the bound first, as a node alone does: answering at
        // once, with all of it unread, resets the connection under the
        // client's writing, and the answer may never reach it.
        let _ = axum::body::to_bytes(body, MAX_BODY_BYTES).await;
        return body_too_large().into_response();
    }
    let body = match kept_or_streamed(body).await {
        Ok(Outgoing::Kept(bytes)) => bytes,
        Ok(Outgoing::Streamed(body)) => {
            // Too long to keep for a second try: the answer, `org moving`
            // included, is the client's to act on.
            state.engine.count_forward();
            let (body, over) = bounded(body);
            let answer = forward(&state, org, &url, &parts, body).await;
            return match answer {
                _ if over.load(Ordering::SeqCst) => body_too_large().into_response(),
                Some(answer) => answer,
                None => moving(),
            };
        }
        Err(e) => {
            return ApiError::bad_request(format!("reading the request body: {e}")).into_response()
        }
    };
    state.engine.count_forward();
    if let Some(answer) = forward(&state, org, &url, &parts, body.clone().into()).await {
        return answer;
    }
    // The owner moved or is gone: ask the directory afresh, once.
    match state.engine.place(org, false, true).await {
        Ok(Placement::Here) => next.run(Request::from_parts(parts, Body::from(body))).await,
        Ok(Placement::At(url)) => forward(&state, org, &url, &parts, body.into())
            .await
            .unwrap_or_else(moving),
        Ok(Placement::Moving) => moving(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// A request body of at most this many bytes is kept until the owner has
/// answered, to be sent again if the org moved meanwhile; every operation
/// but the largest creates fits.
const KEPT_BODY_BYTES: usize = 64 * 1024;

/// A request's body as it goes to the owner.
enum Outgoing {
    /// The whole body, no longer than [`KEPT_BODY_BYTES`].
    Kept(Bytes),
    /// What was read of a longer body, followed by the rest as it arrives.
    Streamed(Body),
}

/// Reads `body` up to [`KEPT_BODY_BYTES`], and no further.
async fn kept_or_streamed(body: Body) -> Result<Outgoing, axum::Error> {
    let mut stream = body.into_data_stream();
    let mut kept: Vec<Bytes> = Vec::new();
    let mut length = 0;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        length += chunk.len();
        kept.push(chunk);
        if length > KEPT_BODY_BYTES {
            let read = futures_util::stream::iter(kept.into_iter().map(Ok::<_, axum::Error>));
            return Ok(Outgoing::Streamed(Body::from_stream(read.chain(stream))));
        }
    }
    Ok(Outgoing::Kept(match kept.len() {
        1 => kept.swap_remove(0),
        _ => Bytes::from(kept.concat()),
    }))
}

/// The length a request's `Content-Length` declares, if it does.
fn declared_length(parts: &Parts) -> Option<usize> {
    let value = parts.headers.get(axum::http::header::CONTENT_LENGTH)?;
    value.to_str().ok()?.parse().ok()
}

/// A streamed body as it goes to the owner, ended with an error once it
/// is over [`MAX_BODY_BYTES`] (the flag then set): the rest is not sent.
fn bounded(body: Body) -> (reqwest::Body, Arc<AtomicBool>) {
    let over = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&over);
    let mut length = 0;
    let chunks = body.into_data_stream().map(move |chunk| {
        let chunk = chunk?;
        length += chunk.len();
        if length > MAX_BODY_BYTES {
            flag.store(true, Ordering::SeqCst);
            return Err(axum::Error::new("request body too large"));
        }
        Ok(chunk)
    });
    (reqwest::Body::wrap_stream(chunks), over)
}

/// The owner's answer to a forwarded request; `None` when it was not the
/// owner (`org moving`), could not be reached, or stopped being live (a
/// node that dies or freezes never answers) before it answered.
async fn forward(
    state: &AppState,
    org: OrgId,
    url: &str,
    parts: &Parts,
    body: reqwest::Body,
) -> Option<Response> {
    let answer = tokio::select! {
        answer = send(state, url, parts, body) => answer,
        () = state.engine.until_gone(url) => return None,
    };
    match answer {
        Ok(answer) if !answer.headers().contains_key(ORG_MOVING_HEADER) => {
            Some(with_owner_hint(state, url, answer))
        }
        Ok(_) => None,
        Err(e) => {
            tracing::debug!(org_id = %org, url, error = %e, "forwarding failed");
            None
        }
    }
}

/// The owner's answer, naming its public URL when its operator set one.
fn with_owner_hint(state: &AppState, url: &str, mut answer: Response) -> Response {
    let hint = state.engine.public_url_of(url);
    if let Some(value) = hint.and_then(|u| axum::http::HeaderValue::from_str(&u).ok()) {
        answer.headers_mut().insert(OWNER_HEADER, value);
    }
    answer
}

/// 503 `org moving`: the org is between nodes; retry shortly.
fn moving() -> Response {
    ApiError::from(EngineError::OrgMoving).into_response()
}

/// The org a request belongs to, if it belongs to one; a refusal when
/// it names one without the operator token.
async fn org_of_request(
    state: &AppState,
    org_of: OrgOf,
    parts: &mut Parts,
) -> Result<Option<OrgId>, Response> {
    match org_of {
        OrgOf::None => Ok(None),
        OrgOf::Path => {
            // A path that does not decode, or an id that does not parse,
            // is refused where it arrives, by the operation itself.
            let Ok(params) = RawPathParams::from_request_parts(parts, state).await else {
                return Ok(None);
            };
            let named = params.iter().find(|(name, _)| *name == ORG_PARAM);
            let Some(Ok(org)) = named.map(|(_, id)| parse_org_id(id)) else {
                return Ok(None);
            };
            Operator::from_request_parts(parts, state)
                .await
                .map_err(IntoResponse::into_response)?;
            Ok(Some(org))
        }
        OrgOf::Session => {
            let Some(id) = super::board::session_id(&parts.headers) else {
                return Ok(None);
            };
            state
                .engine
                .board_session_org(id)
                .await
                .map_err(|e| ApiError::from(e).into_response())
        }
        OrgOf::Key => {
            let Some(key) = parts.headers.get("x-api-key").and_then(|v| v.to_str().ok()) else {
                return Ok(None);
            };
            state
                .engine
                .org_of_api_key(key)
                .await
                .map_err(|e| ApiError::from(e).into_response())
        }
    }
}

/// Sends the request to another node and streams its answer back.
async fn send(
    state: &AppState,
    base: &str,
    parts: &Parts,
    body: reqwest::Body,
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
    if let Some(headers) = response.headers_mut() {
        close_if_body_unread(answer.status(), headers);
    }
    Ok(response
        .body(Body::from_stream(answer.bytes_stream()))
        .unwrap_or_else(|_| {
            ApiError::new(StatusCode::BAD_GATEWAY, "bad answer from a node").into_response()
        }))
}

/// What nodes present to each other on `/internal/peer`.
const PEER_TOKEN_HEADER: &str = "x-taskq-peer-token";

/// `POST /internal/peer`: an operation another node asks of this one,
/// for an org this node owns (not part of the public API, and routed only
/// where there is a cluster). The token is checked before the body is
/// read; every refusal is the API's JSON error.
pub async fn peer(
    State(state): State<AppState>,
    request: Request,
) -> Result<Json<PeerAnswer>, ApiError> {
    let token = request
        .headers()
        .get(PEER_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok());
    let peer = state.engine.peer_of(token)?;
    let body = axum::body::to_bytes(request.into_body(), MAX_BODY_BYTES)
        .await
        .map_err(|_| body_too_large())?;
    let op: PeerOp = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("malformed peer operation: {e}")))?;
    Ok(Json(state.engine.run_peer_op(&peer, op).await?))
}

/// HTTP/2 streams one client connection may have open at once. hyper's
/// default is 200, and a client at the bound queues its next requests: the
/// 201st long poll on one connection would hold back every request behind
/// it. The orgs' own bounds (in-flight requests, a key's streams) are the
/// ones that limit a tenant.
const HTTP2_STREAMS: u32 = 8192;

/// The server's HTTP/2 (TLS by ALPN, clear text by prior knowledge) beside
/// HTTP/1.1, on one listener.
pub fn serve_http2<A>(server: &mut axum_server::Server<A>) {
    server
        .http_builder()
        .http2()
        .max_concurrent_streams(HTTP2_STREAMS);
}

/// The client one node reaches the others with: for the operations of the
/// cluster (`timeout`, 30 s), or for the requests it forwards, which may be
/// long polls (none). Its connections stay open between requests.
pub fn peer_client(timeout: Option<Duration>) -> reqwest::Result<reqwest::Client> {
    let mut builder = outbound::client_builder(Proxies::Ignored)
        .connect_timeout(Duration::from_secs(1))
        .redirect(reqwest::redirect::Policy::none());
    if let Some(timeout) = timeout {
        builder = builder.timeout(timeout);
    }
    builder.build()
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

#[cfg(test)]
mod tests {
    use taskq_actors::api::RequestKind;

    use super::*;

    #[test]
    fn the_table_says_which_org_a_request_acts_for() {
        for operation in super::super::operations() {
            let expected = match operation.access {
                Access::Member(..) => OrgOf::Key,
                Access::BoardSession => OrgOf::Session,
                Access::Operator if operation.path.starts_with("/admin/orgs/{org_id}") => {
                    OrgOf::Path
                }
                _ => OrgOf::None,
            };
            assert_eq!(
                operation.org_of(),
                expected,
                "{} {}",
                operation.method,
                operation.path
            );
        }
        let board: Vec<OrgOf> = super::super::operations()
            .into_iter()
            .filter(|o| o.path.starts_with("/board"))
            .map(|o| o.org_of())
            .collect();
        assert!(!board.is_empty() && board.iter().all(|o| *o == OrgOf::Session));
    }

    #[test]
    fn only_the_org_id_parameter_names_an_org() {
        let write = Access::Member(RequestKind::Write, None);
        assert_eq!(
            OrgOf::of(Access::Operator, "/admin/orgs/{org_id}/x"),
            OrgOf::Path
        );
        assert_eq!(OrgOf::of(Access::Operator, "/admin/orgs"), OrgOf::None);
        assert_eq!(
            OrgOf::of(Access::Operator, "/admin/orgs/{org}"),
            OrgOf::None
        );
        assert_eq!(OrgOf::of(Access::Public, "/x/{org_id}"), OrgOf::None);
        assert_eq!(OrgOf::of(write, "/teams/{name}"), OrgOf::Key);
    }
}
