//! What some tests need from outside the repository (a PostgreSQL server, a
//! Python with a package, a browser, nginx, Schemathesis, a model's
//! weights), each named by an environment variable (`needs.rs` lists them).
//!
//! Whether a test runs is decided when it is built: a build without the
//! variable marks the test ignored, naming the variable
//! (`#[cfg_attr(not(taskq_test_env = "postgres"), ignore = "...")]`), so
//! `cargo test` runs on any machine and says what it left out. A test that
//! runs asks here for its variable's value; missing, it fails, naming the
//! variable: the build had it (or `TASKQ_TEST_REQUIRE_ALL=1`, which CI
//! sets, so that a green run has skipped nothing), the run does not.
//!
//! The file is also included by the engine crate's store tests
//! (`actors/src/store/tests.rs`), so it uses nothing but the standard
//! library.

/// When `1`, every test is built to run, and one whose variable is missing
/// fails.
pub const REQUIRE_ALL_ENV: &str = "TASKQ_TEST_REQUIRE_ALL";

/// The value of the environment variable `name`, which a test built to run
/// needs: it panics, naming the variable, when it is unset or empty.
pub fn need(name: &str) -> String {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => value,
        _ => panic!(
            "{name} is unset: this test was built to run (the variable was set when it was \
             built, or {REQUIRE_ALL_ENV}=1 was); set it, or build again without it to leave \
             the test out as ignored"
        ),
    }
}
