//! The operator API under `/admin`, behind the bearer token.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;

use super::error::ApiError;
use super::extract::{JsonBody, Operator};
use super::AppState;

pub async fn create_org(
    State(state): State<AppState>,
    _: Operator,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let org = state.engine.create_org(&body).await?;
    Ok((StatusCode::CREATED, Json(org)).into_response())
}

pub async fn get_org(
    State(state): State<AppState>,
    _: Operator,
    Path(org_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(state.engine.get_org(&org_id).await?))
}

pub async fn patch_org(
    State(state): State<AppState>,
    _: Operator,
    Path(org_id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(state.engine.patch_org(&org_id, &body).await?))
}

pub async fn add_member(
    State(state): State<AppState>,
    _: Operator,
    Path(org_id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let member = state.engine.add_member(&org_id, &body).await?;
    Ok((StatusCode::CREATED, Json(member)).into_response())
}

pub async fn reset_key(
    State(state): State<AppState>,
    _: Operator,
    Path((org_id, email)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let key = state.engine.reset_key(&org_id, &email, &body).await?;
    Ok((StatusCode::CREATED, Json(key)).into_response())
}

pub async fn set_idp(
    State(state): State<AppState>,
    _: Operator,
    Path(org_id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(state.engine.set_idp_enrollment(&org_id, &body).await?))
}

pub async fn idp_sync(
    State(state): State<AppState>,
    _: Operator,
    Path(org_id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(state.engine.idp_sync(&org_id, &body).await?))
}

pub async fn unblock_member(
    State(state): State<AppState>,
    _: Operator,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(state.engine.unblock_member(&body).await?))
}

pub async fn feedback_org(State(state): State<AppState>, _: Operator) -> Json<Value> {
    Json(state.engine.feedback_org())
}

/// Test hook: panics the org's actor, answers once it has restarted.
#[cfg(feature = "test-hooks")]
pub async fn crash(
    State(state): State<AppState>,
    _: Operator,
    Path(org_id): Path<String>,
) -> Result<Response, ApiError> {
    state.engine.crash_org(&org_id).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "crashed": true })),
    )
        .into_response())
}

/// Test hook: moves the engine's clock forward.
#[cfg(feature = "test-hooks")]
pub async fn advance_clock(
    State(state): State<AppState>,
    _: Operator,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    use taskq_actors::clock::Clock as _;
    let clock = state
        .test_clock
        .as_ref()
        .ok_or_else(|| ApiError::bad_request("the server's clock is not movable"))?;
    let secs = body
        .get("advance_seconds")
        .and_then(Value::as_i64)
        .filter(|s| *s >= 0)
        .ok_or_else(|| ApiError::bad_request("advance_seconds: must be a non-negative integer"))?;
    clock.advance(secs * 1000);
    Ok(Json(serde_json::json!({
        "now": taskq_actors::clock::format_ms(clock.now_ms())
    })))
}
