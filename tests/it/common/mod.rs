//! Black-box harness: starts the real `taskq` binary against a fresh database
//! and talks to it over HTTP.
//!
//! Every test module does `use crate::common::*;`, then writes its tests
//! with `backend_tests!`, which runs each body on SQLite and on PostgreSQL
//! (built as ignored without `TASKQ_TEST_POSTGRES_URL`). A test that needs
//! something outside the repository says so (`environment`) and asks
//! `need` for its variable.
//!
//! `server` starts, stops and restarts the server on its own database,
//! `client` sends HTTP requests to it, and `fixtures` creates orgs, members,
//! keys, tasks, tags and teams and checks answers. Everything a test uses is
//! re-exported here, but for `limits`: what the limits, quota, feedback,
//! strikes and races tests add (orgs that keep their tier's limits, bursts
//! until a 429, a stand-in moderation endpoint), which they use as
//! `common::limits`.
#![allow(dead_code)]

pub mod browser;
mod client;
mod environment;
mod fixtures;
pub mod limits;
mod proxy;
mod server;
pub mod sse;

// Each test binary uses a subset of these.
pub use environment::need;
#[allow(unused_imports)]
pub use fixtures::*;
#[allow(unused_imports)]
pub use proxy::Proxy;
pub use reqwest::StatusCode;
pub use serde_json::{json, Value};
#[allow(unused_imports)]
pub use server::{
    postgres_addr, refused_at_start, Backend, Builder, Db, PostgresDatabase, TestServer,
    POSTGRES_ENV,
};

/// A client for the server's HTML pages that shows redirects and cookies
/// as they come (it follows no redirect and keeps no cookie).
pub fn page_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .expect("http client")
}

/// Runs one async test body on every backend:
///
/// - `backend_tests!(name, |srv| async move { ... })` starts a default server;
/// - `backend_tests!(name, |mut srv| async move { ... })` when the body restarts it;
/// - `backend_tests!(name, |backend: Backend| async move { ... })` hands the
///   body a `Backend` so that it can start the server itself (builder options);
/// - `backend_tests!(name, needs("nginx", "TASKQ_TEST_NGINX (nginx)"), |srv| ...)`
///   when the body needs something from outside too (`needs.rs`).
///
/// Generates `name::sqlite` and `name::postgres`; the latter is built as
/// ignored when `TASKQ_TEST_POSTGRES_URL` is unset, and both when the need
/// is missing (see `environment`).
macro_rules! backend_tests {
    ($name:ident, needs($need:literal, $what:literal), |$backend:ident: Backend| $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(not(taskq_test_env = $need), ignore = $what)]
            async fn sqlite() {
                let $backend = crate::common::Backend::Sqlite;
                $body.await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(
                not(taskq_test_env = "postgres"),
                ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
            )]
            #[cfg_attr(
                all(taskq_test_env = "postgres", not(taskq_test_env = $need)),
                ignore = $what
            )]
            async fn postgres() {
                let $backend = crate::common::Backend::Postgres;
                $body.await
            }
        }
    };
    ($name:ident, |$backend:ident: Backend| $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let $backend = crate::common::Backend::Sqlite;
                $body.await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(
                not(taskq_test_env = "postgres"),
                ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
            )]
            async fn postgres() {
                let $backend = crate::common::Backend::Postgres;
                $body.await
            }
        }
    };
    ($name:ident, $(needs($need:literal, $what:literal),)? |mut $srv:ident| $body:expr) => {
        backend_tests!($name, $(needs($need, $what),)? |__backend: Backend| async move {
            #[allow(unused_mut)]
            let mut $srv = crate::common::TestServer::start(__backend).await;
            $body.await
        });
    };
    ($name:ident, $(needs($need:literal, $what:literal),)? |$srv:ident| $body:expr) => {
        backend_tests!($name, $(needs($need, $what),)? |__backend: Backend| async move {
            let $srv = crate::common::TestServer::start(__backend).await;
            $body.await
        });
    };
}
