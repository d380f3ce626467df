//! Watching an org without polling: its event stream, and waiting for
//! tasks to finish.

use taskq_actors::api::{RequestKind, WaitAnswer, WaitTasks, WatchEvents};
use taskq_actors::Caller;

use super::super::operation::{Access, Operation};
use super::super::{watch, AppState};

type S = AppState;
type C = Caller;

pub(super) fn operations() -> Vec<Operation> {
    vec![
        Operation::get("/events")
            .doc("watch_events", "events", "The org's task transitions as Server-Sent Events, resumable by id")
            .access(Access::Member(RequestKind::Read, None))
            .query_of::<WatchEvents>()
            .event_stream(200, "One event per state event in commit order (`id:` the event id, `event:` its type, `data:` the webhook body); a comment every 15 s while nothing happens. Send `Last-Event-ID` to resume after that id")
            .errors(&[400])
            .handler(watch::events),
        Operation::post("/tasks/wait")
            .doc("wait_for_tasks", "tasks", "Wait until all (or any) of 1 to 25 tasks are finished, up to 30 s")
            .tool("Wait until all (until: \"all\", the default) or any (until: \"any\") of 1 to 25 tasks are finished (completed, failed or canceled), for up to wait_seconds (0 to 30, default 30). Returns {done, tasks: [{task_id, status, updated_at}], not_found}; done is false when the time ran out first. Ids of no task of the org are in not_found and do not count. Call it again to keep waiting.")
            .read_only()
            .reads(None)
            .body()
            .answer::<WaitAnswer>(200, "Where each task found stands, and whether all (or any) of them are finished")
            .errors(&[500])
            .member(|s: S, c: C, (): (), r: WaitTasks| async move { s.engine.wait_tasks(&c, r).await }),
    ]
}
