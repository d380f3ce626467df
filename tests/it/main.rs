//! The black-box tests: one test binary, so that the server's crate and the
//! harness are linked once, not once a file.
//!
//! Each module is what one area of the service does, seen from outside: it
//! starts the real `taskq` binary (`common::server`) on SQLite and, built
//! with `TASKQ_TEST_POSTGRES_URL`, on PostgreSQL, and talks to it over HTTP.
//! `tidy` reads the repository's files and starts nothing. Run one area
//! with `cargo test --features test-hooks --test it claim::`.

#[macro_use]
mod common;

mod auth;
mod big_pages;
mod board;
mod byok;
mod claim;
mod claim_batch;
mod clients;
mod cluster;
mod crash_hook;
mod dependencies;
mod encryption;
mod events;
mod feedback;
mod first_run;
mod hardening;
mod idp;
mod lifecycle;
mod limits;
mod long_poll;
mod mcp;
mod mcp_sdk;
mod members;
mod migrate_store;
mod models_serve;
mod openapi;
mod operator_ui;
mod outage;
mod outbound;
mod poison;
mod probe_claims;
mod probe_durability;
mod probe_isolation;
mod probe_malformed;
mod quota;
mod races;
mod reliability;
mod reports;
mod rotation;
mod search;
mod strikes;
mod sweep_load;
mod tags;
mod tasks_create;
mod tasks_read;
mod tasks_update;
mod teams;
mod tidy;
mod time;
mod tls;
mod wait;
mod webhooks;
