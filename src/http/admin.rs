//! The operator's master-key rotation (it moves key files, beside the
//! engine call), and the test hooks.

use axum::extract::State;
use axum::http::StatusCode;
#[cfg(feature = "test-hooks")]
use axum::Json;
use taskq_actors::api::{MasterKeyRotated, RotateMasterKey};
use taskq_actors::parse_org_id;

use super::error::ApiError;
#[cfg(feature = "test-hooks")]
use super::extract::AdminBody;
use super::extract::{Operator, PathParams};
use super::AppState;

#[cfg(feature = "test-hooks")]
type Answer<T> = Result<Json<T>, ApiError>;

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
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdvanceClock {
    #[schemars(range(min = 0))]
    advance_seconds: i64,
}

#[cfg(feature = "test-hooks")]
impl taskq_actors::api::Decode for AdvanceClock {}

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
    clock.advance(advance.advance_seconds * 1000);
    state.engine.clock_moved();
    Ok(Json(serde_json::json!({
        "now": taskq_actors::clock::format_ms(clock.now_ms())
    })))
}

/// Test hook: runs the retention sweep now and answers once it is done,
/// with the number of tasks it asked to remove.
#[cfg(feature = "test-hooks")]
pub async fn sweep_retention(
    State(state): State<AppState>,
    _: Operator,
) -> Answer<serde_json::Value> {
    let swept = state.engine.sweep_retention().await?;
    Ok(Json(serde_json::json!({ "swept": swept })))
}

/// Test hook: starts a retention sweep of every org in the background,
/// paced as the periodic one, and answers at once.
#[cfg(feature = "test-hooks")]
pub async fn start_paced_sweep(
    State(state): State<AppState>,
    _: Operator,
) -> (StatusCode, Json<serde_json::Value>) {
    state.engine.start_paced_sweep();
    (
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "started": true })),
    )
}

/// Test hook: removes the rows of every deleted org now and answers once
/// they are gone, with the number of orgs.
#[cfg(feature = "test-hooks")]
pub async fn purge_deleted(
    State(state): State<AppState>,
    _: Operator,
) -> Answer<serde_json::Value> {
    let orgs = state.engine.purge_deleted_orgs().await?;
    Ok(Json(serde_json::json!({ "purged": orgs })))
}

/// Test hook: how many more steps the removals of deleted orgs' rows may
/// take before they wait; `null` lets them run.
#[cfg(feature = "test-hooks")]
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemovalHold {
    #[schemars(range(min = 0))]
    steps: Option<u64>,
}

#[cfg(feature = "test-hooks")]
impl taskq_actors::api::Decode for RemovalHold {}

/// Test hook: holds the removals of deleted orgs' rows after `steps` more
/// steps, or lets them run.
#[cfg(feature = "test-hooks")]
pub async fn hold_removals(
    State(state): State<AppState>,
    _: Operator,
    AdminBody(hold): AdminBody<RemovalHold>,
) -> Answer<serde_json::Value> {
    state.engine.hold_removals(hold.steps);
    Ok(Json(serde_json::json!({ "steps": hold.steps })))
}

/// Test hook: how many reads of the store the webhook delivery worker has
/// made, so a test can tell that an idle worker reads nothing.
#[cfg(feature = "test-hooks")]
pub async fn delivery_reads(State(state): State<AppState>, _: Operator) -> Json<serde_json::Value> {
    Json(serde_json::json!({ "reads": state.engine.delivery_reads() }))
}

/// Test hook: how a simulated store outage should be.
#[cfg(feature = "test-hooks")]
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreOutage {
    unavailable: bool,
}

#[cfg(feature = "test-hooks")]
impl taskq_actors::api::Decode for StoreOutage {}

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

/// `GET /admin/orgs/{org_id}/export`: the engine's lines as the body,
/// sent as they are made. An error after the first line cuts the stream
/// short (the status has left), so a reader sees an incomplete last line.
pub async fn export_org(
    State(state): State<AppState>,
    _: Operator,
    PathParams(org_id): PathParams<String>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    let mut lines = state.engine.export_org(parse_org_id(&org_id)?).await?;
    let stream = futures::stream::poll_fn(move |cx| {
        lines.poll_recv(cx).map(|line| {
            line.map(|line| {
                line.map(axum::body::Bytes::from).map_err(|e| {
                    tracing::warn!(error = %e, "an export stopped early");
                    std::io::Error::other(e.to_string())
                })
            })
        })
    });
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(stream),
    )
        .into_response())
}

/// Makes a new master key current and re-wraps every data key with it.
/// Requests keep being served throughout. A rotation the keys' source
/// cannot take answers 409 with its one-line reason; a failure of the key
/// files is logged with its cause.
pub async fn rotate_master_key(
    state: AppState,
    request: RotateMasterKey,
) -> Result<MasterKeyRotated, ApiError> {
    use crate::keyfiles::RotationError;
    crate::keyfiles::rotate(&state.engine, &state.keys, &request.new_key)
        .await
        .map_err(|e| match e {
            RotationError::Engine(e) => ApiError::from(e),
            RotationError::InvalidKey => ApiError::bad_request(e.to_string()),
            RotationError::NotInEnvironment => ApiError::new(StatusCode::CONFLICT, e.to_string()),
            RotationError::Keys { ref cause, .. } => {
                tracing::error!(error = %e, cause = format!("{cause:#}"), "master-key rotation failed");
                ApiError::new(StatusCode::CONFLICT, e.to_string())
            }
        })
}
