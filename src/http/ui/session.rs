//! Sessions of the operator page: a login with the operator token opens
//! one, named by a random id in an `HttpOnly`, `SameSite=Strict` cookie.
//!
//! The cookie never carries the token. The store keeps only the SHA-256 of
//! each id with its expiry, so every node of a cluster knows a session and
//! a logout through any node ends it at once. The table is bounded; beyond
//! that the session closest to expiry makes room.

use axum::http::{HeaderMap, HeaderValue};
use taskq_actors::{Engine, EngineError, OPERATOR_SESSION};

use crate::http::html::{cookie_value, session_cookie};

/// The cookie's name.
pub const COOKIE_NAME: &str = "taskq_operator";

/// Whether the request's cookie names a live session (on any node).
pub async fn is_valid(engine: &Engine, headers: &HeaderMap) -> Result<bool, EngineError> {
    match session_id(headers) {
        Some(id) => engine.operator_session(id).await,
        None => Ok(false),
    }
}

/// Ends the request's session, if it names one.
pub async fn close(engine: &Engine, headers: &HeaderMap) -> Result<(), EngineError> {
    match session_id(headers) {
        Some(id) => engine.close_operator_session(id).await,
        None => Ok(()),
    }
}

/// The session id in the request's `Cookie` headers.
fn session_id(headers: &HeaderMap) -> Option<&str> {
    cookie_value(headers, COOKIE_NAME)
}

/// `Set-Cookie` for a session id.
pub fn set_cookie(id: &str, secure: bool) -> (axum::http::HeaderName, HeaderValue) {
    session_cookie(
        COOKIE_NAME,
        "/admin",
        id,
        OPERATOR_SESSION.as_secs(),
        secure,
    )
}

/// `Set-Cookie` that removes the session cookie.
pub fn clear_cookie(secure: bool) -> (axum::http::HeaderName, HeaderValue) {
    session_cookie(COOKIE_NAME, "/admin", "", 0, secure)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_http_only_and_strict() {
        let (_, v) = set_cookie("abc", true);
        let v = v.to_str().unwrap();
        assert!(v.starts_with("taskq_operator=abc; HttpOnly; SameSite=Strict; Path=/admin"));
        assert!(v.ends_with("; Secure"));
        let (_, v) = clear_cookie(false);
        assert!(v.to_str().unwrap().contains("Max-Age=0"));
    }
}
