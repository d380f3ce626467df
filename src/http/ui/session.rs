//! Sessions of the operator page: a login with the operator token opens
//! one, named by a random id in an `HttpOnly`, `SameSite=Strict` cookie.
//!
//! The cookie never carries the token. The server keeps only the SHA-256 of
//! each id with its expiry, in memory: a restart ends every session, and a
//! logout ends its own at once. The table is bounded; beyond that the
//! session closest to expiry makes room.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::header::{COOKIE, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue};
use taskq_actors::crypto::{hash_secret, new_key_secret};

/// The cookie's name.
pub const COOKIE_NAME: &str = "taskq_operator";

/// How long a session lasts after login.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// Sessions open at once.
const MAX_SESSIONS: usize = 256;

#[derive(Default)]
pub struct Sessions {
    /// SHA-256 of a session id -> when it expires.
    expiries: Mutex<HashMap<Vec<u8>, Instant>>,
}

impl Sessions {
    /// Opens a session and answers its id.
    pub fn open(&self) -> String {
        let id = new_key_secret();
        let now = Instant::now();
        let mut expiries = self.expiries.lock().unwrap_or_else(|e| e.into_inner());
        expiries.retain(|_, at| *at > now);
        if expiries.len() >= MAX_SESSIONS {
            let closest = expiries
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(k, _)| k.clone());
            if let Some(k) = closest {
                expiries.remove(&k);
            }
        }
        expiries.insert(hash_secret(&id), now + SESSION_TTL);
        id
    }

    /// Whether the request's cookie names a live session.
    pub fn is_valid(&self, headers: &HeaderMap) -> bool {
        let Some(id) = session_id(headers) else {
            return false;
        };
        let expiries = self.expiries.lock().unwrap_or_else(|e| e.into_inner());
        expiries
            .get(&hash_secret(id))
            .is_some_and(|at| *at > Instant::now())
    }

    /// Ends the request's session, if it names one.
    pub fn close(&self, headers: &HeaderMap) {
        if let Some(id) = session_id(headers) {
            let mut expiries = self.expiries.lock().unwrap_or_else(|e| e.into_inner());
            expiries.remove(&hash_secret(id));
        }
    }
}

/// The session id in the request's `Cookie` headers.
fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, value)| value)
        .filter(|v| !v.is_empty())
}

/// `Set-Cookie` for a session id; `Secure` when the server speaks TLS
/// itself (behind a TLS-terminating proxy it cannot tell).
pub fn set_cookie(id: &str, secure: bool) -> (axum::http::HeaderName, HeaderValue) {
    cookie(id, SESSION_TTL.as_secs(), secure)
}

/// `Set-Cookie` that removes the session cookie.
pub fn clear_cookie(secure: bool) -> (axum::http::HeaderName, HeaderValue) {
    cookie("", 0, secure)
}

fn cookie(value: &str, max_age: u64, secure: bool) -> (axum::http::HeaderName, HeaderValue) {
    let secure = if secure { "; Secure" } else { "" };
    let text = format!(
        "{COOKIE_NAME}={value}; HttpOnly; SameSite=Strict; Path=/admin; Max-Age={max_age}{secure}"
    );
    (
        SET_COOKIE,
        HeaderValue::from_str(&text).expect("a cookie of URL-safe base64 is a header value"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cookie(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(COOKIE, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn a_session_lives_until_logout() {
        let sessions = Sessions::default();
        let id = sessions.open();
        let headers = with_cookie(&format!("other=1; {COOKIE_NAME}={id}"));
        assert!(sessions.is_valid(&headers));
        assert!(!sessions.is_valid(&with_cookie(&format!("{COOKIE_NAME}=x{id}"))));
        assert!(!sessions.is_valid(&with_cookie(&format!("{COOKIE_NAME}="))));
        sessions.close(&headers);
        assert!(!sessions.is_valid(&headers));
    }

    #[test]
    fn the_table_is_bounded() {
        let sessions = Sessions::default();
        let first = sessions.open();
        for _ in 0..MAX_SESSIONS {
            sessions.open();
        }
        assert!(!sessions.is_valid(&with_cookie(&format!("{COOKIE_NAME}={first}"))));
        assert_eq!(sessions.expiries.lock().unwrap().len(), MAX_SESSIONS);
    }

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
