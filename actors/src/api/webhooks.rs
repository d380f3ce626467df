//! Outbound webhooks (CONTRACT §7): the requests that manage an org's
//! endpoints and what they answer. Which addresses a URL may reach is
//! decided by the engine (it resolves the host); here only its shape.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::decode::Result;
use super::{Decode, Timestamp, ValidationError, NO_NUL_PATTERN};
use crate::domain::webhooks::EventType;
use crate::domain::WebhookId;

/// The paid feature of the webhook routes.
pub const WEBHOOKS: &str = "webhooks";
/// The longest URL an endpoint may have.
pub const MAX_WEBHOOK_URL: usize = 2048;

/// An event type an endpoint subscribes to, or `*` for every one
/// (`None`): the one event-type enum's subscribable names, and `*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebhookEvent(pub Option<EventType>);

impl WebhookEvent {
    /// `*`.
    pub const ALL: WebhookEvent = WebhookEvent(None);

    pub fn as_str(self) -> &'static str {
        self.0.map_or("*", EventType::as_str)
    }

    /// `*` or a subscribable type's name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "*" => Some(Self::ALL),
            _ => EventType::subscribable(name).map(|t| Self(Some(t))),
        }
    }
}

impl Serialize for WebhookEvent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for WebhookEvent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown event type {name:?}")))
    }
}

impl JsonSchema for WebhookEvent {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "WebhookEvent".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = std::iter::once("*")
            .chain(EventType::SUBSCRIBABLE.iter().map(|t| t.as_str()))
            .collect();
        schemars::json_schema!({
            "type": "string",
            "enum": names,
            "description": "An event type an endpoint subscribes to, or `*` for every one.",
        })
    }
}

/// `POST /webhooks`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhook {
    /// `https://` or `http://`; a host that resolves to a loopback,
    /// private, link-local or unspecified address is refused.
    #[schemars(
        length(min = 8, max = 2048),
        regex(pattern = r"^[hH][tT][tT][pP][sS]?://[^\s\u0000]+$")
    )]
    pub url: String,
    /// The event types to send, or `*` for all.
    #[schemars(length(min = 1, max = 9))]
    pub events: Vec<WebhookEvent>,
    #[serde(default)]
    #[schemars(length(max = 200), regex(pattern = NO_NUL_PATTERN))]
    pub description: Option<String>,
}

impl Decode for CreateWebhook {
    fn validate(&mut self) -> Result<()> {
        let url = url::Url::parse(&self.url)
            .map_err(|e| ValidationError::field("url", format!("not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ValidationError::field("url", "must be http:// or https://"));
        }
        if url.host().is_none() {
            return Err(ValidationError::field("url", "has no host"));
        }
        let mut seen = Vec::with_capacity(self.events.len());
        self.events.retain(|e| {
            let new = !seen.contains(e);
            seen.push(*e);
            new
        });
        Ok(())
    }
}

/// An endpoint as clients see it (never its secret).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct WebhookView {
    pub webhook_id: WebhookId,
    pub url: String,
    pub events: Vec<String>,
    pub description: Option<String>,
    /// False once the endpoint answered 410 or an event failed for 24
    /// hours: nothing more is sent to it.
    pub active: bool,
    pub created_at: Timestamp,
}

/// `POST /webhooks`: the endpoint and its secret, shown only here.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct WebhookCreated {
    #[serde(flatten)]
    pub webhook: WebhookView,
    /// `whsec_` and the base64 of 32 random bytes: the key of every
    /// delivery's signature.
    pub secret: String,
}

/// `GET /webhooks`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct WebhookList {
    pub webhooks: Vec<WebhookView>,
}

/// `POST /webhooks/{webhook_id}/rotate-secret`: the new secret; the old one
/// keeps signing beside it for 24 hours.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct WebhookSecret {
    pub secret: String,
}

/// One delivery attempt.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DeliveryView {
    pub delivery_id: String,
    /// The `webhook-id` header: the same on every attempt of an event.
    pub event_id: String,
    #[serde(rename = "type")]
    pub event_type: String,
    /// 1 for the first attempt.
    pub attempt: i64,
    /// The receiver's status, when it answered.
    pub status_code: Option<i64>,
    /// Why the attempt failed, if it did.
    pub error: Option<String>,
    pub at: Timestamp,
    /// When the event is tried again, if it will be.
    pub next_attempt_at: Option<Timestamp>,
}

/// `GET /webhooks/{webhook_id}/deliveries`: newest first.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DeliveryList {
    pub deliveries: Vec<DeliveryView>,
}

/// `POST /webhooks/{webhook_id}/test`: the event queued for delivery.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct WebhookTestQueued {
    pub event_id: String,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_webhook_needs_an_http_url_and_known_events() {
        let w = CreateWebhook::decode(&json!({
            "url": "https://example.com/hook",
            "events": ["task.completed", "*", "task.completed"],
        }))
        .unwrap();
        assert_eq!(
            w.events,
            [WebhookEvent(Some(EventType::Completed)), WebhookEvent::ALL]
        );
        for url in ["ftp://example.com/x", "https://", "example.com"] {
            assert!(
                CreateWebhook::decode(&json!({"url": url, "events": ["*"]})).is_err(),
                "{url}"
            );
        }
        assert!(CreateWebhook::decode(&json!({"url": "https://a.io", "events": []})).is_err());
        assert!(
            CreateWebhook::decode(&json!({"url": "https://a.io", "events": ["task.moved"]}))
                .is_err()
        );
    }
}
