//! The taskq engine.
//!
//! Everything that decides what happens to an org's data lives here: the
//! typed requests and answers every front end speaks (`api`), the pure
//! domain rules (`domain`), the per-org actors that own the hot state and
//! order every change (`org`), the supervisor that spawns, idles out and
//! restarts them (`supervisor`), the group-commit writer (`writer`), the
//! grouped reader (`reader`), storage (`store`) and encryption at rest
//! (`crypto`). Front ends talk only to [`Engine`] in `api` types; nothing
//! here knows about HTTP or MCP, and the actors, writer and store are
//! private to the crate.

pub mod api;
mod background;
pub mod clock;
mod cluster;
pub mod crypto;
mod directory;
pub mod domain;
pub mod embed;
mod engine;
pub mod error;
pub mod filter;
mod health;
pub mod llm;
mod meaning;
mod org;
mod reader;
mod reports;
mod stats;
mod store;
mod supervisor;
mod views;
mod watch;
pub mod webhook_sender;
mod writer;

pub use clock::{Clock, SystemClock};
pub use cluster::{ClusterConfig, Placement};
pub use domain::account::Caller;
pub use engine::{
    parse_org_id, Engine, EngineConfig, Peer, PeerAnswer, PeerCall, PeerOp, Peers, StoreOptions,
    BOARD_SESSION, FEEDBACK_ORG_NAME, MEMBER_STRIKE_LIMIT, OPERATOR_SESSION, ORG_STRIKE_LIMIT,
};
pub use error::{EngineError, ErrorBody, ErrorCode, LimitExceeded, LimitKind, ValidationError};
pub use stats::WriterTotals;
pub use supervisor::ActorStats;
pub use watch::{EventStream, StreamEvent, StreamItem};
