//! The engine's tests in process: one test binary, so that the engine is
//! linked once. Each module drives a real engine (`support`) on a fresh
//! SQLite file with a clock it moves: claims, leases, cascades, overload, a
//! failed commit, months, the master key.

mod support;

mod cascades;
mod claims;
mod commit_failure;
mod leases;
mod master_key;
mod monthly;
mod overload;
