//! Watching an org without polling (CONTRACT §10): the event stream, fed
//! live by the writer after each commit (`hub`) and replayed from the
//! event log (`stream`).

mod hub;
mod stream;

pub use hub::{EventHub, STREAMS_PER_KEY};
pub use stream::{EventStream, Opening, StreamEvent, StreamItem};
