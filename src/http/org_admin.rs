//! Tags, members, self, teams, quota and feedback.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use taskq_actors::api::{
    AddTeamMember, CreateTags, DeleteTags, FeedbackFiled, MePatch, MeView, MemberPatch, MemberView,
    NewTeam, QuotaView, SendFeedback, TagView, TagsCreated, TagsDeleted, TagsUpdated, TeamDetail,
    TeamMemberView, TeamPatch, TeamView, UpdateTags,
};

use super::error::ApiError;
use super::extract::{Auth, Body, PathParams};
use super::AppState;

type Answer<T> = Result<Json<T>, ApiError>;
type Created<T> = Result<(StatusCode, Json<T>), ApiError>;

pub async fn quota(State(state): State<AppState>, Auth(caller): Auth) -> Answer<QuotaView> {
    Ok(Json(state.engine.quota(&caller).await?))
}

pub async fn send_feedback(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Body(request): Body<SendFeedback>,
) -> Created<FeedbackFiled> {
    let filed = state.engine.send_feedback(&caller, request).await?;
    Ok((StatusCode::CREATED, Json(filed)))
}

pub async fn list_tags(State(state): State<AppState>, Auth(caller): Auth) -> Answer<Vec<TagView>> {
    Ok(Json(state.engine.list_tags(&caller).await?))
}

pub async fn create_tags(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Body(request): Body<CreateTags>,
) -> Created<TagsCreated> {
    let created = state.engine.create_tags(&caller, request).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

pub async fn update_tags(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Body(request): Body<UpdateTags>,
) -> Answer<TagsUpdated> {
    Ok(Json(state.engine.update_tags(&caller, request).await?))
}

pub async fn delete_tags(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Body(request): Body<DeleteTags>,
) -> Answer<TagsDeleted> {
    Ok(Json(state.engine.delete_tags(&caller, request).await?))
}

pub async fn list_members(
    State(state): State<AppState>,
    Auth(caller): Auth,
) -> Answer<Vec<MemberView>> {
    Ok(Json(state.engine.list_members(&caller).await?))
}

pub async fn patch_member(
    State(state): State<AppState>,
    Auth(caller): Auth,
    PathParams(email): PathParams<String>,
    Body(patch): Body<MemberPatch>,
) -> Answer<MemberView> {
    Ok(Json(
        state.engine.patch_member(&caller, &email, patch).await?,
    ))
}

pub async fn me(State(state): State<AppState>, Auth(caller): Auth) -> Answer<MeView> {
    Ok(Json(state.engine.me(&caller).await?))
}

pub async fn patch_me(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Body(patch): Body<MePatch>,
) -> Answer<MemberView> {
    Ok(Json(state.engine.patch_me(&caller, patch).await?))
}

pub async fn list_teams(
    State(state): State<AppState>,
    Auth(caller): Auth,
) -> Answer<Vec<TeamView>> {
    Ok(Json(state.engine.list_teams(&caller).await?))
}

pub async fn get_team(
    State(state): State<AppState>,
    Auth(caller): Auth,
    PathParams(name): PathParams<String>,
) -> Answer<TeamDetail> {
    Ok(Json(state.engine.get_team(&caller, &name).await?))
}

pub async fn create_team(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Body(team): Body<NewTeam>,
) -> Created<TeamView> {
    let team = state.engine.create_team(&caller, team).await?;
    Ok((StatusCode::CREATED, Json(team)))
}

pub async fn patch_team(
    State(state): State<AppState>,
    Auth(caller): Auth,
    PathParams(name): PathParams<String>,
    Body(patch): Body<TeamPatch>,
) -> Answer<TeamView> {
    Ok(Json(state.engine.patch_team(&caller, &name, patch).await?))
}

pub async fn delete_team(
    State(state): State<AppState>,
    Auth(caller): Auth,
    PathParams(name): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    state.engine.delete_team(&caller, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn add_team_member(
    State(state): State<AppState>,
    Auth(caller): Auth,
    PathParams(name): PathParams<String>,
    Body(request): Body<AddTeamMember>,
) -> Created<TeamMemberView> {
    let membership = state
        .engine
        .add_team_member(&caller, &name, request)
        .await?;
    Ok((StatusCode::CREATED, Json(membership)))
}

pub async fn remove_team_member(
    State(state): State<AppState>,
    Auth(caller): Auth,
    PathParams((name, email)): PathParams<(String, String)>,
) -> Result<StatusCode, ApiError> {
    state
        .engine
        .remove_team_member(&caller, &name, &email)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
