//! The engine's one error type, and what a front end needs to report it.
//!
//! An error says what went wrong in protocol-neutral terms: an [`ErrorCode`]
//! (what kind of failure, which each front end maps to its own status once),
//! a message, and the contract's extra fields ([`ErrorBody`]). HTTP maps the
//! code to a status; MCP reports the same message as a tool error.

use schemars::JsonSchema;
use serde::Serialize;

use crate::api::Timestamp;
use crate::domain::account::Tier;
use crate::domain::error::RuleError;
use crate::domain::TaskId;
use crate::store::StoreError;

pub use crate::domain::error::ValidationError;

/// What kind of failure an error is; each front end maps every code once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The request is malformed or breaks a rule of its fields.
    Invalid,
    /// No valid key.
    Unauthenticated,
    /// The caller may not do this (role, suspended org, blocked member).
    Forbidden,
    /// The org's plan does not include this.
    UpgradeRequired,
    /// A rate, volume or tier limit refused the request.
    LimitExceeded,
    NotFound,
    Conflict,
    /// Stored content failed its integrity check and is not served.
    Corrupt,
    /// A dependency (the org's actor, the content filter) cannot answer now.
    Unavailable,
    /// Too much is queued; retry later.
    Overloaded,
    Internal,
    /// A model the request depends on gave nothing usable.
    BadGateway,
}

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// A per-minute token bucket of writes.
    Writes,
    /// A per-minute token bucket of reads.
    Reads,
    /// The monthly request allowance.
    MonthlyRequests,
    /// The monthly task quota.
    MonthlyTasks,
    /// The monthly planning allowance.
    MonthlyPlans,
    /// The size of the tag vocabulary.
    Tags,
    /// The number of teams.
    Teams,
    /// The number of webhook endpoints.
    Webhooks,
    /// The number of schedules.
    Schedules,
    /// The event streams one key holds open.
    Streams,
    /// The waits for tasks one key holds at once.
    Waits,
}

/// A refusal by one of the org's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitExceeded {
    pub kind: LimitKind,
    /// The effective limit (after the operator's overrides).
    pub limit: i64,
    pub tier: Tier,
    /// When a monthly limit starts over.
    pub resets: Option<Timestamp>,
    /// Whole seconds until a per-minute bucket has a token again.
    pub retry_after: Option<u64>,
}

impl LimitExceeded {
    fn message(&self) -> &'static str {
        match self.kind {
            LimitKind::Writes | LimitKind::Reads => "rate limit exceeded",
            LimitKind::MonthlyRequests => "monthly request allowance reached",
            LimitKind::MonthlyTasks => "monthly task limit reached",
            LimitKind::MonthlyPlans => "monthly plan allowance reached",
            LimitKind::Tags => "tags limit reached",
            LimitKind::Teams => "teams limit reached",
            LimitKind::Webhooks => "webhooks limit reached",
            LimitKind::Schedules => "schedules limit reached",
            LimitKind::Streams => "too many open event streams for this key",
            LimitKind::Waits => "too many waits for tasks held by this key",
        }
    }

    fn detail(&self) -> LimitDetail {
        let limit_type = match self.kind {
            LimitKind::Writes => Some("write"),
            LimitKind::Reads => Some("read"),
            LimitKind::MonthlyRequests => Some("monthly"),
            LimitKind::MonthlyTasks => None,
            LimitKind::MonthlyPlans => Some("plan"),
            LimitKind::Tags => Some("tags"),
            LimitKind::Teams => Some("teams"),
            LimitKind::Webhooks => Some("webhooks"),
            LimitKind::Schedules => Some("schedules"),
            LimitKind::Streams => Some("streams"),
            LimitKind::Waits => Some("waits"),
        };
        let per_minute = matches!(self.kind, LimitKind::Writes | LimitKind::Reads);
        LimitDetail {
            limit_type,
            limit: self.limit,
            window_seconds: per_minute.then_some(60),
            tier: self.tier,
            resets: self.resets,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    #[error("invalid api key")]
    InvalidApiKey,
    #[error("organization suspended")]
    OrgSuspended,
    #[error("{0}")]
    Forbidden(String),
    #[error("member blocked")]
    MemberBlocked,
    #[error("{0}")]
    UpgradeRequired(String),
    #[error("{}", .0.message())]
    Limit(LimitExceeded),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// An operator's call on an org whose deletion is under way (CONTRACT
    /// §11): only reading it and deleting it again are answered.
    #[error("organization is being deleted")]
    OrgDeleting,
    #[error("task_id already exists")]
    TaskIdExists(TaskId),
    /// A data-key route on an org whose keys the server manages.
    #[error("this org's keys are managed by the server: clients must not encrypt")]
    ManagedKeys,
    #[error("stored value fails its ciphertext binding check")]
    CiphertextBinding {
        task_id: TaskId,
        field: &'static str,
    },
    #[error("the feedback content filter is unavailable; retry later")]
    FilterUnavailable,
    #[error("the embedding model is unavailable; retry later")]
    EmbedderUnavailable,
    /// An org's in-flight requests or a writer's queue are at their bound.
    #[error("overloaded")]
    Overloaded,
    #[error("the org is restarting; retry the request")]
    ActorUnavailable,
    /// Another node owns the org, or none does yet (several nodes on one
    /// PostgreSQL): nothing of the request was applied.
    #[error("org moving")]
    OrgMoving,
    #[error("the engine did not answer in time")]
    Timeout,
    /// The store is down or cannot take writes; nothing of the request was
    /// acknowledged.
    #[error("store unavailable")]
    StoreUnavailable,
    #[error("storage failure: {0}")]
    Store(StoreError),
    #[error("internal error: {0}")]
    Internal(String),
    /// The planner's model gave no usable plan; the call was charged.
    #[error("the planner produced no usable plan")]
    NoUsablePlan {
        reason: String,
        plan_calls_remaining: Option<i64>,
    },
}

impl From<RuleError> for EngineError {
    fn from(e: RuleError) -> Self {
        match e {
            RuleError::Invalid(e) => EngineError::Invalid(e),
            RuleError::Forbidden(m) => EngineError::Forbidden(m),
            RuleError::Conflict(m) => EngineError::Conflict(m),
            RuleError::UpgradeRequired(m) => EngineError::UpgradeRequired(m),
        }
    }
}

impl From<StoreError> for EngineError {
    fn from(e: StoreError) -> Self {
        match e {
            e if e.is_unavailable() => EngineError::StoreUnavailable,
            // The org's actor is being replaced after a failed write.
            StoreError::OrgReloading => EngineError::ActorUnavailable,
            StoreError::Fenced => EngineError::OrgMoving,
            e => EngineError::Store(e),
        }
    }
}

impl From<LimitExceeded> for EngineError {
    fn from(e: LimitExceeded) -> Self {
        EngineError::Limit(e)
    }
}

impl EngineError {
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid(ValidationError::new(message))
    }

    /// A refusal by the org's per-minute write limit.
    pub fn is_write_limit(&self) -> bool {
        matches!(self, EngineError::Limit(l) if l.kind == LimitKind::Writes)
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            EngineError::Invalid(_) => ErrorCode::Invalid,
            EngineError::InvalidApiKey => ErrorCode::Unauthenticated,
            EngineError::OrgSuspended | EngineError::Forbidden(_) | EngineError::MemberBlocked => {
                ErrorCode::Forbidden
            }
            EngineError::UpgradeRequired(_) => ErrorCode::UpgradeRequired,
            EngineError::Limit(_) => ErrorCode::LimitExceeded,
            EngineError::NotFound(_) => ErrorCode::NotFound,
            EngineError::Conflict(_)
            | EngineError::OrgDeleting
            | EngineError::TaskIdExists(_)
            | EngineError::ManagedKeys => ErrorCode::Conflict,
            EngineError::CiphertextBinding { .. } => ErrorCode::Corrupt,
            EngineError::FilterUnavailable
            | EngineError::EmbedderUnavailable
            | EngineError::ActorUnavailable
            | EngineError::OrgMoving
            | EngineError::StoreUnavailable
            | EngineError::Timeout => ErrorCode::Unavailable,
            EngineError::Overloaded => ErrorCode::Overloaded,
            EngineError::Store(_) | EngineError::Internal(_) => ErrorCode::Internal,
            EngineError::NoUsablePlan { .. } => ErrorCode::BadGateway,
        }
    }

    /// Whole seconds a client should wait before retrying, when it should.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            EngineError::Limit(l) => l.retry_after,
            EngineError::ActorUnavailable
            | EngineError::OrgMoving
            | EngineError::Timeout
            | EngineError::Overloaded => Some(1),
            EngineError::StoreUnavailable => Some(2),
            EngineError::EmbedderUnavailable => Some(5),
            _ => None,
        }
    }

    /// The answer a client sees. Internal causes are not in it: the caller
    /// logs them (see [`EngineError::is_internal`]).
    pub fn body(&self) -> ErrorBody {
        let detail = match self {
            EngineError::TaskIdExists(task_id) => {
                Some(ErrorDetail::TaskIdExists { task_id: *task_id })
            }
            EngineError::UpgradeRequired(_) => Some(ErrorDetail::Upgrade { upgrade: true }),
            EngineError::ManagedKeys => Some(ErrorDetail::KeyProvider {
                key_provider: "managed",
            }),
            EngineError::Limit(l) => Some(ErrorDetail::Limit(l.detail())),
            EngineError::CiphertextBinding { task_id, field } => Some(ErrorDetail::Binding {
                code: "ciphertext_binding_failure",
                task_id: *task_id,
                field,
            }),
            EngineError::NoUsablePlan {
                plan_calls_remaining,
                ..
            } => Some(ErrorDetail::Planner {
                plan_calls_remaining: *plan_calls_remaining,
            }),
            _ => None,
        };
        let error = if self.is_internal() {
            "internal error".to_owned()
        } else {
            self.to_string()
        };
        ErrorBody { error, detail }
    }

    /// A failure inside the service whose cause must be logged, not sent.
    pub fn is_internal(&self) -> bool {
        self.code() == ErrorCode::Internal
    }
}

/// An error: `error` says what went wrong; a refused id, a plan gate, a
/// limit, a corrupt value or a failed plan add their fields.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ErrorBody {
    pub error: String,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub detail: Option<ErrorDetail>,
}

impl ErrorBody {
    pub fn new(error: impl Into<String>) -> Self {
        Self {
            error: error.into(),
            detail: None,
        }
    }
}

/// The fields an error adds to its message, by kind of error.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ErrorDetail {
    /// A client-minted task id is taken.
    TaskIdExists {
        task_id: TaskId,
    },
    /// The plan does not include the feature.
    Upgrade {
        upgrade: bool,
    },
    /// Who holds the org's keys.
    KeyProvider {
        key_provider: &'static str,
    },
    Limit(LimitDetail),
    /// A stored value failed its integrity check.
    Binding {
        code: &'static str,
        task_id: TaskId,
        field: &'static str,
    },
    /// The planner failed; the call still counts.
    Planner {
        plan_calls_remaining: Option<i64>,
    },
}

/// Which limit refused a request, and its numbers.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct LimitDetail {
    /// `write`, `read`, `monthly`, `plan`, `tags` or `teams`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_type: Option<&'static str>,
    pub limit: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_seconds: Option<u32>,
    pub tier: Tier,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resets: Option<Timestamp>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn body(e: EngineError) -> serde_json::Value {
        serde_json::to_value(e.body()).unwrap()
    }

    #[test]
    fn limit_bodies_follow_the_contract() {
        let minute = LimitExceeded {
            kind: LimitKind::Writes,
            limit: 30,
            tier: Tier::Dev,
            resets: None,
            retry_after: Some(2),
        };
        assert_eq!(
            body(minute.clone().into()),
            json!({"error": "rate limit exceeded", "limit_type": "write", "limit": 30,
                   "window_seconds": 60, "tier": "dev"})
        );
        assert_eq!(EngineError::from(minute).retry_after(), Some(2));
        let tasks = LimitExceeded {
            kind: LimitKind::MonthlyTasks,
            limit: 5,
            tier: Tier::Free,
            resets: Some(Timestamp(0)),
            retry_after: None,
        };
        assert_eq!(
            body(tasks.into()),
            json!({"error": "monthly task limit reached", "limit": 5, "tier": "free",
                   "resets": "1970-01-01T00:00:00.000Z"})
        );
    }

    #[test]
    fn the_error_schema_is_the_bodies_own() {
        let schema = schemars::generate::SchemaSettings::draft2020_12()
            .for_serialize()
            .into_generator()
            .into_root_schema_for::<ErrorBody>()
            .to_value();
        let validator = jsonschema::validator_for(&schema).unwrap();
        let task_id = TaskId(uuid::Uuid::from_u128(7));
        let errors = [
            EngineError::invalid("title: is required"),
            EngineError::TaskIdExists(task_id),
            EngineError::UpgradeRequired("teams need a paid plan".into()),
            EngineError::ManagedKeys,
            EngineError::CiphertextBinding {
                task_id,
                field: "title",
            },
            EngineError::NoUsablePlan {
                reason: "no JSON".into(),
                plan_calls_remaining: None,
            },
            EngineError::Limit(LimitExceeded {
                kind: LimitKind::Reads,
                limit: 600,
                tier: Tier::Pro,
                resets: None,
                retry_after: Some(1),
            }),
            EngineError::Limit(LimitExceeded {
                kind: LimitKind::MonthlyTasks,
                limit: 5,
                tier: Tier::Free,
                resets: Some(Timestamp(0)),
                retry_after: None,
            }),
        ];
        for e in errors {
            let body = body(e);
            assert!(validator.is_valid(&body), "{body} against {schema}");
        }
        assert!(
            !validator.is_valid(&json!({"limit": 5})),
            "the message is required"
        );
        assert!(!validator.is_valid(&json!({"error": 5})));
        // Each kind's fields are described, with their types.
        let text = schema.to_string();
        for field in [
            "task_id",
            "upgrade",
            "key_provider",
            "code",
            "field",
            "limit_type",
            "limit",
            "window_seconds",
            "tier",
            "resets",
            "plan_calls_remaining",
        ] {
            assert!(
                text.contains(&format!("\"{field}\":{{")),
                "{field}: {schema}"
            );
        }
    }

    #[test]
    fn internal_causes_are_not_sent() {
        let e = EngineError::Internal("disk on fire".into());
        assert_eq!(body(e), json!({"error": "internal error"}));
        assert_eq!(
            body(EngineError::UpgradeRequired(
                "teams need a paid plan".into()
            )),
            json!({"error": "teams need a paid plan", "upgrade": true})
        );
    }
}
