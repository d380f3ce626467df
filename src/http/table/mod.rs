//! Every operation of the API, defined once: the router serves exactly
//! these (plus `/mcp`, the peer route and the test hooks), `/openapi.json`
//! describes exactly these, and the tools are those marked `tool`. One file
//! an area; the order here is the document's.

mod operator;
mod org;
mod schedules;
mod tasks;
mod watch;
mod webhooks;

use super::operation::{Access, Operation};
use super::{board, health, metrics, openapi, Health};

pub fn operations() -> Vec<Operation> {
    let mut table = vec![
        // ---- service
        Operation::get("/healthz")
            .doc("health", "service", "Whether the server is up")
            .answer::<Health>(200, "The server accepts requests")
            .handler(health),
        Operation::get("/openapi.json")
            .doc("openapi", "service", "This document")
            .answer::<serde_json::Map<String, serde_json::Value>>(200, "The OpenAPI 3.1 document")
            .handler(openapi::serve),
        Operation::get("/metrics")
            .doc("metrics", "operator", "Prometheus metrics: requests by route and status, claim latency, actors, queue depth")
            .access(Access::Operator)
            .text(200, "Prometheus text format")
            .handler(metrics::render),
    ];
    table.extend(tasks::operations());
    table.extend(watch::operations());
    table.extend(org::admin());
    table.extend(webhooks::operations());
    table.extend(schedules::operations());
    table.extend(org::keys());
    table.extend(operator::operations());
    table.extend(board::operations());
    table
}
