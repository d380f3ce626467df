//! Task routes: extract, call the engine, answer.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use taskq_actors::api::{
    ClaimAnswer, ClaimRequest, CreateAnswer, CreateTasks, GetAnswer, GetTasks, ListAnswer,
    ListTasks, SearchAnswer, SearchTasks, UpdateAnswer, UpdateTasks,
};

use super::error::ApiError;
use super::extract::{Auth, Body, Params};
use super::AppState;

pub async fn create(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Body(request): Body<CreateTasks>,
) -> Result<(StatusCode, Json<CreateAnswer>), ApiError> {
    let created = state.engine.create_tasks(&caller, request).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// 207 when any item failed.
pub async fn update(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Body(request): Body<UpdateTasks>,
) -> Result<(StatusCode, Json<UpdateAnswer>), ApiError> {
    let updated = state.engine.update_tasks(&caller, request).await?;
    let status = if updated.partial {
        StatusCode::MULTI_STATUS
    } else {
        StatusCode::OK
    };
    Ok((status, Json(updated)))
}

pub async fn get(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Body(request): Body<GetTasks>,
) -> Result<Json<GetAnswer>, ApiError> {
    Ok(Json(state.engine.get_tasks(&caller, request).await?))
}

pub async fn list(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Params(query): Params<ListTasks>,
) -> Result<Json<ListAnswer>, ApiError> {
    Ok(Json(state.engine.list_tasks(&caller, query).await?))
}

/// The claimed task or `null`; with `count`, `{tasks: [...]}`.
pub async fn claim(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Body(request): Body<ClaimRequest>,
) -> Result<Json<ClaimAnswer>, ApiError> {
    Ok(Json(state.engine.claim_answer(&caller, request).await?))
}

pub async fn search(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Body(request): Body<SearchTasks>,
) -> Result<Json<SearchAnswer>, ApiError> {
    Ok(Json(state.engine.search_tasks(&caller, request).await?))
}
