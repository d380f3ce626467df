//! Reports: insights, failure clusters, runbooks and standups, computed
//! from the store by the reports actor (`actor.rs`, writing through
//! `compute/`, stored as `stored.rs` says), and the planner's pure parts
//! (`plan.rs`). The figures, clusters, their words, periods and prompts
//! are pure functions, unit-tested.

pub mod actor;
pub mod cluster;
pub mod compute;
pub mod insights;
pub mod plan;
pub mod standup;
pub mod stored;
pub mod wording;
