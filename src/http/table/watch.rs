//! Watching an org without polling: its event stream.

use taskq_actors::api::{RequestKind, WatchEvents};

use super::super::operation::{Access, Operation};
use super::super::watch;

pub(super) fn operations() -> Vec<Operation> {
    vec![
        Operation::get("/events")
            .doc("watch_events", "events", "The org's task transitions as Server-Sent Events, resumable by id")
            .access(Access::Member(RequestKind::Read, None))
            .query_of::<WatchEvents>()
            .event_stream(200, "One event per state event in commit order (`id:` the event id, `event:` its type, `data:` the webhook body); a comment every 15 s while nothing happens. Send `Last-Event-ID` to resume after that id")
            .errors(&[400])
            .handler(watch::events),
    ]
}
