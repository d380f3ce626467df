//! The operator API under `/admin`, behind the bearer token.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use taskq_actors::api::{
    AddMember, AddedMember, CreateOrg, CreatedOrg, FeedbackOrg, IdpEnrollment, IdpSync,
    IdpSyncAnswer, IssuedKey, MasterKeyRotated, OrgView, PatchOrg, ResetKey, RotateMasterKey,
    UnblockMember, Unblocked,
};
use taskq_actors::parse_org_id;

use super::error::ApiError;
use super::extract::{AdminBody, Operator, PathParams};
use super::AppState;

type Answer<T> = Result<Json<T>, ApiError>;
type Created<T> = Result<(StatusCode, Json<T>), ApiError>;

pub async fn create_org(
    State(state): State<AppState>,
    _: Operator,
    AdminBody(request): AdminBody<CreateOrg>,
) -> Created<CreatedOrg> {
    let org = state.engine.create_org(request).await?;
    Ok((StatusCode::CREATED, Json(org)))
}

pub async fn get_org(
    State(state): State<AppState>,
    _: Operator,
    PathParams(org_id): PathParams<String>,
) -> Answer<OrgView> {
    Ok(Json(state.engine.get_org(parse_org_id(&org_id)?).await?))
}

pub async fn patch_org(
    State(state): State<AppState>,
    _: Operator,
    PathParams(org_id): PathParams<String>,
    AdminBody(patch): AdminBody<PatchOrg>,
) -> Answer<OrgView> {
    let org = parse_org_id(&org_id)?;
    Ok(Json(state.engine.patch_org(org, patch).await?))
}

pub async fn add_member(
    State(state): State<AppState>,
    _: Operator,
    PathParams(org_id): PathParams<String>,
    AdminBody(request): AdminBody<AddMember>,
) -> Created<AddedMember> {
    let org = parse_org_id(&org_id)?;
    let member = state.engine.add_member(org, request).await?;
    Ok((StatusCode::CREATED, Json(member)))
}

pub async fn reset_key(
    State(state): State<AppState>,
    _: Operator,
    PathParams((org_id, email)): PathParams<(String, String)>,
    AdminBody(request): AdminBody<ResetKey>,
) -> Created<IssuedKey> {
    let org = parse_org_id(&org_id)?;
    let key = state.engine.reset_key(org, &email, request).await?;
    Ok((StatusCode::CREATED, Json(key)))
}

pub async fn set_idp(
    State(state): State<AppState>,
    _: Operator,
    PathParams(org_id): PathParams<String>,
    AdminBody(request): AdminBody<IdpEnrollment>,
) -> Answer<IdpEnrollment> {
    let org = parse_org_id(&org_id)?;
    Ok(Json(state.engine.set_idp_enrollment(org, request).await?))
}

pub async fn idp_sync(
    State(state): State<AppState>,
    _: Operator,
    PathParams(org_id): PathParams<String>,
    AdminBody(request): AdminBody<IdpSync>,
) -> Answer<IdpSyncAnswer> {
    let org = parse_org_id(&org_id)?;
    Ok(Json(state.engine.idp_sync(org, request).await?))
}

pub async fn unblock_member(
    State(state): State<AppState>,
    _: Operator,
    AdminBody(request): AdminBody<UnblockMember>,
) -> Answer<Unblocked> {
    Ok(Json(state.engine.unblock_member(request).await?))
}

pub async fn feedback_org(State(state): State<AppState>, _: Operator) -> Json<FeedbackOrg> {
    Json(state.engine.feedback_org())
}

/// Test hook: panics the org's actor, answers once it has restarted.
#[cfg(feature = "test-hooks")]
pub async fn crash(
    State(state): State<AppState>,
    _: Operator,
    PathParams(org_id): PathParams<String>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    state.engine.crash_org(parse_org_id(&org_id)?).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "crashed": true })),
    ))
}

/// Test hook: how far to move the engine's clock.
#[cfg(feature = "test-hooks")]
pub struct AdvanceClock {
    seconds: i64,
}

#[cfg(feature = "test-hooks")]
impl taskq_actors::api::Decode for AdvanceClock {
    fn decode(body: &serde_json::Value) -> Result<Self, taskq_actors::ValidationError> {
        body.get("advance_seconds")
            .and_then(serde_json::Value::as_i64)
            .filter(|s| *s >= 0)
            .map(|seconds| AdvanceClock { seconds })
            .ok_or_else(|| {
                taskq_actors::ValidationError::field(
                    "advance_seconds",
                    "must be a non-negative integer",
                )
            })
    }
}

/// Test hook: moves the engine's clock forward.
#[cfg(feature = "test-hooks")]
pub async fn advance_clock(
    State(state): State<AppState>,
    _: Operator,
    AdminBody(advance): AdminBody<AdvanceClock>,
) -> Answer<serde_json::Value> {
    use taskq_actors::clock::Clock as _;
    let clock = state
        .test_clock
        .as_ref()
        .ok_or_else(|| ApiError::bad_request("the server's clock is not movable"))?;
    clock.advance(advance.seconds * 1000);
    Ok(Json(serde_json::json!({
        "now": taskq_actors::clock::format_ms(clock.now_ms())
    })))
}

/// Test hook: how a simulated store outage should be.
#[cfg(feature = "test-hooks")]
pub struct StoreOutage {
    unavailable: bool,
}

#[cfg(feature = "test-hooks")]
impl taskq_actors::api::Decode for StoreOutage {
    fn decode(body: &serde_json::Value) -> Result<Self, taskq_actors::ValidationError> {
        body.get("unavailable")
            .and_then(serde_json::Value::as_bool)
            .map(|unavailable| StoreOutage { unavailable })
            .ok_or_else(|| taskq_actors::ValidationError::field("unavailable", "must be a boolean"))
    }
}

/// Test hook: starts or ends a simulated store outage (every write fails
/// as if the disk were full).
#[cfg(feature = "test-hooks")]
pub async fn store_outage(
    State(state): State<AppState>,
    _: Operator,
    AdminBody(outage): AdminBody<StoreOutage>,
) -> Answer<serde_json::Value> {
    state.engine.simulate_store_outage(outage.unavailable);
    Ok(Json(
        serde_json::json!({ "unavailable": outage.unavailable }),
    ))
}

/// Makes a new master key current and re-wraps every data key with it.
/// Requests keep being served throughout.
pub async fn rotate_master_key(
    State(state): State<AppState>,
    _: Operator,
    AdminBody(request): AdminBody<RotateMasterKey>,
) -> Answer<MasterKeyRotated> {
    crate::keyfiles::rotate(&state.engine, &state.keys, &request.new_key)
        .await
        .map(Json)
        .map_err(|e| match e.downcast::<taskq_actors::EngineError>() {
            Ok(e) => ApiError::from(e),
            Err(e) => ApiError::new(StatusCode::CONFLICT, format!("{e:#}")),
        })
}
