//! The engine's one error type. The HTTP layer maps each variant to a status
//! and body in exactly one place; nothing else decides statuses.

use crate::domain::TaskId;
use crate::store::StoreError;

/// A request that fails validation: the whole call is refused, nothing is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ValidationError(pub String);

impl ValidationError {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }

    /// An error about `field`, phrased `field: message`.
    pub fn field(field: impl AsRef<str>, message: impl AsRef<str>) -> Self {
        Self(format!("{}: {}", field.as_ref(), message.as_ref()))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Validation(#[from] ValidationError),
    #[error("invalid api key")]
    InvalidApiKey,
    #[error("organization suspended")]
    OrgSuspended,
    #[error("{0}")]
    Forbidden(String),
    #[error("member blocked")]
    MemberBlocked,
    /// The plan does not include this feature (403 with `upgrade: true`).
    #[error("{0}")]
    UpgradeRequired(String),
    /// A per-minute bucket is empty (429 with Retry-After).
    #[error("rate limit exceeded")]
    RateLimited {
        kind: &'static str,
        limit: i64,
        tier: &'static str,
        retry_after_secs: u64,
    },
    #[error("monthly request allowance reached")]
    MonthlyRequests {
        limit: i64,
        tier: &'static str,
        resets: String,
    },
    #[error("monthly task limit reached")]
    MonthlyTasks {
        limit: i64,
        tier: &'static str,
        resets: String,
    },
    #[error("monthly plan allowance reached")]
    MonthlyPlans {
        limit: i64,
        tier: &'static str,
        resets: String,
    },
    /// A tier limit on a countable thing (tags, teams) is reached (429).
    #[error("{limit_type} limit reached")]
    LimitReached {
        limit_type: &'static str,
        limit: i64,
        tier: &'static str,
    },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("task_id already exists")]
    TaskIdExists(TaskId),
    #[error("stored value fails its ciphertext binding check")]
    CiphertextBinding {
        task_id: TaskId,
        field: &'static str,
    },
    #[error("the feedback content filter is unavailable; retry later")]
    FilterUnavailable,
    #[error("the org is restarting; retry the request")]
    ActorUnavailable,
    #[error("the engine did not answer in time")]
    Timeout,
    #[error("storage failure: {0}")]
    Store(#[from] StoreError),
    #[error("internal error: {0}")]
    Internal(String),
}

impl EngineError {
    pub fn validation(message: impl Into<String>) -> Self {
        Self::Validation(ValidationError::new(message))
    }

    pub fn admin_required() -> Self {
        Self::Forbidden("admin or owner role required".into())
    }
}
