//! The `taskq` binary's library: the HTTP front end and the command line.
//!
//! The engine (actors, rules, storage) lives in the `taskq-actors` crate;
//! this crate only speaks HTTP, parses configuration, and starts the server
//! as a child process for the bench and the black-box tests. The dependency
//! points one way: nothing in `taskq-actors` knows about this crate.

pub mod cli;
pub mod http;
pub mod moderation;
pub mod process;
