//! What some tests need from outside the repository (a PostgreSQL server, a
//! Python with a package, a browser, nginx, Schemathesis, a model's
//! weights), each named by an environment variable.
//!
//! Without its variable such a test is skipped with a note, so that `cargo
//! test` runs on any machine. A skipped test still reports as passed, so
//! CI sets `TASKQ_TEST_REQUIRE_ALL=1`: then a missing variable fails the
//! test, naming the variable, and a green run has skipped nothing.
//!
//! Every gated test asks here, through [`env_or_skip`]. The file is also
//! included by the engine crate's store tests (`actors/src/store/tests.rs`),
//! so it uses nothing but the standard library.

/// When `1`, a test whose environment variable is missing fails.
pub const REQUIRE_ALL_ENV: &str = "TASKQ_TEST_REQUIRE_ALL";

/// The value of the environment variable `name`, when it is set and not
/// empty. Otherwise `None`, after a note that `skipped` (what the caller
/// leaves out: "the PostgreSQL variant") is skipped; under
/// `TASKQ_TEST_REQUIRE_ALL=1` it panics instead, naming the variable.
pub fn env_or_skip(name: &str, skipped: &str) -> Option<String> {
    if let Some(value) = std::env::var(name).ok().filter(|v| !v.is_empty()) {
        return Some(value);
    }
    if std::env::var(REQUIRE_ALL_ENV).is_ok_and(|v| v == "1") {
        panic!(
            "{name} is unset, and {REQUIRE_ALL_ENV}=1 lets no test be skipped: {skipped} needs it"
        );
    }
    eprintln!("note: {name} is unset; skipping {skipped}");
    None
}
