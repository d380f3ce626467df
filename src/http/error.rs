//! The one place where engine errors become HTTP statuses and bodies.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use taskq_actors::{EngineError, ErrorBody, ErrorCode, ValidationError};

use super::lockout::Refused;

/// Why an address is refused the operator routes for a while.
pub const TOO_MANY_WRONG_TOKENS: &str =
    "too many wrong operator tokens from this address; retry after Retry-After seconds";

/// An error answer: a status and a JSON body with an `error` string.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
    retry_after: Option<u64>,
    /// The org is moving between nodes: the answer is marked so that a
    /// node that forwarded the request tries the new owner.
    org_moving: bool,
}

/// Marks a 503 `org moving` answer for the node that forwarded it.
pub const ORG_MOVING_HEADER: &str = "x-taskq-org-moving";

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            body: ErrorBody::new(message),
            retry_after: None,
            org_moving: false,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// The status and the message, for an answer that is a page rather
    /// than JSON (the board's).
    pub fn status_and_message(&self) -> (StatusCode, &str) {
        (self.status, &self.body.error)
    }

    /// The operator's answer to a wrong or refused token.
    pub fn operator_refused(refused: Refused) -> Self {
        match refused {
            Refused::WrongToken => Self::new(StatusCode::UNAUTHORIZED, "invalid operator token"),
            Refused::TooMany { retry_after } => Self {
                retry_after: Some(retry_after),
                ..Self::new(StatusCode::TOO_MANY_REQUESTS, TOO_MANY_WRONG_TOKENS)
            },
        }
    }
}

/// The status of each kind of failure.
fn status(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::Invalid => StatusCode::BAD_REQUEST,
        ErrorCode::Unauthenticated => StatusCode::UNAUTHORIZED,
        ErrorCode::Forbidden | ErrorCode::UpgradeRequired => StatusCode::FORBIDDEN,
        ErrorCode::LimitExceeded => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::Conflict => StatusCode::CONFLICT,
        ErrorCode::Corrupt | ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorCode::Unavailable | ErrorCode::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::BadGateway => StatusCode::BAD_GATEWAY,
    }
}

impl From<ValidationError> for ApiError {
    fn from(e: ValidationError) -> Self {
        Self::bad_request(e.0)
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match &e {
            EngineError::CiphertextBinding { task_id, field } => {
                tracing::error!(%task_id, field, "stored value failed its ciphertext binding check");
            }
            e if e.is_internal() => tracing::error!(error = %e, "request failed"),
            _ => {}
        }
        Self {
            status: status(e.code()),
            body: e.body(),
            retry_after: e.retry_after(),
            org_moving: matches!(e, EngineError::OrgMoving),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body)).into_response();
        let headers = response.headers_mut();
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.org_moving {
            headers.insert(ORG_MOVING_HEADER, HeaderValue::from_static("1"));
        }
        close_if_body_unread(self.status, headers);
        response
    }
}

/// After a 413 the rest of the body was not read: the connection cannot
/// carry another request, and the client must know before it tries. Also
/// for a 413 relayed from an org's owner (`cluster.rs`), whose own
/// `Connection` header is of its hop only.
pub fn close_if_body_unread(status: StatusCode, headers: &mut axum::http::HeaderMap) {
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
}
