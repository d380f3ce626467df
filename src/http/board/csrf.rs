//! CSRF tokens of the board's forms.
//!
//! A token is the SHA-256 of the session id under a fixed label: only a
//! holder of the session cookie (`HttpOnly`, so no script, and
//! `SameSite=Strict`, so no other site's request) can know it, every node
//! derives the same one without storing it, and it dies with the session.
//! A write is accepted only when its form carries the token of the session
//! its cookie names; the comparison takes the same time whatever differs.

use subtle::ConstantTimeEq;

/// The form field that carries the token.
pub const FIELD: &str = "csrf";

/// The token of a session.
pub fn token(session_id: &str) -> String {
    let digest = taskq_actors::crypto::hash_secret(&format!("taskq-board-csrf:{session_id}"));
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `given` is the session's token.
pub fn matches(session_id: &str, given: &str) -> bool {
    let expected = token(session_id);
    expected.len() == given.len() && bool::from(expected.as_bytes().ct_eq(given.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_belongs_to_its_session_only() {
        let t = token("session-a");
        assert_eq!(t.len(), 64);
        assert!(matches("session-a", &t));
        assert!(!matches("session-b", &t));
        assert!(!matches("session-a", ""));
        assert!(!matches("session-a", &t[..63]));
        assert_ne!(t, token("session-b"));
    }
}
