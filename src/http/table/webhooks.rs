//! An org's outbound webhooks (paid plans).

use taskq_actors::api::*;
use taskq_actors::Caller;

use super::super::operation::Operation;
use super::super::AppState;

type S = AppState;
type C = Caller;
const WEBHOOK: Option<&str> = Some(WEBHOOKS);

pub(super) fn operations() -> Vec<Operation> {
    vec![
        // ---- outbound webhooks
        Operation::get("/webhooks")
            .doc("list_webhooks", "webhooks", "The org's webhook endpoints (paid plans)")
            .tool("List the org's webhook endpoints: url, subscribed events, whether each is still active (admins and owners, paid plans). Secrets are never shown again.")
            .read_only()
            .reads(WEBHOOK)
            .answer::<WebhookList>(200, "Every endpoint, without secrets")
            .member(|s: S, c: C, (): (), _: NoArguments| async move { s.engine.list_webhooks(&c).await }),
        Operation::post("/webhooks")
            .doc("create_webhook", "webhooks", "Add a webhook endpoint; its signing secret is shown once")
            .tool("Add an endpoint that receives signed task events (task.created, task.claimed, task.completed, task.failed, task.canceled, task.lease_expired, task.unblocked, task.status_changed, or *). Admins and owners, paid plans. Returns the endpoint and its whsec_ secret, shown only this once.")
            .writes(WEBHOOK)
            .body()
            .answer::<WebhookCreated>(201, "The endpoint and its secret")
            .member(|s: S, c: C, (): (), r: CreateWebhook| async move { s.engine.create_webhook(&c, r).await }),
        Operation::delete("/webhooks/{webhook_id}")
            .doc("delete_webhook", "webhooks", "Remove a webhook endpoint and its pending events")
            .tool("Remove a webhook endpoint; its pending events are dropped (admins and owners, paid plans).")
            .writes(WEBHOOK)
            .empty(204, "The endpoint is gone")
            .member(|s: S, c: C, id: String, _: NoArguments| async move { s.engine.delete_webhook(&c, &id).await }),
        Operation::post("/webhooks/{webhook_id}/rotate-secret")
            .doc("rotate_webhook_secret", "webhooks", "A new signing secret; the old one keeps signing for 24 hours")
            .tool("Give a webhook endpoint a new signing secret (returned once); for 24 hours deliveries carry signatures by both the old and the new secret (admins and owners, paid plans).")
            .writes(WEBHOOK)
            .answer::<WebhookSecret>(200, "The new secret")
            .member(|s: S, c: C, id: String, _: NoArguments| async move { s.engine.rotate_webhook_secret(&c, &id).await }),
        Operation::get("/webhooks/{webhook_id}/deliveries")
            .doc("list_webhook_deliveries", "webhooks", "An endpoint's recent delivery attempts, newest first")
            .tool("An endpoint's recent delivery attempts, newest first: event id and type, attempt number, the receiver's status or the error, and when the next attempt is due (admins and owners, paid plans).")
            .read_only()
            .reads(WEBHOOK)
            .answer::<DeliveryList>(200, "The attempts, newest first")
            .member(|s: S, c: C, id: String, _: NoArguments| async move { s.engine.webhook_deliveries(&c, &id).await }),
        Operation::post("/webhooks/{webhook_id}/test")
            .doc("test_webhook", "webhooks", "Send a webhook.test event to an endpoint")
            .tool("Queue a signed webhook.test event for an endpoint, delivered like any other; see list_webhook_deliveries for the outcome (admins and owners, paid plans).")
            .writes(WEBHOOK)
            .answer::<WebhookTestQueued>(202, "The event is queued for delivery")
            .errors(&[409])
            .member(|s: S, c: C, id: String, _: NoArguments| async move { s.engine.test_webhook(&c, &id).await }),
    ]
}
