//! `GET /events`: an org's event stream as Server-Sent Events (CONTRACT
//! §10). The engine decides what the stream holds; here its items are
//! written in the SSE format, and the stream's query and `Last-Event-ID`
//! read. Everything a stream has ready when it wakes goes out as one body
//! chunk: a chunk per event cost a write per event per stream, which with
//! many streams was most of the server's work.

use std::convert::Infallible;
use std::fmt::Write as _;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use taskq_actors::api::{decode_query, RequestKind, WatchEvents};
use taskq_actors::{EventStream, StreamEvent, StreamItem};

use super::error::ApiError;
use super::extract::Auth;
use super::operation::query_params;
use super::AppState;

pub async fn events(
    State(state): State<AppState>,
    Auth(caller): Auth,
    request: Request,
) -> Result<Response, ApiError> {
    let params = query_params(request.uri().query())?;
    let query = match decode_query::<WatchEvents>(params) {
        Ok(query) => query,
        Err(e) => {
            let refused = state
                .engine
                .reject_as(&caller, RequestKind::Read, None, e)
                .await;
            return Err(refused.into());
        }
    };
    let last_event_id = request
        .headers()
        .get("last-event-id")
        .map(|v| v.to_str().unwrap_or("not text"));
    let stream = state
        .engine
        .watch_events(&caller, query, last_event_id)
        .await?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(sse(stream)),
    )
        .into_response())
}

/// The stream's items in the SSE format, one chunk each.
fn sse(stream: EventStream) -> impl Stream<Item = Result<Bytes, Infallible>> {
    stream::unfold(stream, |mut stream| async move {
        let chunk = match stream.next().await? {
            StreamItem::KeepAlive => Bytes::from_static(b": keep-alive\n\n"),
            StreamItem::Events(events) => Bytes::from(frames(&events)),
        };
        Some((Ok(chunk), stream))
    })
}

/// Events as SSE frames: `id`, `event` when named, `data` (one line: the
/// body is compact JSON), and the blank line that dispatches it.
fn frames(events: &[StreamEvent]) -> String {
    let size: usize = events.iter().map(|e| e.data.len() + 64).sum();
    let mut out = String::with_capacity(size);
    for e in events {
        // Writing to a String does not fail.
        let _ = writeln!(out, "id: {}", e.id);
        if let Some(name) = e.name {
            out.push_str("event: ");
            out.push_str(name);
            out.push('\n');
        }
        out.push_str("data: ");
        out.push_str(&e.data);
        out.push_str("\n\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_framed_as_sse() {
        let events = [
            StreamEvent {
                id: 7,
                name: Some("task.created"),
                data: r#"{"a":1}"#.into(),
            },
            StreamEvent {
                id: 8,
                name: None,
                data: "{}".into(),
            },
        ];
        assert_eq!(
            frames(&events),
            "id: 7\nevent: task.created\ndata: {\"a\":1}\n\nid: 8\ndata: {}\n\n"
        );
    }
}
