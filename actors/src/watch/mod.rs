//! Watching an org without polling (CONTRACT §10): the event stream, fed
//! live by the writer after each commit (`hub`) and replayed from the
//! event log (`stream`); and the board's coalesced notices (`board`) of
//! the tasks the same commits changed (`changes`).

mod board;
mod changes;
mod hub;
mod stream;

pub use board::WINDOW_MS as BOARD_WINDOW_MS;
pub use board::{missed, BoardFeeds, BoardItem, BoardStream, OrgState};
pub use changes::MAX_IDS as BOARD_MAX_IDS;
pub use hub::{EventHub, STREAMS_PER_KEY};
pub use stream::{EventStream, Opening, StreamEvent, StreamItem};

/// A task's creation, as the commits in this module's tests record it.
#[cfg(test)]
fn created(task: crate::domain::TaskId) -> crate::domain::StoredEvent {
    crate::domain::StoredEvent {
        task_id: task,
        from_status: None,
        to_status: crate::domain::TaskStatus::Pending,
        agent_id: "bot".into(),
        at: 1,
        note: None,
        lease_expired: false,
    }
}
