//! Webhooks in the store: the endpoints an org's actor loads and writes,
//! the addresses and secrets a delivery worker signs with, the delivery
//! log, and (in `outbox`) what a worker reads and settles of each
//! endpoint's cursor over the org's event log and of the outbox rows.
//!
//! What is delivered is the event log itself (`store::events`): a commit
//! writes nothing for webhooks. Each endpoint has a cursor, the last event
//! of its org it has been through (migration `0023_webhook_cursors`);
//! only an event that fails, or that must wait behind its task's earlier
//! event, becomes an outbox row of its own, and so does a test event.

use std::collections::HashMap;

use sqlx::FromRow;

use super::{Arg, Result, Store, StoreError};
use crate::crypto::SealedSecret;
use crate::domain::webhooks::{Endpoint, Subscription};
use crate::domain::{OrgId, WebhookId};

mod due;
mod outbox;
#[cfg(test)]
mod tests;

pub use due::{DueLog, DueRow};
pub(super) use outbox::{settle_in, SettleArgs};
pub use outbox::{AfterAttempt, NewRow, Settled, Turn, LOG_KEPT};

/// An endpoint's `events` column: the names it subscribed to.
fn subscription(events: &str) -> Result<Subscription> {
    let names: Vec<String> = serde_json::from_str(events)
        .map_err(|e| StoreError::Corrupt(format!("webhook events: {e}")))?;
    Subscription::parse(&names).map_err(StoreError::Corrupt)
}

#[derive(FromRow)]
struct EndpointRow {
    webhook_id: String,
    url: String,
    events: String,
    description: Option<String>,
    active: i64,
    created_at: i64,
}

impl TryFrom<EndpointRow> for Endpoint {
    type Error = StoreError;

    fn try_from(r: EndpointRow) -> Result<Self> {
        Ok(Endpoint {
            webhook_id: super::rows::webhook_id(&r.webhook_id)?,
            subscription: subscription(&r.events)?,
            url: r.url,
            description: r.description,
            active: r.active != 0,
            created_at: r.created_at,
        })
    }
}

/// Where an endpoint's events go and the secrets that sign them.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub active: bool,
    pub subscription: Subscription,
    pub secret: SealedSecret,
    /// The secret before the last rotation, while it still signs.
    pub previous: Option<(SealedSecret, i64)>,
}

#[derive(FromRow)]
struct TargetRow {
    org_id: String,
    webhook_id: String,
    url: String,
    active: i64,
    events: String,
    secret: Vec<u8>,
    secret_key_id: String,
    previous_secret: Option<Vec<u8>>,
    previous_secret_key_id: Option<String>,
    previous_until: Option<i64>,
}

impl TryFrom<TargetRow> for ((OrgId, WebhookId), Target) {
    type Error = StoreError;

    fn try_from(r: TargetRow) -> Result<Self> {
        let org = super::rows::org_id(&r.org_id)?;
        let endpoint = (org, super::rows::webhook_id(&r.webhook_id)?);
        let previous = match (
            r.previous_secret,
            r.previous_secret_key_id,
            r.previous_until,
        ) {
            (Some(bytes), Some(master_key_id), Some(until)) => Some((
                SealedSecret {
                    master_key_id,
                    bytes,
                },
                until,
            )),
            _ => None,
        };
        let target = Target {
            subscription: subscription(&r.events)?,
            url: r.url,
            active: r.active != 0,
            secret: SealedSecret {
                master_key_id: r.secret_key_id,
                bytes: r.secret,
            },
            previous,
        };
        Ok((endpoint, target))
    }
}

/// One delivery attempt in the log.
#[derive(Debug, Clone, FromRow)]
pub struct DeliveryRecord {
    pub delivery_id: String,
    pub event_id: String,
    #[sqlx(rename = "type")]
    pub event_type: String,
    pub attempt: i64,
    pub status_code: Option<i64>,
    pub error: Option<String>,
    /// At most 1 KiB of the receiver's answer.
    pub response: Option<String>,
    pub at: i64,
    pub next_attempt_at: Option<i64>,
}

/// A stored secret that a rotation may have to re-seal: the endpoint, and
/// whether it is the previous secret.
pub type SecretSlot = (OrgId, WebhookId, bool, SealedSecret);

#[derive(FromRow)]
struct SecretRow {
    org_id: String,
    webhook_id: String,
    previous: i64,
    bytes: Vec<u8>,
    key_id: String,
}

impl Store {
    /// The org's endpoints, for its actor.
    pub async fn org_webhooks(&self, org: OrgId) -> Result<Vec<Endpoint>> {
        let rows: Vec<EndpointRow> = self
            .org_rows(
                "SELECT webhook_id, url, events, description, active, created_at FROM webhooks \
                 WHERE org_id = $1 ORDER BY created_at, webhook_id",
                org,
            )
            .await?;
        super::records(rows)
    }

    /// An endpoint's address and secrets; `None` once it is deleted.
    pub async fn webhook_target(&self, org: OrgId, webhook: WebhookId) -> Result<Option<Target>> {
        Ok(self
            .webhook_targets(&[(org, webhook)])
            .await?
            .remove(&webhook))
    }

    /// The addresses and secrets of those of the endpoints (each of its
    /// org) that are not deleted, by endpoint, in one read.
    pub async fn webhook_targets(
        &self,
        endpoints: &[(OrgId, WebhookId)],
    ) -> Result<HashMap<WebhookId, Target>> {
        let orgs: Vec<OrgId> = endpoints.iter().map(|(o, _)| *o).collect();
        let ids: Vec<WebhookId> = endpoints.iter().map(|(_, w)| *w).collect();
        let orgs = serde_json::to_string(&orgs).expect("ids serialize");
        let ids = serde_json::to_string(&ids).expect("ids serialize");
        let rows: Vec<TargetRow> = self
            .fetch_all(
                &format!(
                    "SELECT org_id, webhook_id, url, active, events, secret, secret_key_id, \
                     previous_secret, previous_secret_key_id, previous_until FROM webhooks \
                     WHERE org_id IN ({}) AND webhook_id IN ({})",
                    outbox::listed(self, 1),
                    outbox::listed(self, 2)
                ),
                vec![Arg::Text(orgs), Arg::Text(ids)],
            )
            .await?;
        let mut targets = HashMap::new();
        for r in rows {
            let (endpoint, target) = r.try_into()?;
            if endpoints.contains(&endpoint) {
                targets.insert(endpoint.1, target);
            }
        }
        Ok(targets)
    }

    /// The endpoint's latest `limit` attempts, newest first.
    pub async fn webhook_deliveries(
        &self,
        org: OrgId,
        webhook: WebhookId,
        limit: i64,
    ) -> Result<Vec<DeliveryRecord>> {
        self.fetch_all(
            "SELECT delivery_id, event_id, type, attempt, status_code, error, response, at, \
             next_attempt_at FROM webhook_deliveries WHERE org_id = $1 AND webhook_id = $2 \
             ORDER BY at DESC, delivery_id DESC LIMIT $3",
            vec![
                Arg::Text(org.to_string()),
                Arg::Text(webhook.to_string()),
                Arg::Int(limit),
            ],
        )
        .await
    }

    /// Forgets the attempts made before `before`.
    pub async fn prune_webhook_deliveries(&self, before: i64) -> Result<()> {
        on_pool!(self, pool => {
            sqlx::query("DELETE FROM webhook_deliveries WHERE at < $1")
                .bind(before)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Every stored secret sealed by a master key other than `current`.
    pub async fn webhook_secrets_not_under(&self, current: &str) -> Result<Vec<SecretSlot>> {
        let rows: Vec<SecretRow> = self
            .fetch_all(
                "SELECT org_id, webhook_id, CAST(0 AS BIGINT) AS previous, secret AS bytes, \
                 secret_key_id AS key_id FROM webhooks WHERE secret_key_id <> $1 \
                 UNION ALL SELECT org_id, webhook_id, CAST(1 AS BIGINT), previous_secret, \
                 previous_secret_key_id FROM webhooks WHERE previous_secret IS NOT NULL \
                 AND previous_secret_key_id <> $1",
                vec![Arg::Text(current.to_owned())],
            )
            .await?;
        rows.into_iter()
            .map(|r| {
                let org = super::rows::org_id(&r.org_id)?;
                let webhook = super::rows::webhook_id(&r.webhook_id)?;
                let sealed = SealedSecret {
                    master_key_id: r.key_id,
                    bytes: r.bytes,
                };
                Ok((org, webhook, r.previous != 0, sealed))
            })
            .collect()
    }

    /// Replaces a stored secret's seal, if it is still `old`; `false` when
    /// something else changed it first (a rotation of the endpoint's
    /// secret).
    pub async fn reseal_webhook_secret(
        &self,
        (org, webhook, previous, old): &SecretSlot,
        new: &SealedSecret,
    ) -> Result<bool> {
        let sql = if *previous {
            "UPDATE webhooks SET previous_secret = $4, previous_secret_key_id = $5 \
             WHERE org_id = $1 AND webhook_id = $2 AND previous_secret = $3"
        } else {
            "UPDATE webhooks SET secret = $4, secret_key_id = $5 \
             WHERE org_id = $1 AND webhook_id = $2 AND secret = $3"
        };
        let done = on_pool!(self, pool => {
            sqlx::query(sql)
                .bind(org.to_string())
                .bind(webhook.to_string())
                .bind(&old.bytes)
                .bind(&new.bytes)
                .bind(&new.master_key_id)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(done == 1)
    }
}
