//! The feedback filter backed by an OpenAI-compatible moderation endpoint:
//! `POST {url}/moderations` with `{"input": text}`; flagged means abusive.
//! An unreachable endpoint or a non-2xx answer means the filter is
//! unavailable, which the engine turns into a 503 with nothing written.
//! The operator chose the URL: proxies from the environment are followed
//! (`outbound.rs` says why each client does or does not).

use std::time::Duration;

use serde_json::{json, Value};
use taskq_actors::filter::{ContentFilter, FilterFuture, FilterUnavailable, Verdict};

use crate::outbound::{self, Proxies};

pub struct ModerationEndpoint {
    client: reqwest::Client,
    url: String,
    model: Option<String>,
    api_key: Option<String>,
}

impl ModerationEndpoint {
    pub fn new(
        base_url: &str,
        model: Option<String>,
        api_key: Option<String>,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            client: outbound::client_builder(Proxies::FromEnvironment)
                .timeout(Duration::from_secs(10))
                .build()?,
            url: format!("{}/moderations", base_url.trim_end_matches('/')),
            model,
            api_key,
        })
    }

    async fn ask(&self, text: &str) -> Result<Verdict, FilterUnavailable> {
        let mut body = json!({ "input": text });
        if let Some(model) = &self.model {
            body["model"] = json!(model);
        }
        outbound::check_tls(&self.url).map_err(|e| FilterUnavailable(e.to_string()))?;
        let mut request = self.client.post(&self.url).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .await
            .map_err(|e| FilterUnavailable(e.to_string()))?;
        if !response.status().is_success() {
            return Err(FilterUnavailable(format!(
                "moderation endpoint answered {}",
                response.status()
            )));
        }
        let answer: Value = response
            .json()
            .await
            .map_err(|e| FilterUnavailable(format!("unreadable moderation answer: {e}")))?;
        let results = answer["results"]
            .as_array()
            .ok_or_else(|| FilterUnavailable("moderation answer has no results".into()))?;
        let flagged = results.iter().any(|r| r["flagged"].as_bool() == Some(true));
        Ok(if flagged {
            Verdict::Abusive
        } else {
            Verdict::Clean
        })
    }
}

impl ContentFilter for ModerationEndpoint {
    fn check<'a>(&'a self, text: &'a str) -> FilterFuture<'a> {
        Box::pin(self.ask(text))
    }
}
