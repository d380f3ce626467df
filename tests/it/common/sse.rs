//! A Server-Sent Events reader for `GET /events`: opens a stream with a
//! key, a query and perhaps a `Last-Event-ID`, and reads it event by event
//! (comments included) with the parser the load tool uses too
//! (`taskq::process::sse`, as a browser's `EventSource` parses a stream),
//! counting the body chunks it was sent in.

use std::collections::VecDeque;
use std::time::Duration;

use taskq::process::sse;

use super::{StatusCode, TestServer, Value};

/// One dispatched block of the stream.
#[derive(Debug, Clone, PartialEq)]
pub enum SseItem {
    Event(SseEvent),
    /// A comment line (`: ...`): the keep-alive.
    Comment(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    /// The stream's last `id:`, as `EventSource` keeps it.
    pub id: Option<String>,
    /// `None`: an unnamed event (`message` to a browser).
    pub event: Option<String>,
    pub data: Value,
}

impl SseEvent {
    pub fn id(&self) -> i64 {
        self.id
            .as_deref()
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("an event id: {self:?}"))
    }

    pub fn task_id(&self) -> &str {
        self.data["data"]["task_id"].as_str().expect("a task id")
    }
}

pub struct SseStream {
    response: reqwest::Response,
    parser: sse::Parser,
    /// What the chunks read so far completed and was not taken yet.
    ready: VecDeque<SseItem>,
    chunks: usize,
}

impl TestServer {
    /// Opens `GET /events?{query}`; panics unless it answers 200 with an
    /// event stream.
    pub async fn open_events(&self, key: &str, query: &str, last_id: Option<i64>) -> SseStream {
        let response = self.try_open_events(key, query, last_id).await;
        assert_eq!(response.status(), StatusCode::OK, "GET /events?{query}");
        let kind = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(kind.starts_with("text/event-stream"), "{kind}");
        SseStream::of(response)
    }

    /// `GET /events?{query}` as it answers.
    pub async fn try_open_events(
        &self,
        key: &str,
        query: &str,
        last_id: Option<i64>,
    ) -> reqwest::Response {
        let mut request = reqwest::Client::new()
            .get(format!("{}/events?{query}", self.base_url))
            .header("x-api-key", key)
            .header("accept", "text/event-stream");
        if let Some(id) = last_id {
            request = request.header("last-event-id", id.to_string());
        }
        request.send().await.expect("GET /events")
    }
}

impl SseStream {
    /// Reads an answer that is an event stream.
    pub fn of(response: reqwest::Response) -> SseStream {
        SseStream {
            response,
            parser: sse::Parser::default(),
            ready: VecDeque::new(),
            chunks: 0,
        }
    }

    /// The next event or comment; `None` once the server ended the stream.
    /// Panics when nothing comes within `within`.
    pub async fn next(&mut self, within: Duration) -> Option<SseItem> {
        loop {
            if let Some(item) = self.ready.pop_front() {
                return Some(item);
            }
            let chunk = tokio::time::timeout(within, self.response.chunk())
                .await
                .unwrap_or_else(|_| panic!("nothing on the stream within {within:?}"));
            match chunk {
                Ok(Some(bytes)) => {
                    self.chunks += 1;
                    let ready = &mut self.ready;
                    self.parser
                        .feed(&bytes, |item| ready.push_back(item.into()));
                }
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// How many body chunks arrived so far.
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// The next event, passing over comments.
    pub async fn next_event(&mut self, within: Duration) -> Option<SseEvent> {
        loop {
            match self.next(within).await? {
                SseItem::Event(e) => return Some(e),
                SseItem::Comment(_) => {}
            }
        }
    }

    /// The next `n` events; panics if the stream ends first.
    pub async fn events(&mut self, n: usize) -> Vec<SseEvent> {
        let mut got = Vec::with_capacity(n);
        while got.len() < n {
            match self.next_event(Duration::from_secs(20)).await {
                Some(e) => got.push(e),
                None => panic!("the stream ended after {got:#?}"),
            }
        }
        got
    }

    /// Asserts that nothing but comments arrives within `quiet`.
    pub async fn assert_quiet(&mut self, quiet: Duration) {
        let deadline = tokio::time::Instant::now() + quiet;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return;
            }
            match tokio::time::timeout(left, self.next(quiet)).await {
                Err(_) => return,
                Ok(Some(SseItem::Comment(_))) => {}
                Ok(other) => panic!("expected nothing, got {other:?}"),
            }
        }
    }
}

impl From<sse::Item> for SseItem {
    /// An event's data is JSON on every stream of the server.
    fn from(item: sse::Item) -> Self {
        match item {
            sse::Item::Comment(text) => SseItem::Comment(text),
            sse::Item::Event(e) => {
                let data =
                    serde_json::from_str(&e.data).unwrap_or_else(|err| panic!("{err}: {}", e.data));
                SseItem::Event(SseEvent {
                    id: e.id,
                    event: e.event,
                    data,
                })
            }
        }
    }
}
