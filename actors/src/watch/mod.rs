//! Watching an org without polling (CONTRACT §10): the event stream, fed
//! live by the writer after each commit (`hub`) and replayed from the
//! event log (`stream`); and the board's coalesced notices of the same
//! live events (`board`).

mod board;
mod hub;
mod stream;

pub use board::{missed, BoardFeeds, BoardItem, BoardStream, OrgState};
pub use board::{MAX_IDS as BOARD_MAX_IDS, WINDOW_MS as BOARD_WINDOW_MS};
pub use hub::{EventHub, STREAMS_PER_KEY};
pub use stream::{EventStream, Opening, StreamEvent, StreamItem};
