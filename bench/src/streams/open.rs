//! Opening an event stream: a plain connection of its own for `http://`
//! (hyper's connection API, with a receive buffer of the size asked), or
//! reqwest for `https://`; and reading its body chunk by chunk.

use anyhow::Context as _;
use http_body_util::{BodyExt as _, Empty};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, ACCEPT, HOST};
use hyper::Request;
use hyper_util::rt::TokioIo;
use reqwest::{StatusCode, Url};
use tokio::net::TcpSocket;

use super::super::api::{endpoint, error_chain, truncate, CONNECT_TIMEOUT};

/// Opens `GET /events` streams on one server.
pub(super) struct Opener {
    url: Url,
    /// For `http://`: where to connect, and the Host header.
    plain: Option<(String, HeaderValue)>,
    /// For `https://`: a client without a total timeout.
    tls: reqwest::Client,
}

/// An open stream's body.
pub(super) enum Body {
    /// The request's sender is kept with the body it answers.
    Plain {
        body: Incoming,
        _sender: SendRequest<Empty<Bytes>>,
    },
    Tls(reqwest::Response),
}

impl Body {
    /// The body's next bytes; `None` at its end.
    pub(super) async fn chunk(&mut self) -> Result<Option<Bytes>, String> {
        match self {
            Body::Plain { body, .. } => loop {
                match body.frame().await {
                    None => return Ok(None),
                    Some(Err(e)) => return Err(error_chain(&e)),
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            return Ok(Some(data));
                        }
                    }
                }
            },
            Body::Tls(response) => response.chunk().await.map_err(|e| error_chain(&e)),
        }
    }
}

impl Opener {
    pub(super) fn new(base: &str) -> anyhow::Result<Self> {
        let url = endpoint(base, "/events")?;
        let plain = if url.scheme() == "http" {
            let host = url.host_str().context("the URL names no host")?.to_owned();
            let port = url.port_or_known_default().unwrap_or(80);
            let authority = match url.port() {
                Some(port) => format!("{host}:{port}"),
                None => host.clone(),
            };
            let authority = HeaderValue::from_str(&authority).context("invalid host")?;
            Some((format!("{host}:{port}"), authority))
        } else {
            None
        };
        let tls = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .http1_only()
            .build()
            .context("building the HTTP client")?;
        Ok(Opener { url, plain, tls })
    }

    /// A stream answered 200, after `after` when given; with a receive
    /// buffer of `buffer` bytes on a plain connection.
    pub(super) async fn open(
        &self,
        key: &HeaderValue,
        after: Option<i64>,
        buffer: Option<u32>,
    ) -> Result<Body, String> {
        let timed = tokio::time::timeout(CONNECT_TIMEOUT * 3, async {
            let Some((address, host)) = &self.plain else {
                let mut request = self
                    .tls
                    .get(self.url.clone())
                    .header("x-api-key", key)
                    .header(ACCEPT, "text/event-stream");
                if let Some(id) = after {
                    request = request.header("last-event-id", id.to_string());
                }
                let response = request.send().await.map_err(|e| error_chain(&e))?;
                return match response.status() {
                    StatusCode::OK => Ok(Body::Tls(response)),
                    status => {
                        let text = response.text().await.unwrap_or_default();
                        Err(refused(status, &text))
                    }
                };
            };
            let sender = connect(address, buffer).await?;
            let mut request = Request::get(self.url.path())
                .header(HOST, host.clone())
                .header("x-api-key", key.clone())
                .header(ACCEPT, "text/event-stream");
            if let Some(id) = after {
                request = request.header("last-event-id", id.to_string());
            }
            let request = request.body(Empty::new()).map_err(|e| e.to_string())?;
            let mut sender = sender;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| error_chain(&e))?;
            match response.status() {
                StatusCode::OK => Ok(Body::Plain {
                    body: response.into_body(),
                    _sender: sender,
                }),
                status => {
                    let text = match response.into_body().collect().await {
                        Ok(body) => String::from_utf8_lossy(&body.to_bytes()).into_owned(),
                        Err(e) => error_chain(&e),
                    };
                    Err(refused(status, &text))
                }
            }
        });
        timed
            .await
            .map_err(|_| "opening the stream timed out".to_owned())?
    }
}

fn refused(status: StatusCode, text: &str) -> String {
    truncate(&format!("HTTP {}: {}", status.as_u16(), text.trim()))
}

/// A plain HTTP/1.1 connection to `address`, with a receive buffer of
/// `buffer` bytes when given.
async fn connect(address: &str, buffer: Option<u32>) -> Result<SendRequest<Empty<Bytes>>, String> {
    let to = tokio::net::lookup_host(address)
        .await
        .map_err(|e| format!("resolving {address}: {e}"))?
        .next()
        .ok_or_else(|| format!("{address} resolves to nothing"))?;
    let socket = if to.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| e.to_string())?;
    if let Some(size) = buffer {
        socket
            .set_recv_buffer_size(size)
            .map_err(|e| format!("setting the receive buffer: {e}"))?;
    }
    let stream = socket
        .connect(to)
        .await
        .map_err(|e| format!("connecting to {address}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| error_chain(&e))?;
    // Drives the connection until the stream's body and sender are dropped
    // or the server closes it.
    tokio::spawn(connection);
    Ok(sender)
}
