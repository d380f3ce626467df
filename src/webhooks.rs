//! The webhook sender behind the engine's `WebhookSender` seam: reqwest,
//! no redirects, a 10 s timeout, at most 1 KiB of an answer read. Unless
//! private addresses are allowed, a host is resolved here and every
//! address that is not public (`domain::addresses`) is dropped before a
//! connection is made, so a name that has come to point inside the network
//! since the endpoint was created reaches nothing; an IP literal is checked
//! the same way. Proxies from the environment are never used, private
//! addresses allowed or not: a proxy would resolve and connect in the
//! sender's place (see `outbound.rs`).

use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use taskq_actors::domain::addresses::classify;
use taskq_actors::webhook_sender::{
    Delivery, SendFuture, Sent, WebhookSender, DELIVERY_TIMEOUT, KEPT_RESPONSE_BYTES,
};

use crate::outbound::{self, Proxies};

pub struct HttpWebhookSender {
    client: reqwest::Client,
    allow_private: bool,
}

/// Resolves names to their public addresses only.
struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let found = tokio::net::lookup_host((name.as_str(), 0)).await?;
            let public: Vec<SocketAddr> = found.filter(|a| classify(a.ip()).is_ok()).collect();
            if public.is_empty() {
                return Err(format!("{} has no public address", name.as_str()).into());
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

impl HttpWebhookSender {
    pub fn new(allow_private: bool) -> anyhow::Result<Self> {
        let mut builder = outbound::client_builder(Proxies::Ignored)
            .timeout(DELIVERY_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("taskq-webhooks/", env!("CARGO_PKG_VERSION")));
        if !allow_private {
            builder = builder.dns_resolver(Arc::new(PublicOnly));
        }
        Ok(Self {
            client: builder.build()?,
            allow_private,
        })
    }

    /// Refuses an IP literal that is not public (names are checked by the
    /// resolver), and HTTPS on a machine without CA roots.
    fn check_destination(&self, url: &str) -> Result<(), String> {
        outbound::check_tls(url).map_err(|e| e.to_string())?;
        if self.allow_private {
            return Ok(());
        }
        let parsed = url::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
        let ip = match parsed.host() {
            Some(url::Host::Ipv4(ip)) => ip.into(),
            Some(url::Host::Ipv6(ip)) => ip.into(),
            _ => return Ok(()),
        };
        classify(ip).map_err(|why| format!("{ip} is {}", why.as_str()))
    }

    async fn post(&self, delivery: Delivery<'_>) -> Sent {
        if let Err(e) = self.check_destination(delivery.url) {
            return Sent {
                error: Some(e),
                ..Sent::default()
            };
        }
        let mut request = self
            .client
            .post(delivery.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(delivery.body.to_owned());
        for (name, value) in &delivery.headers {
            request = request.header(*name, value);
        }
        let mut response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                return Sent {
                    error: Some(error_text(&e)),
                    ..Sent::default()
                }
            }
        };
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(retry_after_secs);
        let mut kept = Vec::new();
        // Only the first KiB is read; the rest is never buffered.
        while kept.len() < KEPT_RESPONSE_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => kept.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
        kept.truncate(KEPT_RESPONSE_BYTES);
        Sent {
            status: Some(response.status().as_u16()),
            retry_after,
            response: String::from_utf8_lossy(&kept).into_owned(),
            error: None,
        }
    }
}

/// A `Retry-After` as seconds: a number of them, or an HTTP date.
fn retry_after_secs(value: &str) -> Option<u64> {
    let value = value.trim();
    value.parse().ok().or_else(|| {
        let at = httpdate::parse_http_date(value).ok()?;
        Some(
            at.duration_since(std::time::SystemTime::now())
                .map_or(0, |d| d.as_secs()),
        )
    })
}

fn error_text(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "no answer within 10 seconds".to_owned()
    } else if e.is_connect() {
        let mut text = "could not connect".to_owned();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            text = format!("could not connect: {s}");
            source = s.source();
        }
        text
    } else {
        e.to_string()
    }
}

impl WebhookSender for HttpWebhookSender {
    fn send<'a>(&'a self, delivery: Delivery<'a>) -> SendFuture<'a> {
        Box::pin(self.post(delivery))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(retry_after_secs("120"), Some(120));
        assert_eq!(retry_after_secs(" 7 "), Some(7));
        assert_eq!(retry_after_secs("Wed, 21 Oct 2015 07:28:00 GMT"), Some(0));
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3_600);
        let secs = retry_after_secs(&httpdate::fmt_http_date(later)).unwrap();
        assert!((3_590..=3_600).contains(&secs), "{secs}");
        assert_eq!(retry_after_secs("soon"), None);
    }

    #[test]
    fn literal_addresses_are_checked_unless_private_ones_are_allowed() {
        crate::install_crypto_provider();
        let strict = HttpWebhookSender::new(false).unwrap();
        for refused in [
            "http://127.0.0.1:9/x",
            "http://[::1]/x",
            "http://[64:ff9b::7f00:1]/h",
            "http://[::127.0.0.1]/h",
            "http://[2002:7f00:1::]/h",
            "http://198.18.0.1/h",
            "http://192.0.0.8/h",
        ] {
            assert!(strict.check_destination(refused).is_err(), "{refused}");
        }
        // Plain HTTP: HTTPS also depends on the machine's CA roots.
        assert!(strict.check_destination("http://93.184.216.34/x").is_ok());
        assert!(strict.check_destination("http://example.com/x").is_ok());
        let open = HttpWebhookSender::new(true).unwrap();
        assert!(open.check_destination("http://127.0.0.1:9/x").is_ok());
        assert!(open.check_destination("http://[64:ff9b::7f00:1]/h").is_ok());
    }
}
