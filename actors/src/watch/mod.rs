//! Watching an org without polling (CONTRACT §10): the event stream, fed
//! live by the writer after each commit (`hub`) and replayed from the
//! event log (`stream`); and the board's coalesced notices (`board`) of
//! the tasks the same commits changed (`changes`). Both streams keep
//! their connections alive the same way (`keep_alive`).

mod board;
mod changes;
mod hub;
mod keep_alive;
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

/// A commit of the org's actor numbered 7 creating `task`: the mark
/// `7.{version}`, with `version` tasks pending.
#[cfg(test)]
fn creation(
    org: crate::domain::OrgId,
    task: crate::domain::TaskId,
    version: u64,
) -> crate::store::WriteBatch {
    use crate::domain::mark::{ChangeMark, MarkedCounts};
    let events = crate::store::WriteOp::InsertEvents(vec![created(task)]);
    let mut batch = crate::store::WriteBatch::new(org, vec![events]);
    batch.marked = Some(MarkedCounts {
        mark: ChangeMark::At { actor: 7, version },
        counts: crate::domain::open::StatusCounts {
            pending: usize::try_from(version).unwrap_or(usize::MAX),
            ..Default::default()
        },
    });
    batch
}
