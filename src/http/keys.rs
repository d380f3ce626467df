//! A member's own API keys, and a BYOK org's data key.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use taskq_actors::api::{CreateKey, KeyCreated, KeyList, OrgDekCreated, OrgDekView, PutOrgDek};

use super::error::ApiError;
use super::extract::{Auth, Body, PathParams};
use super::AppState;

pub async fn create(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Body(request): Body<CreateKey>,
) -> Result<(StatusCode, Json<KeyCreated>), ApiError> {
    let key = state.engine.create_key(&caller, request).await?;
    Ok((StatusCode::CREATED, Json(key)))
}

pub async fn list(
    State(state): State<AppState>,
    Auth(caller): Auth,
) -> Result<Json<KeyList>, ApiError> {
    Ok(Json(state.engine.list_keys(&caller).await?))
}

pub async fn revoke(
    State(state): State<AppState>,
    Auth(caller): Auth,
    PathParams(key_id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    state.engine.revoke_key(&caller, &key_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn org_dek(
    State(state): State<AppState>,
    Auth(caller): Auth,
) -> Result<Json<OrgDekView>, ApiError> {
    Ok(Json(state.engine.org_dek(&caller).await?))
}

pub async fn put_org_dek(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Body(request): Body<PutOrgDek>,
) -> Result<(StatusCode, Json<OrgDekCreated>), ApiError> {
    let created = state.engine.put_org_dek(&caller, request).await?;
    Ok((StatusCode::CREATED, Json(created)))
}
