//! An agent's connection to the server under test.
//!
//! The load tool runs on the same cores as the server it measures, so what
//! it spends per request is taken from the server. reqwest's pooled client
//! costs about a third of the tool's CPU per cycle on work an agent with
//! one keep-alive connection does not need: a pool checkout per request,
//! the URL and connector cloned, headers merged. For a plain `http://`
//! target an agent instead keeps one HTTP/1.1 connection made with hyper's
//! connection API and sends each request straight on it; a connection the
//! server closed is made again on the next request. An `https://` target
//! goes through reqwest, which does the TLS.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use reqwest::{Client, StatusCode, Url};
use tokio::net::TcpStream;

use super::api::{error_chain, expected, http_client, CONNECT_TIMEOUT, REQUEST_TIMEOUT};

/// Where a request goes: the URL for reqwest, its path and query for a
/// plain connection.
#[derive(Clone)]
pub(super) struct Target {
    url: Url,
    path: Uri,
}

impl Target {
    pub(super) fn new(url: Url) -> anyhow::Result<Self> {
        let path = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        };
        let path = path
            .parse()
            .with_context(|| format!("invalid request path {path}"))?;
        Ok(Target { url, path })
    }

    pub(super) fn url(&self) -> &Url {
        &self.url
    }
}

/// One agent's way to the server; clones share it.
#[derive(Clone)]
pub(super) enum Connection {
    Plain(Arc<Plain>),
    Tls(Client),
}

impl Connection {
    /// A connection to the server at `base` (its scheme decides which
    /// kind); nothing is connected before the first request.
    pub(super) fn new(base: &Url) -> anyhow::Result<Self> {
        if base.scheme() != "http" {
            return Ok(Connection::Tls(http_client(1)?));
        }
        let host = base.host_str().context("the URL names no host")?;
        let port = base.port_or_known_default().unwrap_or(80);
        let authority = match base.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        Ok(Connection::Plain(Arc::new(Plain {
            address: format!("{host}:{port}"),
            host: HeaderValue::from_str(&authority).context("invalid host")?,
            sender: Mutex::new(None),
        })))
    }

    /// Sends one request with a JSON body (none for a GET) and reads the
    /// whole answer. Succeeds only on status `expect`; the error is a short
    /// description for the report. The latency runs from sending the
    /// request to having read the body.
    pub(super) async fn send(
        &self,
        method: Method,
        target: &Target,
        key: &HeaderValue,
        body: Option<Bytes>,
        expect: StatusCode,
    ) -> Result<(Bytes, Duration), String> {
        let started = Instant::now();
        let (status, answer) = match self {
            Connection::Plain(plain) => {
                tokio::time::timeout(REQUEST_TIMEOUT, plain.send(method, target, key, body))
                    .await
                    .map_err(|_| "request timed out".to_owned())??
            }
            Connection::Tls(client) => {
                let mut request = client
                    .request(method, target.url.clone())
                    .header("x-api-key", key);
                if let Some(body) = body {
                    request = request.header(CONTENT_TYPE, "application/json").body(body);
                }
                let response = request.send().await.map_err(|e| error_chain(&e))?;
                let status = response.status();
                (status, response.bytes().await.map_err(|e| error_chain(&e))?)
            }
        };
        expected(status, answer, expect, started.elapsed())
    }
}

/// An HTTP/1.1 keep-alive connection, kept between requests.
pub(super) struct Plain {
    address: String,
    host: HeaderValue,
    /// The idle connection; taken out while a request is on it, so a
    /// second request at the same time opens a connection of its own.
    sender: Mutex<Option<SendRequest<Full<Bytes>>>>,
}

impl Plain {
    async fn send(
        &self,
        method: Method,
        target: &Target,
        key: &HeaderValue,
        body: Option<Bytes>,
    ) -> Result<(StatusCode, Bytes), String> {
        let idle = self.sender.lock().expect("not poisoned").take();
        let mut sender = match idle {
            Some(sender) if !sender.is_closed() => sender,
            _ => self.connect().await?,
        };
        // The connection takes the next request once it has finished with
        // the last answer; one the server closed meanwhile is made again.
        if sender.ready().await.is_err() {
            sender = self.connect().await?;
            sender.ready().await.map_err(|e| error_chain(&e))?;
        }
        let mut request = Request::builder()
            .method(method)
            .uri(target.path.clone())
            .header(HOST, self.host.clone())
            .header("x-api-key", key.clone());
        if body.is_some() {
            request = request.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        let request = request
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| error_chain(&e))?;
        let status = response.status();
        let answer = response
            .into_body()
            .collect()
            .await
            .map_err(|e| error_chain(&e))?
            .to_bytes();
        *self.sender.lock().expect("not poisoned") = Some(sender);
        Ok((status, answer))
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.address))
            .await
            .map_err(|_| format!("connecting to {} timed out", self.address))?
            .map_err(|e| format!("connecting to {}: {e}", self.address))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| error_chain(&e))?;
        // Drives the connection until the server or the agent closes it;
        // its errors reach the agent through `send_request`.
        tokio::spawn(connection);
        Ok(sender)
    }
}
