//! What a domain rule can refuse. Pure rules return these; the engine turns
//! them into its own error, so nothing here knows about storage or actors.

/// A request that fails validation: the whole call is refused, nothing is
/// written. The message names the offending field as `field: message`.
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

/// A rule about who may do what, or about the org's plan, said no.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Conflict(String),
    /// The plan does not include the feature.
    #[error("{0}")]
    UpgradeRequired(String),
}

impl RuleError {
    pub fn admin_required() -> Self {
        Self::Forbidden("admin or owner role required".into())
    }
}
