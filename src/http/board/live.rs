//! `GET /board/live`: what the board's pages poll to stay current.
//!
//! The answer is the org's change mark (`Engine::org_change_mark`): read
//! from memory, not counted against the org's limits, a few dozen bytes.
//! A page fetches itself again only when the mark moves, and that fetch
//! is an ordinary, counted read. So an open board that nothing changes
//! costs one session lookup a second.

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use schemars::JsonSchema;
use serde::Serialize;

use super::super::ApiError;
use super::{session, AppState};

/// The org's change mark.
#[derive(Serialize, JsonSchema)]
pub struct LiveMark {
    /// Changes whenever the org's open tasks change.
    pub mark: String,
}

pub async fn mark(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let Some(session) = session::current(&state.engine, &headers).await? else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "sign in to the board first",
        ));
    };
    let mark = state.engine.org_change_mark(session.caller.org_id);
    let mut response = Json(LiveMark { mark }).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}
