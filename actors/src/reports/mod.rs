//! Reports: insights, failure clusters, runbooks and standups, computed
//! from the store by the reports actor, and the planner's pure parts.

#![allow(dead_code)] // wired in by the reports actor

pub mod history;
pub mod period;
