//! `/org/dek`: a BYOK org's data key, wrapped by the client's own KMS. The
//! server stores it verbatim for the org's clients to fetch; it can never
//! unwrap it.

use std::borrow::Cow;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Decode, Timestamp, NON_BLANK_NO_NUL_PATTERN};
use crate::domain::OrgId;

/// The longest `wrapped_dek` or `kms_key_id` accepted, in characters: room
/// for any KMS's wrapped key or key ARN, not for a payload.
pub const MAX_DEK_FIELD_CHARS: usize = 8_192;

/// `PUT /org/dek`: enrolls the org's data key, once.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PutOrgDek {
    /// The data key wrapped by the client's KMS, base64 (padded, canonical).
    #[schemars(length(min = 4, max = MAX_DEK_FIELD_CHARS), regex(pattern = BASE64_PATTERN))]
    pub wrapped_dek: String,
    /// The KMS key that unwraps it; stored verbatim, never parsed.
    #[schemars(length(min = 1, max = MAX_DEK_FIELD_CHARS), regex(pattern = NON_BLANK_NO_NUL_PATTERN))]
    pub kms_key_id: String,
}

/// Standard base64 with padding, whose last character carries no stray
/// bits: what the `base64` crate's standard engine decodes.
const BASE64_PATTERN: &str =
    "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$";

impl Decode for PutOrgDek {}

/// `GET /org/dek`: the enrolled key, as the owner gave it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct OrgDekView {
    pub wrapped_dek: String,
    pub kms_key_id: String,
    /// Always `client_byok`.
    pub key_provider: &'static str,
    pub org_id: OrgId,
    pub created_at: Timestamp,
}

/// The answer to a first `PUT /org/dek`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct OrgDekCreated {
    /// Always `created`.
    pub status: &'static str,
    pub org_id: OrgId,
}

/// What a feature that must read content answers for an org whose content
/// the server cannot read, or that has no model for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Unavailable {
    /// Always false.
    pub available: bool,
    /// `byok` or `not_configured`.
    pub reason: Cow<'static, str>,
}

impl Unavailable {
    pub fn because(reason: &'static str) -> Self {
        Self {
            available: false,
            reason: Cow::Borrowed(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_dek_needs_both_strings_and_base64() {
        let ok =
            PutOrgDek::decode(&json!({"wrapped_dek": "AAEC", "kms_key_id": "arn:aws:kms:k/1"}))
                .unwrap();
        assert_eq!(ok.kms_key_id, "arn:aws:kms:k/1");
        for (body, field) in [
            (json!({"kms_key_id": "k"}), "wrapped_dek"),
            (json!({"wrapped_dek": "AAEC"}), "kms_key_id"),
            (json!({"wrapped_dek": 5, "kms_key_id": "k"}), "wrapped_dek"),
            (
                json!({"wrapped_dek": "AAEC", "kms_key_id": ["k"]}),
                "kms_key_id",
            ),
            (
                json!({"wrapped_dek": "not base64!", "kms_key_id": "k"}),
                "wrapped_dek",
            ),
            (
                json!({"wrapped_dek": "AAEC", "kms_key_id": " "}),
                "kms_key_id",
            ),
        ] {
            let e = PutOrgDek::decode(&body).unwrap_err();
            assert!(e.0.starts_with(field), "{body}: {e}");
        }
    }
}
