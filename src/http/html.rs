//! What every HTML answer of the server shares, the operator page's and
//! the board's: a fresh nonce per response, and a Content-Security-Policy
//! that admits the page's own inline style and script (under that nonce),
//! requests to this origin, and nothing else: no other inline script or
//! style, no other origin, no plugin, no frame. Task content and anything
//! an agent wrote can then only ever be text.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// A nonce for one response.
pub fn nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The CSP of a page whose inline style and script carry `nonce`.
pub fn csp(nonce: &str) -> String {
    format!(
        "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; \
         connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    )
}

/// An HTML answer with its CSP and the headers of `security_headers`,
/// never cached.
pub fn html(status: StatusCode, nonce: &str, body: String) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_str(&csp(nonce)).expect("a nonce of hex digits"),
    );
    security_headers(headers);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Headers of every page's answer: no sniffing, no referrer, no framing.
pub fn security_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

/// The value of the request's cookie `name`, unless empty.
pub fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value)
        .filter(|v| !v.is_empty())
}

/// `Set-Cookie` for a session cookie: `HttpOnly`, `SameSite=Strict`,
/// scoped to `path`, for `max_age` seconds (0 removes it), `Secure` when
/// the server speaks TLS itself (behind a TLS-terminating proxy it cannot
/// tell).
pub fn session_cookie(
    name: &str,
    path: &str,
    value: &str,
    max_age: u64,
    secure: bool,
) -> (header::HeaderName, HeaderValue) {
    let secure = if secure { "; Secure" } else { "" };
    let text = format!(
        "{name}={value}; HttpOnly; SameSite=Strict; Path={path}; Max-Age={max_age}{secure}"
    );
    (
        header::SET_COOKIE,
        HeaderValue::from_str(&text).expect("a cookie of URL-safe base64 is a header value"),
    )
}
