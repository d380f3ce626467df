//! An OpenAI-compatible embeddings API: `POST {base}/embeddings` with
//! `{"model", "input": [texts]}`, answered by `{"data": [{"embedding",
//! "index"}]}`. What may pass if tried later (no connection, a timeout,
//! 5xx, 429) is `Unavailable`; an answer that will not become right by
//! asking again (another 4xx, unreadable JSON, the wrong number of vectors,
//! vectors of different lengths) is `BadAnswer`. The operator chose the
//! URL: proxies from the environment are followed (`outbound.rs` says why
//! each client does or does not).

use std::time::Duration;

use serde::Deserialize;
use taskq_actors::embed::{EmbedError, EmbedFuture, Embedder};

use crate::outbound::{self, Proxies};

pub struct EndpointEmbedder {
    client: reqwest::Client,
    url: String,
    /// The model name the endpoint is asked for.
    endpoint_model: String,
    /// `endpoint:<model>`, the name vectors are stored under.
    name: String,
    api_key: Option<String>,
}

#[derive(Deserialize)]
struct Answer {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    embedding: Vec<f32>,
    index: usize,
}

impl EndpointEmbedder {
    pub fn new(
        base_url: &str,
        model: String,
        api_key: Option<String>,
    ) -> Result<Self, reqwest::Error> {
        let base_url = base_url.strip_suffix('/').unwrap_or(base_url);
        Ok(Self {
            client: outbound::client_builder(Proxies::FromEnvironment)
                .timeout(Duration::from_secs(10))
                .build()?,
            url: format!("{base_url}/embeddings"),
            name: format!("endpoint:{model}"),
            endpoint_model: model,
            api_key,
        })
    }

    async fn ask(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let count = texts.len();
        let body = serde_json::json!({ "model": self.endpoint_model, "input": texts });
        outbound::check_tls(&self.url).map_err(|e| EmbedError::Unavailable(e.to_string()))?;
        let mut request = self.client.post(&self.url).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let unavailable = |e: reqwest::Error| EmbedError::Unavailable(e.to_string());
        let response = request.send().await.map_err(unavailable)?;
        let status = response.status();
        if status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            return Err(EmbedError::Unavailable(format!(
                "the embeddings endpoint answered {status}"
            )));
        }
        if !status.is_success() {
            return Err(EmbedError::BadAnswer(format!(
                "the embeddings endpoint answered {status}"
            )));
        }
        let body = response.bytes().await.map_err(unavailable)?;
        parse(&body, count)
    }
}

impl Embedder for EndpointEmbedder {
    fn model(&self) -> &str {
        &self.name
    }

    fn embed(&self, texts: Vec<String>) -> EmbedFuture<'_> {
        Box::pin(self.ask(texts))
    }
}

/// The vectors in the order of the texts: `data` may come in any order,
/// each item naming its text by `index`.
fn parse(body: &[u8], count: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
    let bad = EmbedError::BadAnswer;
    let mut answer: Answer = serde_json::from_slice(body)
        .map_err(|e| bad(format!("unreadable embeddings answer: {e}")))?;
    if answer.data.len() != count {
        return Err(bad(format!(
            "{} vectors for {count} texts",
            answer.data.len()
        )));
    }
    answer.data.sort_unstable_by_key(|item| item.index);
    if let Some((position, item)) = answer
        .data
        .iter()
        .enumerate()
        .find(|(position, item)| item.index != *position)
    {
        return Err(bad(format!(
            "vector indexes are not 0..{count}: index {} in place {position}",
            item.index
        )));
    }
    let length = answer.data[0].embedding.len();
    if length == 0 || answer.data.iter().any(|i| i.embedding.len() != length) {
        return Err(bad("vectors are empty or of different lengths".into()));
    }
    Ok(answer.data.into_iter().map(|i| i.embedding).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_come_back_in_the_order_of_their_indexes() {
        let body = br#"{"object": "list", "data": [
            {"object": "embedding", "embedding": [0.0, 1.0], "index": 2},
            {"object": "embedding", "embedding": [1.0, 0.0], "index": 0},
            {"object": "embedding", "embedding": [0.5, 0.5], "index": 1}
        ], "model": "m", "usage": {"prompt_tokens": 3, "total_tokens": 3}}"#;
        let vectors = parse(body, 3).unwrap();
        assert_eq!(
            vectors,
            vec![vec![1.0, 0.0], vec![0.5, 0.5], vec![0.0, 1.0]]
        );
    }

    #[test]
    fn a_missing_or_extra_vector_is_a_bad_answer() {
        let body = br#"{"data": [{"embedding": [1.0], "index": 0}]}"#;
        assert!(matches!(parse(body, 2), Err(EmbedError::BadAnswer(_))));
        let body =
            br#"{"data": [{"embedding": [1.0], "index": 0}, {"embedding": [2.0], "index": 1}]}"#;
        assert!(matches!(parse(body, 1), Err(EmbedError::BadAnswer(_))));
    }

    #[test]
    fn a_repeated_index_is_a_bad_answer() {
        let body =
            br#"{"data": [{"embedding": [1.0], "index": 0}, {"embedding": [2.0], "index": 0}]}"#;
        assert!(matches!(parse(body, 2), Err(EmbedError::BadAnswer(_))));
    }

    #[test]
    fn vectors_of_different_lengths_are_a_bad_answer() {
        let body = br#"{"data": [{"embedding": [1.0], "index": 0}, {"embedding": [2.0, 3.0], "index": 1}]}"#;
        assert!(matches!(parse(body, 2), Err(EmbedError::BadAnswer(_))));
    }

    #[test]
    fn malformed_json_is_a_bad_answer() {
        for body in [
            &b"not json"[..],
            br#"{"data": [{"embedding": "abc", "index": 0}]}"#,
        ] {
            assert!(matches!(parse(body, 1), Err(EmbedError::BadAnswer(_))));
        }
    }

    /// A local stand-in for the endpoint: the model name picks the status;
    /// vectors come back in reverse order, each `[text length, 1]`.
    async fn fake_endpoint(
        headers: axum::http::HeaderMap,
        axum::Json(body): axum::Json<serde_json::Value>,
    ) -> (axum::http::StatusCode, axum::Json<serde_json::Value>) {
        let bearer = headers.get("authorization").and_then(|v| v.to_str().ok());
        let status = match body["model"].as_str() {
            _ if bearer != Some("Bearer k") => 401,
            Some("busy") => 429,
            Some("down") => 503,
            Some("wrong") => 400,
            _ => 200,
        };
        let inputs = body["input"].as_array().cloned().unwrap_or_default();
        let data: Vec<_> = (inputs.iter().enumerate().rev())
            .map(|(index, text)| {
                let length = text.as_str().unwrap_or_default().len() as f32;
                serde_json::json!({ "embedding": [length, 1.0], "index": index })
            })
            .collect();
        (
            axum::http::StatusCode::from_u16(status).unwrap(),
            axum::Json(serde_json::json!({ "data": data })),
        )
    }

    #[tokio::test]
    async fn statuses_sort_into_unavailable_and_bad_answer() {
        crate::install_crypto_provider();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/v1/", listener.local_addr().unwrap());
        let app = axum::Router::new().route("/v1/embeddings", axum::routing::post(fake_endpoint));
        tokio::spawn(async move { axum::serve(listener, app).await });
        let ask = |model: &str| {
            let embedder = EndpointEmbedder::new(&base, model.into(), Some("k".into())).unwrap();
            async move { embedder.embed(vec!["a".into(), "abc".into()]).await }
        };

        assert_eq!(
            ask("ok").await.unwrap(),
            vec![vec![1.0, 1.0], vec![3.0, 1.0]]
        );
        assert!(matches!(ask("busy").await, Err(EmbedError::Unavailable(_))));
        assert!(matches!(ask("down").await, Err(EmbedError::Unavailable(_))));
        assert!(matches!(ask("wrong").await, Err(EmbedError::BadAnswer(_))));

        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", closed.local_addr().unwrap());
        drop(closed);
        let embedder = EndpointEmbedder::new(&base, "ok".into(), None).unwrap();
        let refused = embedder.embed(vec!["a".into()]).await;
        assert!(matches!(refused, Err(EmbedError::Unavailable(_))));
    }

    #[test]
    fn one_trailing_slash_is_dropped_from_the_base_url() {
        crate::install_crypto_provider();
        let embedder = EndpointEmbedder::new("http://127.0.0.1:9/v1/", "m".into(), None).unwrap();
        assert_eq!(embedder.url, "http://127.0.0.1:9/v1/embeddings");
        assert_eq!(embedder.model(), "endpoint:m");
    }
}
