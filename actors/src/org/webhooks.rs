//! Webhook endpoints inside the org actor: it holds the org's endpoints
//! (not their secrets, which are sealed in the store) and is the one
//! writer of their rows. What is delivered is the org's event log itself
//! (the delivery worker reads it after each endpoint's cursor), so a
//! change writes nothing for webhooks; only a test event is written as an
//! outbox row of its own.

use super::work::Work;
use super::{Admission, OrgActor, OrgState, Outcome, Reply, WebhookMsg};
use crate::api::CreateWebhook;
use crate::crypto::new_webhook_secret;
use crate::domain::account::{Caller, LimitKey};
use crate::domain::webhooks::{
    secret_text, Endpoint, EventSet, EventType, OutboxEvent, Subscription,
};
use crate::domain::WebhookId;
use crate::error::{EngineError, LimitKind, ValidationError};
use crate::store::WriteOp;

/// How long a rotated-out secret keeps signing.
const ROTATION_OVERLAP_MS: i64 = 24 * 3_600_000;

fn new_event_id() -> String {
    format!("evt_{}", uuid::Uuid::now_v7().simple())
}

fn not_found() -> EngineError {
    EngineError::NotFound("webhook not found".into())
}

impl OrgState {
    fn webhook(&self, id: WebhookId) -> Result<&Endpoint, EngineError> {
        self.webhooks
            .iter()
            .find(|w| w.webhook_id == id)
            .ok_or_else(not_found)
    }
}

impl OrgActor {
    /// Serves a webhook message like any other (writer slot, admission,
    /// change, answer with the commit); none of them awaits anything.
    pub(super) fn serve_webhooks(&self, state: &mut OrgState, msg: WebhookMsg) {
        let read = Some(Admission::read());
        let write = Some(Admission::write());
        match msg {
            WebhookMsg::List { caller, reply } => {
                self.serve_now(state, reply, read, |s, _| self.list_webhooks(s, &caller))
            }
            WebhookMsg::Find {
                caller,
                webhook,
                reply,
            } => self.serve_now(state, reply, read, |s, _| {
                self.find_webhook(s, &caller, webhook)
            }),
            WebhookMsg::Create {
                caller,
                request,
                reply,
            } => self.serve_now(state, reply, write, |s, w| {
                self.create_webhook(s, w, &caller, request)
            }),
            WebhookMsg::Delete {
                caller,
                webhook,
                reply,
            } => self.serve_now(state, reply, write, |s, w| {
                self.delete_webhook(s, w, &caller, webhook)
            }),
            WebhookMsg::RotateSecret {
                caller,
                webhook,
                reply,
            } => self.serve_now(state, reply, write, |s, w| {
                self.rotate_webhook_secret(s, w, &caller, webhook)
            }),
            WebhookMsg::Test {
                caller,
                webhook,
                reply,
            } => self.serve_now(state, reply, write, |s, w| {
                self.test_webhook(s, w, &caller, webhook)
            }),
            WebhookMsg::Disable { webhook, reply } => self.serve_now(state, reply, None, |s, w| {
                self.disable_webhook(s, w, webhook);
                Ok(())
            }),
        }
    }

    /// `serve!` for an operation that does not await.
    pub(super) fn serve_now<T>(
        &self,
        state: &mut OrgState,
        reply: Reply<T>,
        admission: Option<Admission>,
        op: impl FnOnce(&mut OrgState, &mut Work) -> Result<T, EngineError>,
    ) {
        match self.begin(state, admission) {
            Err(e) => {
                let _ = reply.send(Outcome {
                    result: Err(e),
                    commit: None,
                });
            }
            Ok((slot, mut work)) => {
                let result = op(state, &mut work);
                self.finish(state, slot, work, result, reply);
            }
        }
    }

    pub(super) fn list_webhooks(
        &self,
        state: &OrgState,
        caller: &Caller,
    ) -> Result<Vec<Endpoint>, EngineError> {
        state.require_admin(caller)?;
        Ok(state.webhooks.clone())
    }

    /// Checks that the caller may see the endpoint and that it is the org's.
    pub(super) fn find_webhook(
        &self,
        state: &OrgState,
        caller: &Caller,
        id: WebhookId,
    ) -> Result<(), EngineError> {
        state.require_admin(caller)?;
        state.webhook(id).map(|_| ())
    }

    /// A new endpoint and its secret as the client sees it, once. The
    /// secret is sealed by the current master key before it leaves here.
    pub(super) fn create_webhook(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        request: CreateWebhook,
    ) -> Result<(Endpoint, String), EngineError> {
        state.require_admin(caller)?;
        state.check_count(
            LimitKey::Webhooks,
            LimitKind::Webhooks,
            state.webhooks.len() + 1,
        )?;
        let names: Vec<String> = request
            .events
            .iter()
            .map(|e| e.as_str().to_owned())
            .collect();
        let subscription = Subscription::parse(&names)
            .map_err(|e| EngineError::Invalid(ValidationError::field("events", e)))?;
        let endpoint = Endpoint {
            webhook_id: WebhookId::new_v7(),
            url: request.url,
            subscription,
            description: request.description,
            active: true,
            created_at: self.now(),
        };
        let secret = new_webhook_secret();
        let sealed = self.deps.directory.keyring().current().seal_webhook_secret(
            state.org,
            endpoint.webhook_id,
            &secret,
        );
        work.accounts.push(WriteOp::InsertWebhook {
            endpoint: endpoint.clone(),
            secret: sealed,
        });
        state.webhooks.push(endpoint.clone());
        Ok((endpoint, secret_text(&secret)))
    }

    pub(super) fn delete_webhook(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        id: WebhookId,
    ) -> Result<(), EngineError> {
        state.require_admin(caller)?;
        state.webhook(id)?;
        state.webhooks.retain(|w| w.webhook_id != id);
        work.accounts.push(WriteOp::DeleteWebhook(id));
        Ok(())
    }

    /// A new secret; the old one signs beside it for a day.
    pub(super) fn rotate_webhook_secret(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        id: WebhookId,
    ) -> Result<String, EngineError> {
        state.require_admin(caller)?;
        state.webhook(id)?;
        let secret = new_webhook_secret();
        let sealed = self
            .deps
            .directory
            .keyring()
            .current()
            .seal_webhook_secret(state.org, id, &secret);
        work.accounts.push(WriteOp::RotateWebhookSecret {
            webhook_id: id,
            secret: sealed,
            previous_until: self.now() + ROTATION_OVERLAP_MS,
        });
        Ok(secret_text(&secret))
    }

    /// Queues a `webhook.test` event for the endpoint; answers its id.
    pub(super) fn test_webhook(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        id: WebhookId,
    ) -> Result<String, EngineError> {
        state.require_admin(caller)?;
        if !state.webhook(id)?.active {
            return Err(EngineError::Conflict("the webhook is not active".into()));
        }
        let event_id = new_event_id();
        let mut types = EventSet::default();
        types.insert(EventType::Test);
        work.outbox.push(OutboxEvent {
            webhook_id: id,
            event_id: event_id.clone(),
            types,
            task_key: event_id.clone(),
            transition: None,
            created_at: self.now(),
        });
        Ok(event_id)
    }

    /// The delivery worker's: the endpoint answered 410 or an event ran out
    /// of retries. Nothing more is sent to it; a deleted one stays deleted.
    pub(super) fn disable_webhook(&self, state: &mut OrgState, work: &mut Work, id: WebhookId) {
        if let Some(w) = state.webhooks.iter_mut().find(|w| w.webhook_id == id) {
            if w.active {
                w.active = false;
                work.accounts.push(WriteOp::DisableWebhook(id));
            }
        }
    }
}
