//! The webhook delivery worker: one task per server, off every request's
//! path. It reads due events from the outbox in bounded batches (at most
//! a few per endpoint per read), takes them with a conditional UPDATE so
//! that no other worker (another node) sends them meanwhile, signs each
//! with its endpoint's secrets and hands it to the [`WebhookSender`], at
//! most [`IN_FLIGHT`] at once and [`PER_ENDPOINT`] per endpoint. Then it
//! deletes the event (delivered, or never to be) or sets its next attempt
//! (`domain::webhooks::next_attempt`), and logs the attempt.
//!
//! At least once: an event leaves the outbox only after its receiver
//! answered 2xx (or the endpoint was disabled or deleted); a worker that
//! dies mid-delivery leaves it held for [`HOLD_MS`], then due again.
//! An endpoint that answers 410, or whose event is still failing after 24
//! hours, is disabled by its org's actor (on the org's owner), which also
//! drops its pending events.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use tokio::sync::Semaphore;

use super::{Engine, PeerOp};
use crate::domain::webhooks::{next_attempt, signature_header};
use crate::domain::OrgId;
use crate::error::EngineError;
use crate::store::{AfterAttempt, DeliveryRecord, DueEvent, Target};
use crate::webhook_sender::{Delivery, Sent, WebhookSender, DELIVERY_TIMEOUT};

/// Deliveries in flight at once, all endpoints together.
const IN_FLIGHT: usize = 16;
/// Deliveries in flight at once to one endpoint: a slow one takes no more.
const PER_ENDPOINT: usize = 4;
/// How long a worker holds the events it took: longer than a delivery
/// takes, and short, since an event a dead worker held waits this long.
const HOLD_MS: i64 = 2 * DELIVERY_TIMEOUT.as_millis() as i64;
/// How soon a worker that found nothing looks again: at first soon, then
/// less and less often while nothing comes, so an idle server spends
/// next to nothing on it.
const FIRST_IDLE_POLL: Duration = Duration::from_millis(100);
const LAST_IDLE_POLL: Duration = Duration::from_secs(1);
/// How long the delivery log keeps an attempt.
const KEEP_LOG_MS: i64 = 7 * 24 * 3_600_000;
const PRUNE_EVERY_MS: i64 = 3_600_000;

type EndpointKey = (String, String);

/// The deliveries in flight per endpoint.
#[derive(Default, Clone)]
struct Busy(Arc<Mutex<HashMap<EndpointKey, usize>>>);

impl Busy {
    fn count(&self, key: &EndpointKey) -> usize {
        self.0
            .lock()
            .expect("not poisoned")
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    fn add(&self, key: &EndpointKey) {
        *self
            .0
            .lock()
            .expect("not poisoned")
            .entry(key.clone())
            .or_default() += 1;
    }

    fn done(&self, key: &EndpointKey) {
        let mut map = self.0.lock().expect("not poisoned");
        if let Some(n) = map.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                map.remove(key);
            }
        }
    }
}

impl Engine {
    /// Starts the delivery worker.
    pub(super) fn start_deliveries(
        &self,
        sender: Arc<dyn WebhookSender>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.clone().deliver(sender))
    }

    async fn deliver(self, sender: Arc<dyn WebhookSender>) {
        let permits = Arc::new(Semaphore::new(IN_FLIGHT));
        let busy = Busy::default();
        let mut pruned_at = 0;
        let mut idle = FIRST_IDLE_POLL;
        loop {
            if permits.available_permits() == 0 {
                // Every slot is busy: a slot frees as a delivery ends.
                tokio::time::sleep(FIRST_IDLE_POLL / 4).await;
                continue;
            }
            let started = match self.start_due(&sender, &permits, &busy).await {
                Ok(started) => started,
                Err(e) => {
                    tracing::warn!(error = %e, "webhook deliveries: reading the outbox failed");
                    0
                }
            };
            let now = self.now();
            if now - pruned_at >= PRUNE_EVERY_MS && self.check_store().is_ok() {
                pruned_at = now;
                if let Err(e) = self
                    .inner
                    .store
                    .prune_webhook_deliveries(now - KEEP_LOG_MS)
                    .await
                {
                    tracing::warn!(error = %e, "webhook deliveries: pruning the log failed");
                }
            }
            if started == 0 {
                tokio::time::sleep(idle).await;
                idle = (idle * 2).min(LAST_IDLE_POLL);
            } else {
                idle = FIRST_IDLE_POLL;
            }
        }
    }

    /// Takes the due events there is room for and starts their
    /// deliveries; answers how many it started.
    async fn start_due(
        &self,
        sender: &Arc<dyn WebhookSender>,
        permits: &Arc<Semaphore>,
        busy: &Busy,
    ) -> Result<usize, EngineError> {
        self.check_store()?;
        let room = permits.available_permits();
        if room == 0 {
            return Ok(0);
        }
        let now = self.now();
        let due = self.stored(
            self.inner
                .store
                .due_webhook_events(now, (room * 2) as i64, PER_ENDPOINT as i64)
                .await,
        )?;
        let mut chosen = Vec::new();
        let mut taken: HashMap<EndpointKey, usize> = HashMap::new();
        for e in due {
            let key = (e.org_id.clone(), e.webhook_id.clone());
            let n = taken.entry(key.clone()).or_insert_with(|| busy.count(&key));
            if *n < PER_ENDPOINT && chosen.len() < room {
                *n += 1;
                chosen.push(e);
            }
        }
        if chosen.is_empty() {
            return Ok(0);
        }
        let ids: Vec<i64> = chosen.iter().map(|e| e.outbox_id).collect();
        let held = self.stored(
            self.inner
                .store
                .hold_webhook_events(&ids, now, now + HOLD_MS)
                .await,
        )?;
        let mut targets: HashMap<EndpointKey, Option<Target>> = HashMap::new();
        let mut started = 0;
        for e in chosen.into_iter().filter(|e| held.contains(&e.outbox_id)) {
            let key = (e.org_id.clone(), e.webhook_id.clone());
            let Ok(org) = e.org_id.parse::<OrgId>() else {
                continue;
            };
            if !targets.contains_key(&key) {
                let target =
                    self.stored(self.inner.store.webhook_target(org, &e.webhook_id).await)?;
                targets.insert(key.clone(), target);
            }
            let target = targets.get(&key).cloned().flatten();
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                break;
            };
            busy.add(&key);
            let (engine, sender, busy) = (self.clone(), sender.clone(), busy.clone());
            tokio::spawn(async move {
                engine.deliver_one(&*sender, org, e, target).await;
                busy.done(&key);
                drop(permit);
            });
            started += 1;
        }
        Ok(started)
    }

    /// One attempt at one event, and what follows from it.
    async fn deliver_one(
        &self,
        sender: &dyn WebhookSender,
        org: OrgId,
        event: DueEvent,
        target: Option<Target>,
    ) {
        let attempt = event.attempts + 1;
        let Some(target) = target.filter(|t| t.active) else {
            // The endpoint is gone or disabled: the event goes with it.
            self.finish_attempt(org, &event, AfterAttempt::Done, None)
                .await;
            return;
        };
        let sent = match self.sign(org, &event, &target) {
            Ok((timestamp, signature)) => {
                let headers = [
                    ("webhook-id", event.event_id.clone()),
                    ("webhook-timestamp", timestamp.to_string()),
                    ("webhook-signature", signature),
                ];
                sender
                    .send(Delivery {
                        url: &target.url,
                        headers,
                        body: &event.body,
                    })
                    .await
            }
            Err(e) => Sent {
                error: Some(e),
                ..Sent::default()
            },
        };
        let at = self.now();
        let jitter = rand::thread_rng().gen_range(-1.0..=1.0);
        let gone = sent.status == Some(410);
        let next = (!sent.succeeded() && !gone)
            .then(|| {
                let failed = u32::try_from(attempt).unwrap_or(u32::MAX);
                next_attempt(failed, event.created_at, at, jitter, sent.retry_after)
            })
            .flatten();
        let disable = !sent.succeeded() && next.is_none();
        let error = match (sent.status, sent.error) {
            (_, Some(e)) => Some(e),
            (Some(s), None) if !(200..300).contains(&s) => {
                Some(format!("the receiver answered {s}"))
            }
            _ => None,
        };
        let log = DeliveryRecord {
            delivery_id: uuid::Uuid::now_v7().to_string(),
            event_id: event.event_id.clone(),
            event_type: event.event_type.clone(),
            attempt,
            status_code: sent.status.map(i64::from),
            error,
            response: (!sent.response.is_empty()).then_some(sent.response),
            at,
            next_attempt_at: next,
        };
        let after = match next {
            Some(at) => AfterAttempt::Retry {
                attempts: attempt,
                at,
            },
            None => AfterAttempt::Done,
        };
        self.finish_attempt(org, &event, after, Some(&log)).await;
        if disable {
            tracing::info!(org_id = %org, webhook_id = %event.webhook_id, gone, "webhook disabled");
            let op = PeerOp::DisableWebhook {
                org,
                webhook: event.webhook_id.clone(),
            };
            if let Err(e) = self.on_owner(op).await {
                tracing::warn!(org_id = %org, error = %e, "disabling a webhook failed");
            }
        }
    }

    /// The `webhook-timestamp` and `webhook-signature` of an event: one
    /// signature per secret in use (two while a rotated-out one still
    /// signs).
    fn sign(&self, org: OrgId, event: &DueEvent, target: &Target) -> Result<(i64, String), String> {
        let now = self.now();
        let keyring = self.inner.directory.keyring();
        let opened = |sealed| {
            keyring
                .open_webhook_secret(org, &event.webhook_id, sealed)
                .map_err(|e| format!("the endpoint's secret does not open: {e}"))
        };
        let mut secrets = vec![opened(&target.secret)?];
        if let Some((previous, until)) = &target.previous {
            if *until > now {
                secrets.push(opened(previous)?);
            }
        }
        let timestamp = now / 1000;
        let signature = signature_header(
            secrets.iter().map(Vec::as_slice),
            &event.event_id,
            timestamp,
            event.body.as_bytes(),
        );
        Ok((timestamp, signature))
    }

    async fn finish_attempt(
        &self,
        org: OrgId,
        event: &DueEvent,
        after: AfterAttempt,
        log: Option<&DeliveryRecord>,
    ) {
        let result = self
            .inner
            .store
            .finish_webhook_attempt(org, &event.webhook_id, event.outbox_id, after, log)
            .await;
        if let Err(e) = result {
            // The event stays held, and is tried again when the hold ends.
            tracing::warn!(org_id = %org, error = %e, "recording a webhook delivery failed");
        }
    }
}
