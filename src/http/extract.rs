//! Extractors that answer in our error shape: the caller behind
//! `X-Api-Key`, the operator behind the bearer token, and JSON bodies.

use axum::body::Bytes;
use axum::extract::{FromRef, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use serde_json::Value;
use subtle::ConstantTimeEq;
use taskq_actors::domain::account::Caller;

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
        Ok(Auth(state.engine.authenticate(key).await?))
    }
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
        if bool::from(given.as_bytes().ct_eq(expected.as_bytes())) {
            Ok(Operator)
        } else {
            Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid operator token",
            ))
        }
    }
}

/// A JSON body; an empty body reads as `null`. Malformed JSON is a 400
/// naming the problem, whatever the content type says.
pub struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::new(e.status(), e.body_text()))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(JsonBody(Value::Null));
        }
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))
    }
}
