//! Extractors that answer in our error shape: the caller behind
//! `X-Api-Key`, the operator behind the bearer token, the test hooks'
//! bodies, and path parameters. The API's operations read their requests
//! in `operation.rs`.

#[cfg(feature = "test-hooks")]
use axum::body::Bytes;
#[cfg(feature = "test-hooks")]
use axum::extract::FromRequest;
use axum::extract::{FromRef, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
#[cfg(feature = "test-hooks")]
use serde_json::Value;
#[cfg(feature = "test-hooks")]
use taskq_actors::api::Decode;
use taskq_actors::Caller;

use super::error::ApiError;
use super::AppState;

/// The authenticated caller of a key-authenticated route.
pub struct Auth(pub Caller);

impl<S> FromRequestParts<S> for Auth
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let state = AppState::from_ref(state);
        let key = parts.headers.get("x-api-key").and_then(|v| v.to_str().ok());
        let caller = state.engine.authenticate(key).await?;
        parts.extensions.insert(caller.clone());
        Ok(Auth(caller))
    }
}

/// Middleware for `/mcp`, a service rather than handlers: the request goes
/// on only with a valid key (its caller in the request's extensions) and a
/// body that is JSON within the size limit; and every refusal, the
/// transport's own included, answers in our error shape.
pub async fn mcp_gate(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: Request,
    next: axum::middleware::Next,
) -> Result<axum::response::Response, ApiError> {
    let (mut parts, body) = request.into_parts();
    Auth::from_request_parts(&mut parts, &state).await?;
    let body = if parts.method == axum::http::Method::POST {
        let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
            .await
            .map_err(|_| body_too_large())?;
        serde_json::from_slice::<serde::de::IgnoredAny>(&bytes)
            .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))?;
        axum::body::Body::from(bytes)
    } else {
        body
    };
    let response = next.run(Request::from_parts(parts, body)).await;
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if response.status().is_success() || is_json {
        return Ok(response);
    }
    let status = response.status();
    let text = axum::body::to_bytes(response.into_body(), 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("refused")
            .to_lowercase()
    } else {
        text
    };
    Err(ApiError::new(status, message))
}

/// The largest request body, as everywhere in the API.
pub(super) const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// 413: the body is over [`MAX_BODY_BYTES`] (its connection closes with it).
pub(super) fn body_too_large() -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
}

/// Proof that the request carries the operator token.
pub struct Operator;

impl<S> FromRequestParts<S> for Operator
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let state = AppState::from_ref(state);
        let Some(expected) = state.admin_token.as_deref() else {
            return Err(ApiError::new(StatusCode::NOT_FOUND, "not found"));
        };
        let given = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        let attempts = &state.operator_attempts;
        attempts
            .check(attempts.client_of(parts), given, expected)
            .map(|()| Operator)
            .map_err(ApiError::operator_refused)
    }
}

/// Proof that the request carries the operator token or the cookie of an
/// operator page session (`GET /admin/stats`, which the page polls).
pub struct OperatorOrSession;

impl<S> FromRequestParts<S> for OperatorOrSession
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let app = AppState::from_ref(state);
        if app.admin_token.is_some()
            && super::ui::session::is_valid(&app.engine, &parts.headers)
                .await
                .unwrap_or(false)
        {
            return Ok(OperatorOrSession);
        }
        Operator::from_request_parts(parts, state)
            .await
            .map(|Operator| OperatorOrSession)
    }
}

#[cfg(feature = "test-hooks")]
/// A JSON body; an empty body reads as `null`. Malformed JSON is a 400
/// naming the problem, whatever the content type says.
async fn json_body<S: Send + Sync>(req: Request, state: &S) -> Result<Value, ApiError> {
    let bytes = Bytes::from_request(req, state)
        .await
        .map_err(|e| ApiError::new(e.status(), e.body_text()))?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))
}

/// The pairs of a query string, percent-decoded; a key or value whose bytes
/// are not UTF-8 is refused rather than read as something else.
pub(super) fn query_pairs(query: &str) -> Result<Vec<(String, String)>, ApiError> {
    let decode = |part: &str| -> Option<String> {
        let spaced = part.replace('+', " ");
        percent_encoding::percent_decode_str(&spaced)
            .decode_utf8()
            .ok()
            .map(|s| s.into_owned())
    };
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode(key).ok_or_else(|| {
                ApiError::bad_request("query: parameter names must be percent-encoded UTF-8")
            })?;
            let value = decode(value).ok_or_else(|| {
                ApiError::bad_request(format!("{key}: must be percent-encoded UTF-8"))
            })?;
            Ok((key, value))
        })
        .collect()
}

#[cfg(feature = "test-hooks")]
/// An operator's request from the JSON body.
pub struct AdminBody<T>(pub T);

#[cfg(feature = "test-hooks")]
impl<S: Send + Sync, T: Decode> FromRequest<S> for AdminBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let value = json_body(req, state).await?;
        Ok(AdminBody(T::decode(&value)?))
    }
}

/// Path parameters; one that does not parse is a 400 in our error shape.
pub struct PathParams<T>(pub T);

impl<S, T> FromRequestParts<S> for PathParams<T>
where
    S: Send + Sync,
    T: serde::de::DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(v)| PathParams(v))
            .map_err(|e| ApiError::new(e.status(), e.body_text()))
    }
}
