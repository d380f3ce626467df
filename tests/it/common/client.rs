//! HTTP calls to the server under test: with an API key, with the operator
//! token, or raw (any method, headers and body); answers come back as the
//! status and the parsed JSON body.

use reqwest::Method;

use super::{StatusCode, TestServer, Value};

impl TestServer {
    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url, path)
    }

    /// POST with `X-Api-Key`; transport errors are returned, not panicked on.
    pub async fn try_post(
        &self,
        key: &str,
        path: &str,
        body: Value,
    ) -> Result<(StatusCode, Value), reqwest::Error> {
        let resp = self
            .http
            .post(self.url(path))
            .header("x-api-key", key)
            .json(&body)
            .send()
            .await?;
        let status = resp.status();
        let text = resp.text().await?;
        Ok((status, parse_body(&text)))
    }

    /// Sends a request and returns status and raw body text.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<String>,
    ) -> (StatusCode, String) {
        let mut req = self.http.request(method.clone(), self.url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(body);
        }
        let resp = req.send().await.unwrap_or_else(|e| {
            panic!("{method} {path}: {e}\nserver stderr:\n{}", self.log_tail())
        });
        let status = resp.status();
        let text = resp.text().await.expect("read response body");
        (status, text)
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> (StatusCode, Value) {
        let (status, text) = self
            .raw(method, path, headers, body.map(|b| b.to_string()))
            .await;
        (status, parse_body(&text))
    }

    /// Key-authenticated calls (`X-Api-Key`).
    pub async fn get(&self, key: &str, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, &[("x-api-key", key)], None)
            .await
    }

    pub async fn post(&self, key: &str, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, &[("x-api-key", key)], Some(&body))
            .await
    }

    pub async fn patch(&self, key: &str, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::PATCH, path, &[("x-api-key", key)], Some(&body))
            .await
    }

    pub async fn delete(&self, key: &str, path: &str) -> (StatusCode, Value) {
        self.call(Method::DELETE, path, &[("x-api-key", key)], None)
            .await
    }

    /// An unlabelled counter or gauge from `GET /metrics`.
    pub async fn metric(&self, name: &str) -> Option<u64> {
        let auth = format!("Bearer {}", self.admin_token);
        let (status, text) = self
            .raw(Method::GET, "/metrics", &[("authorization", &auth)], None)
            .await;
        assert_eq!(status, StatusCode::OK, "{text}");
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|n| n.trim().parse().ok())
    }

    /// POST with a raw (possibly malformed) body.
    pub async fn post_raw(&self, key: &str, path: &str, body: &str) -> (StatusCode, String) {
        self.raw(
            Method::POST,
            path,
            &[("x-api-key", key)],
            Some(body.to_string()),
        )
        .await
    }

    /// Operator calls (`Authorization: Bearer <admin token>`).
    pub async fn admin(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let auth = format!("Bearer {}", self.admin_token);
        self.call(method, path, &[("authorization", &auth)], body.as_ref())
            .await
    }

    /// Any method with `X-Api-Key` and a raw (possibly malformed) JSON body.
    pub async fn send_raw(
        &self,
        method: Method,
        key: &str,
        path: &str,
        body: &str,
    ) -> (StatusCode, String) {
        self.raw(method, path, &[("x-api-key", key)], Some(body.to_string()))
            .await
    }
}

fn parse_body(text: &str) -> Value {
    if text.trim().is_empty() {
        return Value::Null;
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(format!("<non-JSON body> {text}")))
}
