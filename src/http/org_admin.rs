//! Tags, members, self and teams.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;
use taskq_actors::domain::admin::{MemberView, Tag, Team};
use taskq_actors::org::QuotaView;

use super::error::ApiError;
use super::extract::{Auth, JsonBody};
use super::AppState;

pub async fn quota(
    State(state): State<AppState>,
    Auth(caller): Auth,
) -> Result<Json<QuotaView>, ApiError> {
    Ok(Json(state.engine.quota(&caller).await?))
}

pub async fn send_feedback(
    State(state): State<AppState>,
    Auth(caller): Auth,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let created = state.engine.send_feedback(&caller, &body).await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

pub async fn list_tags(
    State(state): State<AppState>,
    Auth(caller): Auth,
) -> Result<Json<Vec<Tag>>, ApiError> {
    Ok(Json(state.engine.list_tags(&caller).await?))
}

pub async fn create_tags(
    State(state): State<AppState>,
    Auth(caller): Auth,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let created = state.engine.create_tags(&caller, &body).await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

pub async fn update_tags(
    State(state): State<AppState>,
    Auth(caller): Auth,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(state.engine.update_tags(&caller, &body).await?))
}

pub async fn delete_tags(
    State(state): State<AppState>,
    Auth(caller): Auth,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(state.engine.delete_tags(&caller, &body).await?))
}

pub async fn list_members(
    State(state): State<AppState>,
    Auth(caller): Auth,
) -> Result<Json<Vec<MemberView>>, ApiError> {
    Ok(Json(state.engine.list_members(&caller).await?))
}

pub async fn patch_member(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Path(email): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<MemberView>, ApiError> {
    Ok(Json(
        state.engine.patch_member(&caller, &email, &body).await?,
    ))
}

pub async fn me(
    State(state): State<AppState>,
    Auth(caller): Auth,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(state.engine.me(&caller).await?))
}

pub async fn patch_me(
    State(state): State<AppState>,
    Auth(caller): Auth,
    JsonBody(body): JsonBody,
) -> Result<Json<MemberView>, ApiError> {
    Ok(Json(state.engine.patch_me(&caller, &body).await?))
}

pub async fn list_teams(
    State(state): State<AppState>,
    Auth(caller): Auth,
) -> Result<Json<Vec<Team>>, ApiError> {
    Ok(Json(state.engine.list_teams(&caller).await?))
}

pub async fn get_team(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(state.engine.get_team(&caller, &name).await?))
}

pub async fn create_team(
    State(state): State<AppState>,
    Auth(caller): Auth,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let team = state.engine.create_team(&caller, &body).await?;
    Ok((StatusCode::CREATED, Json(team)).into_response())
}

pub async fn patch_team(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Path(name): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<Team>, ApiError> {
    Ok(Json(state.engine.patch_team(&caller, &name, &body).await?))
}

pub async fn delete_team(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.engine.delete_team(&caller, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn add_team_member(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Path(name): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let membership = state.engine.add_team_member(&caller, &name, &body).await?;
    Ok((StatusCode::CREATED, Json(membership)).into_response())
}

pub async fn remove_team_member(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Path((name, email)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    state
        .engine
        .remove_team_member(&caller, &name, &email)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
