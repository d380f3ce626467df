//! `GET /events`: an org's event stream as Server-Sent Events (CONTRACT
//! §10). The engine decides what the stream holds; here its items are
//! written in the SSE format, and the stream's query and `Last-Event-ID`
//! read.

use std::convert::Infallible;

use axum::extract::{Request, State};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use taskq_actors::api::{decode_query, RequestKind, WatchEvents};
use taskq_actors::{EventStream, StreamItem};

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
    Ok(Sse::new(sse(stream)).into_response())
}

/// The stream's items as SSE events.
fn sse(stream: EventStream) -> impl Stream<Item = Result<Event, Infallible>> {
    stream::unfold(stream, |mut stream| async move {
        let event = match stream.next().await? {
            StreamItem::KeepAlive => Event::default().comment("keep-alive"),
            StreamItem::Event(e) => {
                let event = Event::default().id(e.id.to_string()).data(e.data);
                match e.name {
                    Some(name) => event.event(name),
                    None => event,
                }
            }
        };
        Some((Ok(event), stream))
    })
}
