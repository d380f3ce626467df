//! The one place where engine errors become HTTP statuses and bodies.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use taskq_actors::{EngineError, ValidationError};

/// An error answer: a status and a JSON body with an `error` string.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: Value,
    retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            body: json!({ "error": message.into() }),
            retry_after: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

impl From<ValidationError> for ApiError {
    fn from(e: ValidationError) -> Self {
        Self::bad_request(e.0)
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let message = e.to_string();
        let status = match &e {
            EngineError::Validation(_) => StatusCode::BAD_REQUEST,
            EngineError::InvalidApiKey => StatusCode::UNAUTHORIZED,
            EngineError::OrgSuspended
            | EngineError::Forbidden(_)
            | EngineError::MemberBlocked
            | EngineError::UpgradeRequired(_) => StatusCode::FORBIDDEN,
            EngineError::LimitReached { .. }
            | EngineError::RateLimited { .. }
            | EngineError::MonthlyRequests { .. }
            | EngineError::MonthlyTasks { .. }
            | EngineError::MonthlyPlans { .. } => StatusCode::TOO_MANY_REQUESTS,
            EngineError::NotFound(_) => StatusCode::NOT_FOUND,
            EngineError::Conflict(_) | EngineError::TaskIdExists(_) => StatusCode::CONFLICT,
            EngineError::CiphertextBinding { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            EngineError::ActorUnavailable
            | EngineError::Timeout
            | EngineError::FilterUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            EngineError::Store(_) | EngineError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let body = match &e {
            EngineError::TaskIdExists(id) => json!({ "error": message, "task_id": id }),
            EngineError::UpgradeRequired(_) => json!({ "error": message, "upgrade": true }),
            EngineError::RateLimited {
                kind, limit, tier, ..
            } => json!({
                "error": message,
                "limit_type": kind,
                "limit": limit,
                "window_seconds": 60,
                "tier": tier,
            }),
            EngineError::MonthlyRequests {
                limit,
                tier,
                resets,
            } => json!({
                "error": message,
                "limit_type": "monthly",
                "limit": limit,
                "tier": tier,
                "resets": resets,
            }),
            EngineError::MonthlyPlans {
                limit,
                tier,
                resets,
            } => json!({
                "error": message,
                "limit_type": "plan",
                "limit": limit,
                "tier": tier,
                "resets": resets,
            }),
            EngineError::MonthlyTasks {
                limit,
                tier,
                resets,
            } => json!({ "error": message, "limit": limit, "tier": tier, "resets": resets }),
            EngineError::LimitReached {
                limit_type,
                limit,
                tier,
            } => json!({
                "error": message,
                "limit_type": limit_type,
                "limit": limit,
                "tier": tier,
            }),
            EngineError::CiphertextBinding { task_id, field } => {
                tracing::error!(%task_id, field, "stored value failed its ciphertext binding check");
                json!({
                    "error": message,
                    "code": "ciphertext_binding_failure",
                    "task_id": task_id,
                    "field": field,
                })
            }
            EngineError::Store(_) | EngineError::Internal(_) => {
                tracing::error!(error = %e, "request failed");
                json!({ "error": "internal error" })
            }
            _ => json!({ "error": message }),
        };
        let retry_after = match &e {
            EngineError::ActorUnavailable | EngineError::Timeout => Some(1),
            EngineError::RateLimited {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            _ => None,
        };
        Self {
            status,
            body,
            retry_after,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
