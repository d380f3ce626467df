//! Task routes: parse, call the engine, answer.

use axum::extract::{Query, State};
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
    let created = state.engine.create_tasks(&caller, &body).await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

pub async fn update(
    State(state): State<AppState>,
    Auth(caller): Auth,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let updated = state.engine.update_tasks(&caller, &body).await?;
    let status = if updated.partial {
        StatusCode::MULTI_STATUS
    } else {
        StatusCode::OK
    };
    Ok((status, Json(updated)).into_response())
}

pub async fn get(
    State(state): State<AppState>,
    Auth(caller): Auth,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(state.engine.get_tasks(&caller, &body).await?))
}

pub async fn list(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(state.engine.list_tasks(&caller, &params).await?))
}

pub async fn claim(
    State(state): State<AppState>,
    Auth(caller): Auth,
    JsonBody(body): JsonBody,
) -> Result<Json<Option<Value>>, ApiError> {
    Ok(Json(state.engine.claim(&caller, &body).await?))
}
