//! Pure domain types and rules: no I/O, no async, unit-tested in place.
//!
//! The org actor applies these rules; the HTTP layer never does.

pub mod account;
pub mod addresses;
pub mod admin;
pub mod error;
pub mod feedback;
pub mod history;
mod ids;
pub mod lease;
pub mod mark;
pub mod open;
pub mod order;
pub mod period;
pub mod retention;
pub mod retry;
pub mod schedule;
mod status;
mod task;
pub mod usage;
pub mod watch;
pub mod webhooks;

pub use ids::{KeyId, OrgId, ScheduleId, TaskId, WebhookId, ID_TEXT_LEN, UUID_PATTERN};
pub use status::TaskStatus;
pub use task::*;
