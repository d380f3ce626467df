//! Board sessions as the browser holds them: a random id in an
//! `HttpOnly; SameSite=Strict; Path=/board` cookie, never the key itself.
//!
//! The engine keeps only the id's hash, with the key that signed in, and
//! resolves that key again on every request (`Engine::board_caller`), so
//! this module only reads and writes the cookie.

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use taskq_actors::{Caller, Engine, EngineError, BOARD_SESSION};

use crate::http::html::{cookie_value, session_cookie};

/// The cookie's name.
pub const COOKIE_NAME: &str = "taskq_board";

/// A signed-in member: the session id (which the CSRF token derives from)
/// and the caller its key resolves to now.
pub struct Session {
    pub id: String,
    pub caller: Caller,
}

/// The request's session, when its cookie names an open one whose key
/// still works.
pub async fn current(engine: &Engine, headers: &HeaderMap) -> Result<Option<Session>, EngineError> {
    let Some(id) = session_id(headers) else {
        return Ok(None);
    };
    Ok(engine.board_caller(id).await?.map(|caller| Session {
        id: id.to_owned(),
        caller,
    }))
}

/// The session id in the request's `Cookie` headers.
pub fn session_id(headers: &HeaderMap) -> Option<&str> {
    cookie_value(headers, COOKIE_NAME)
}

/// `Set-Cookie` for a session id.
pub fn set_cookie(id: &str, secure: bool) -> (HeaderName, HeaderValue) {
    session_cookie(COOKIE_NAME, "/board", id, BOARD_SESSION.as_secs(), secure)
}

/// `Set-Cookie` that removes the session cookie.
pub fn clear_cookie(secure: bool) -> (HeaderName, HeaderValue) {
    session_cookie(COOKIE_NAME, "/board", "", 0, secure)
}

#[cfg(test)]
mod tests {
    use axum::http::header::COOKIE;

    use super::*;

    #[test]
    fn cookies_are_http_only_strict_and_scoped_to_the_board() {
        let (_, v) = set_cookie("abc", true);
        let v = v.to_str().unwrap();
        assert!(v.starts_with("taskq_board=abc; HttpOnly; SameSite=Strict; Path=/board;"));
        assert!(v.ends_with("; Secure"));
        let (_, v) = clear_cookie(false);
        assert!(v.to_str().unwrap().contains("Max-Age=0"));
    }

    #[test]
    fn the_session_id_is_read_among_other_cookies() {
        let mut headers = HeaderMap::new();
        headers.insert(
            COOKIE,
            HeaderValue::from_static("a=1; taskq_board=xyz; b=2"),
        );
        assert_eq!(session_id(&headers), Some("xyz"));
        headers.insert(COOKIE, HeaderValue::from_static("taskq_board="));
        assert_eq!(session_id(&headers), None);
    }
}
