//! Reports and planning: insights, runbooks, standups, the planner, and
//! the operator's recompute.

use axum::extract::State;
use axum::Json;
use taskq_actors::api::{
    InsightsAnswer, InsightsQuery, PlanAnswer, PlanRequest, Recompute, Recomputed, RunbooksAnswer,
    RunbooksQuery, StandupAnswer, StandupQuery,
};
use taskq_actors::parse_org_id;

use super::error::ApiError;
use super::extract::{AdminBody, Auth, Body, Operator, Params, PathParams};
use super::AppState;

type Answer<T> = Result<Json<T>, ApiError>;

pub async fn insights(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Params(_): Params<InsightsQuery>,
) -> Answer<InsightsAnswer> {
    Ok(Json(state.engine.insights(&caller).await?))
}

pub async fn runbooks(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Params(_): Params<RunbooksQuery>,
) -> Answer<RunbooksAnswer> {
    Ok(Json(state.engine.runbooks(&caller).await?))
}

pub async fn standup(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Params(query): Params<StandupQuery>,
) -> Answer<StandupAnswer> {
    Ok(Json(state.engine.standup(&caller, query).await?))
}

pub async fn plan(
    State(state): State<AppState>,
    Auth(caller): Auth,
    Body(request): Body<PlanRequest>,
) -> Answer<PlanAnswer> {
    Ok(Json(state.engine.plan_tasks(&caller, request).await?))
}

pub async fn recompute(
    State(state): State<AppState>,
    _: Operator,
    PathParams(org_id): PathParams<String>,
    AdminBody(request): AdminBody<Recompute>,
) -> Answer<Recomputed> {
    let org = parse_org_id(&org_id)?;
    Ok(Json(state.engine.recompute(org, request).await?))
}
