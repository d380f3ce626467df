//! The taskq engine.
//!
//! Everything that decides what happens to an org's data lives here: the pure
//! domain rules (`domain`), the per-org actors that own the hot state and order
//! every change (`org`), the supervisor that spawns, idles out and restarts
//! them (`supervisor`), the group-commit writer (`writer`), storage (`store`)
//! and encryption at rest (`crypto`). The HTTP and MCP front ends talk only to
//! [`Engine`]; nothing here knows about HTTP.

pub mod clock;
pub mod crypto;
pub mod directory;
pub mod domain;
pub mod engine;
pub mod error;
pub mod filter;
pub mod org;
mod reader;
pub mod store;
pub mod supervisor;
mod views;
pub mod writer;

pub use clock::{Clock, SystemClock};
pub use engine::{Engine, EngineConfig};
pub use error::{EngineError, ValidationError};
