//! The engine's `ChatModel` seam over an OpenAI-compatible chat API:
//! `POST {base}/chat/completions` with `{"model", "messages",
//! "temperature"}`, answered by `{"choices": [{"message": {"content"}}]}`.
//! What may pass if tried later (no connection, a timeout, 5xx, 429) is
//! `Unavailable`, so a report writer falls back to its template and tries
//! again next time; an answer that will not become right by asking again
//! (another 4xx, unreadable JSON, no choice, no text) is `BadAnswer`.
//! The operator chose the URL: proxies from the environment are followed
//! (`outbound.rs` says why each client does or does not).

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use taskq_actors::llm::{ChatError, ChatFuture, ChatMessage, ChatModel};

use crate::outbound::{self, Proxies};

/// Low: plans and runbooks should follow their sources, not invent.
const TEMPERATURE: f64 = 0.2;

pub struct ChatEndpoint {
    client: reqwest::Client,
    url: String,
    model: String,
    api_key: Option<String>,
}

#[derive(Deserialize)]
struct Answer {
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    message: Message,
}

#[derive(Deserialize)]
struct Message {
    /// Null or absent when the model answered with something other than
    /// text (a refusal, a tool call).
    #[serde(default)]
    content: Value,
}

impl ChatEndpoint {
    /// A client of the API at `base_url` (e.g. `https://host/v1`), asking
    /// `model`, giving up on a call after `timeout`.
    pub fn new(
        base_url: &str,
        model: String,
        api_key: Option<String>,
        timeout: Duration,
    ) -> Result<Self, reqwest::Error> {
        let base_url = base_url.strip_suffix('/').unwrap_or(base_url);
        Ok(Self {
            client: outbound::client_builder(Proxies::FromEnvironment)
                .timeout(timeout)
                .build()?,
            url: format!("{base_url}/chat/completions"),
            model,
            api_key,
        })
    }

    async fn ask(&self, messages: Vec<ChatMessage>) -> Result<String, ChatError> {
        let messages: Vec<Value> = messages
            .into_iter()
            .map(|m| serde_json::json!({ "role": m.role, "content": m.content }))
            .collect();
        let body = serde_json::json!({
            "model": self.model,
            "messages": messages,
            "temperature": TEMPERATURE,
        });
        outbound::check_tls(&self.url).map_err(|e| ChatError::Unavailable(e.to_string()))?;
        let mut request = self.client.post(&self.url).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let unavailable = |e: reqwest::Error| ChatError::Unavailable(e.to_string());
        let response = request.send().await.map_err(unavailable)?;
        let status = response.status();
        if status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            return Err(ChatError::Unavailable(format!(
                "the chat endpoint answered {status}"
            )));
        }
        if !status.is_success() {
            return Err(ChatError::BadAnswer(format!(
                "the chat endpoint answered {status}"
            )));
        }
        let body = response.bytes().await.map_err(unavailable)?;
        parse(&body)
    }
}

impl ChatModel for ChatEndpoint {
    fn complete(&self, messages: Vec<ChatMessage>) -> ChatFuture<'_> {
        Box::pin(self.ask(messages))
    }
}

/// The text of the answer's first choice.
fn parse(body: &[u8]) -> Result<String, ChatError> {
    let bad = ChatError::BadAnswer;
    let answer: Answer =
        serde_json::from_slice(body).map_err(|e| bad(format!("unreadable chat answer: {e}")))?;
    let choice = answer
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| bad("the chat answer has no choices".into()))?;
    match choice.message.content {
        Value::String(text) => Ok(text),
        _ => Err(bad("the chat answer's content is not text".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_choice_is_the_answer() {
        let body = br#"{"id": "x", "object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "first"}, "finish_reason": "stop"},
            {"index": 1, "message": {"role": "assistant", "content": "second"}, "finish_reason": "stop"}
        ], "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}"#;
        assert_eq!(parse(body).unwrap(), "first");
        let empty = br#"{"choices": [{"message": {"content": ""}}]}"#;
        assert_eq!(parse(empty).unwrap(), "");
    }

    #[test]
    fn anything_but_a_text_choice_is_a_bad_answer() {
        for body in [
            &b"not json"[..],
            br#"{"object": "list"}"#,
            br#"{"choices": []}"#,
            br#"{"choices": [{"index": 0}]}"#,
            br#"{"choices": [{"message": {"role": "assistant"}}]}"#,
            br#"{"choices": [{"message": {"content": null, "tool_calls": []}}]}"#,
            br#"{"choices": [{"message": {"content": ["a"]}}]}"#,
        ] {
            assert!(
                matches!(parse(body), Err(ChatError::BadAnswer(_))),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    /// A local stand-in for the endpoint: the model name picks the status
    /// or a delay; the answer echoes the last message's content.
    async fn fake_endpoint(
        headers: axum::http::HeaderMap,
        axum::Json(body): axum::Json<Value>,
    ) -> (axum::http::StatusCode, axum::Json<Value>) {
        let bearer = headers.get("authorization").and_then(|v| v.to_str().ok());
        let status = match body["model"].as_str() {
            _ if bearer != Some("Bearer k") => 401,
            _ if body["temperature"] != 0.2 => 400,
            Some("busy") => 429,
            Some("down") => 503,
            Some("wrong") => 400,
            Some("slow") => {
                tokio::time::sleep(Duration::from_secs(5)).await;
                200
            }
            _ => 200,
        };
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let roles: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
        let last = messages.last().map(|m| m["content"].clone());
        let content = format!("{} {}", roles.join(","), last.unwrap_or_default());
        let answer = serde_json::json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]
        });
        (
            axum::http::StatusCode::from_u16(status).unwrap(),
            axum::Json(answer),
        )
    }

    #[tokio::test]
    async fn statuses_sort_into_unavailable_and_bad_answer() {
        crate::install_crypto_provider();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/v1/", listener.local_addr().unwrap());
        let app =
            axum::Router::new().route("/v1/chat/completions", axum::routing::post(fake_endpoint));
        tokio::spawn(async move { axum::serve(listener, app).await });
        let ask = |model: &str| {
            let endpoint = ChatEndpoint::new(
                &base,
                model.into(),
                Some("k".into()),
                Duration::from_millis(500),
            )
            .unwrap();
            async move {
                let messages = vec![ChatMessage::system("s"), ChatMessage::user("hello")];
                endpoint.complete(messages).await
            }
        };

        assert_eq!(ask("ok").await.unwrap(), "system,user \"hello\"");
        assert!(matches!(ask("busy").await, Err(ChatError::Unavailable(_))));
        assert!(matches!(ask("down").await, Err(ChatError::Unavailable(_))));
        assert!(matches!(ask("slow").await, Err(ChatError::Unavailable(_))));
        assert!(matches!(ask("wrong").await, Err(ChatError::BadAnswer(_))));

        let keyless = ChatEndpoint::new(&base, "ok".into(), None, Duration::from_secs(5)).unwrap();
        let refused = keyless.complete(vec![ChatMessage::user("hi")]).await;
        assert!(matches!(refused, Err(ChatError::BadAnswer(_))));

        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", closed.local_addr().unwrap());
        drop(closed);
        let endpoint = ChatEndpoint::new(&base, "ok".into(), None, Duration::from_secs(5)).unwrap();
        let refused = endpoint.complete(vec![ChatMessage::user("hi")]).await;
        assert!(matches!(refused, Err(ChatError::Unavailable(_))));
    }

    #[test]
    fn one_trailing_slash_is_dropped_from_the_base_url() {
        crate::install_crypto_provider();
        let endpoint = ChatEndpoint::new(
            "http://127.0.0.1:9/v1/",
            "m".into(),
            None,
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(endpoint.url, "http://127.0.0.1:9/v1/chat/completions");
    }
}
