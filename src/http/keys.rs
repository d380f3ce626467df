//! A member's own API keys.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;

use super::error::ApiError;
use super::extract::{Auth, JsonBody};
use super::AppState;

pub async fn create(
    State(state): State<AppState>,
    Auth(caller): Auth,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let key = state.engine.create_key(&caller, &body).await?;
    Ok((StatusCode::CREATED, Json(key)).into_response())
}

pub async fn list(
    State(state): State<AppState>,
    Auth(caller): Auth,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(state.engine.list_keys(&caller).await?))
}

pub async fn revoke(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Path(key_id): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.engine.revoke_key(&caller, &key_id).await?;
    Ok(StatusCode::NO_CONTENT)
}
