//! The webhook routes (CONTRACT §7): the plan gate, the check of where a
//! URL leads, then one message to the org's actor, which owns the org's
//! endpoints; the delivery log is read from the store. Delivery itself is
//! `deliveries.rs`.

use std::net::IpAddr;
use std::time::Duration;

use super::Engine;
use crate::api::{
    CreateWebhook, DeliveryList, DeliveryView, Timestamp, WebhookCreated, WebhookList,
    WebhookSecret, WebhookTestQueued, WebhookView, WEBHOOKS,
};
use crate::domain::account::Caller;
use crate::domain::addresses::classify;
use crate::domain::webhooks::Endpoint;
use crate::domain::{OrgId, WebhookId};
use crate::error::{EngineError, ValidationError};
use crate::org::{OrgMsg, WebhookMsg};
use crate::store::DeliveryRecord;

/// The delivery log entries an endpoint's listing shows.
const LISTED_DELIVERIES: i64 = 100;
/// How long the check of a new URL waits for its host's addresses.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) fn view(e: &Endpoint) -> WebhookView {
    WebhookView {
        webhook_id: e.webhook_id,
        url: e.url.clone(),
        events: e.subscription.names().to_vec(),
        description: e.description.clone(),
        active: e.active,
        created_at: Timestamp(e.created_at),
    }
}

fn delivery_view(d: DeliveryRecord) -> DeliveryView {
    DeliveryView {
        delivery_id: d.delivery_id,
        event_id: d.event_id,
        event_type: d.event_type,
        attempt: d.attempt,
        status_code: d.status_code,
        error: d.error,
        at: Timestamp(d.at),
        next_attempt_at: d.next_attempt_at.map(Timestamp),
    }
}

/// The endpoint a path names: text that is no id names none of the org's.
fn webhook_id(text: &str) -> Result<WebhookId, EngineError> {
    text.parse()
        .map_err(|_| EngineError::NotFound("webhook not found".into()))
}

fn refused_url(message: impl AsRef<str>) -> EngineError {
    EngineError::Invalid(ValidationError::field("url", message))
}

/// Refuses a URL whose host is, or resolves to, an address that is not
/// public (every address it resolves to must be).
pub(crate) async fn check_url(url: &str) -> Result<(), EngineError> {
    let parsed = url::Url::parse(url).map_err(|e| refused_url(format!("not a URL: {e}")))?;
    let addresses: Vec<IpAddr> = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => vec![ip.into()],
        Some(url::Host::Ipv6(ip)) => vec![ip.into()],
        Some(url::Host::Domain(name)) => {
            let port = parsed.port_or_known_default().unwrap_or(443);
            let lookup = tokio::net::lookup_host((name, port));
            match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
                Ok(Ok(found)) => found.map(|a| a.ip()).collect(),
                Ok(Err(_)) | Err(_) => return Err(refused_url(format!("{name} does not resolve"))),
            }
        }
        None => return Err(refused_url("has no host")),
    };
    if addresses.is_empty() {
        return Err(refused_url("the host has no address"));
    }
    for ip in addresses {
        if let Err(why) = classify(ip) {
            return Err(refused_url(format!(
                "the host is {} ({ip}); webhooks go to public addresses",
                why.as_str()
            )));
        }
    }
    Ok(())
}

impl Engine {
    async fn webhook_request<T: Send + 'static>(
        &self,
        caller: &Caller,
        message: impl Fn(crate::org::Reply<T>) -> WebhookMsg,
    ) -> Result<T, EngineError> {
        self.require_paid_plan(caller, WEBHOOKS).await?;
        self.request(caller.org_id, |reply| OrgMsg::Webhook(message(reply)))
            .await
    }

    pub async fn list_webhooks(&self, caller: &Caller) -> Result<WebhookList, EngineError> {
        let endpoints = self
            .webhook_request(caller, |reply| WebhookMsg::List {
                caller: caller.clone(),
                reply,
            })
            .await?;
        Ok(WebhookList {
            webhooks: endpoints.iter().map(view).collect(),
        })
    }

    pub async fn create_webhook(
        &self,
        caller: &Caller,
        request: CreateWebhook,
    ) -> Result<WebhookCreated, EngineError> {
        self.require_paid_plan(caller, WEBHOOKS).await?;
        if !self.inner.webhooks_allow_private {
            check_url(&request.url).await?;
        }
        // A secret sealed by the current master key commits before a
        // rotation counts what is left under the old one.
        let _wrap = self.inner.wraps.enter();
        let (endpoint, secret) = self
            .webhook_request(caller, |reply| WebhookMsg::Create {
                caller: caller.clone(),
                request: request.clone(),
                reply,
            })
            .await?;
        Ok(WebhookCreated {
            webhook: view(&endpoint),
            secret,
        })
    }

    pub async fn delete_webhook(&self, caller: &Caller, webhook: &str) -> Result<(), EngineError> {
        let webhook = webhook_id(webhook)?;
        self.webhook_request(caller, |reply| WebhookMsg::Delete {
            caller: caller.clone(),
            webhook,
            reply,
        })
        .await
    }

    pub async fn rotate_webhook_secret(
        &self,
        caller: &Caller,
        webhook: &str,
    ) -> Result<WebhookSecret, EngineError> {
        let webhook = webhook_id(webhook)?;
        let _wrap = self.inner.wraps.enter();
        let secret = self
            .webhook_request(caller, |reply| WebhookMsg::RotateSecret {
                caller: caller.clone(),
                webhook,
                reply,
            })
            .await?;
        Ok(WebhookSecret { secret })
    }

    pub async fn test_webhook(
        &self,
        caller: &Caller,
        webhook: &str,
    ) -> Result<WebhookTestQueued, EngineError> {
        let webhook = webhook_id(webhook)?;
        let event_id = self
            .webhook_request(caller, |reply| WebhookMsg::Test {
                caller: caller.clone(),
                webhook,
                reply,
            })
            .await?;
        Ok(WebhookTestQueued { event_id })
    }

    pub async fn webhook_deliveries(
        &self,
        caller: &Caller,
        webhook: &str,
    ) -> Result<DeliveryList, EngineError> {
        let webhook = webhook_id(webhook)?;
        self.webhook_request(caller, |reply| WebhookMsg::Find {
            caller: caller.clone(),
            webhook,
            reply,
        })
        .await?;
        let records = self.stored(
            self.inner
                .store
                .webhook_deliveries(caller.org_id, webhook, LISTED_DELIVERIES)
                .await,
        )?;
        Ok(DeliveryList {
            deliveries: records.into_iter().map(delivery_view).collect(),
        })
    }

    /// The delivery worker's, on the org's owner: no more deliveries to
    /// the endpoint.
    pub(super) async fn disable_webhook_here(
        &self,
        org: OrgId,
        webhook: WebhookId,
    ) -> Result<(), EngineError> {
        self.request(org, |reply| {
            OrgMsg::Webhook(WebhookMsg::Disable { webhook, reply })
        })
        .await
    }
}
