//! `GET /board/live`: how the board's pages stay current.
//!
//! Asked with `Accept: text/event-stream`, it is the board's stream
//! (`Engine::watch_board`): a `changed` event at most every half second
//! while the org's tasks change, with the change mark, the changed tasks'
//! ids and the open tasks per status, shared by every board of the org;
//! nothing but a keep-alive comment while nothing changes. The page then
//! fetches only the cards that changed, or itself now and then. Asked
//! otherwise, it is the org's change mark as JSON, which a page without
//! the stream polls. Neither is counted against the org's limits (both
//! read memory); the fetches they lead to are ordinary, counted reads.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use taskq_actors::domain::mark::ChangeMark;
use taskq_actors::{BoardItem, BoardStream, Engine};

use super::super::ApiError;
use super::{session, AppState};

/// What the stream is asked with.
#[derive(Deserialize, JsonSchema)]
pub struct LiveQuery {
    /// The mark the page was made at: when it is not the org's mark any
    /// more, the stream's first event says so.
    pub mark: Option<ChangeMark>,
}

/// The org's change mark.
#[derive(Serialize, JsonSchema)]
pub struct LiveMark {
    /// Changes whenever the org's open tasks change.
    pub mark: ChangeMark,
}

pub async fn mark(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<LiveQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Some(session) = session::current(&state.engine, &headers).await? else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "sign in to the board first",
        ));
    };
    let org = session.caller.org_id;
    if wants_stream(&headers) {
        // A query that does not read (a mark that is not one) asks
        // nothing of the stream.
        let since = query.ok().and_then(|Query(q)| q.mark);
        let stream = state.engine.watch_board(&session.caller, since)?;
        return Ok((
            [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            Body::from_stream(sse(state.engine.clone(), session.id, stream)),
        )
            .into_response());
    }
    let mark = state.engine.org_change_mark(org);
    let mut response = Json(LiveMark { mark }).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// Whether the request accepts an event stream (an `EventSource` sends
/// `Accept: text/event-stream`).
fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.split(';').next().unwrap_or("").trim() == "text/event-stream")
}

/// The notices as SSE frames. At each keep-alive the session is looked up
/// again: a stream ends within one of its key ceasing to work, and the
/// page's reconnection is then refused.
fn sse(
    engine: Engine,
    session: String,
    stream: BoardStream,
) -> impl Stream<Item = Result<Bytes, Infallible>> {
    stream::unfold(
        (engine, session, stream),
        |(engine, session, mut stream)| async move {
            let chunk = match stream.next().await? {
                BoardItem::Changed(data) => Bytes::from(frame(&data)),
                BoardItem::KeepAlive => match engine.board_caller(&session).await {
                    Ok(Some(_)) => Bytes::from_static(b": keep-alive\n\n"),
                    _ => return None,
                },
            };
            Some((Ok(chunk), (engine, session, stream)))
        },
    )
}

/// A `changed` event (its data is compact JSON: one line).
fn frame(data: &str) -> String {
    format!("event: changed\ndata: {data}\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_source_is_told_from_a_fetch() {
        let accept = |v: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
            wants_stream(&headers)
        };
        assert!(accept("text/event-stream"));
        assert!(accept("text/html, text/event-stream;q=0.9"));
        assert!(!accept("*/*"));
        assert!(!accept("application/json"));
        assert!(!wants_stream(&HeaderMap::new()));
        assert_eq!(frame(r#"{"a":1}"#), "event: changed\ndata: {\"a\":1}\n\n");
    }
}
