//! `/org/dek`: a BYOK org's data key, wrapped by the client's own KMS. The
//! server stores it verbatim for the org's clients to fetch; it can never
//! unwrap it.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::decode::{body, err, reject_unknown, required, Result};
use super::{Decode, MemberRequest, RequestKind, Timestamp};
use crate::domain::OrgId;

/// The longest `wrapped_dek` or `kms_key_id` accepted, in bytes: room for
/// any KMS's wrapped key or key ARN, not for a payload.
pub const MAX_DEK_FIELD_BYTES: usize = 8_192;

/// `PUT /org/dek`: enrolls the org's data key, once.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PutOrgDek {
    /// The data key wrapped by the client's KMS, base64.
    pub wrapped_dek: String,
    /// The KMS key that unwraps it; stored verbatim, never parsed.
    pub kms_key_id: String,
}

impl MemberRequest for PutOrgDek {
    const KIND: RequestKind = RequestKind::Write;
}

/// A required string field of at most `MAX_DEK_FIELD_BYTES`, not blank.
fn dek_field(obj: &super::Object, key: &str) -> Result<String> {
    let s = required(obj, key)?
        .as_str()
        .ok_or_else(|| err(key, "must be a string"))?;
    if s.trim().is_empty() {
        return Err(err(key, "must not be empty"));
    }
    if s.len() > MAX_DEK_FIELD_BYTES {
        return Err(err(
            key,
            format!("must be at most {MAX_DEK_FIELD_BYTES} bytes"),
        ));
    }
    Ok(s.to_owned())
}

impl Decode for PutOrgDek {
    fn decode(v: &Value) -> Result<Self> {
        let obj = body(v)?;
        reject_unknown(obj, "", &["wrapped_dek", "kms_key_id"])?;
        let wrapped_dek = dek_field(obj, "wrapped_dek")?;
        if STANDARD.decode(&wrapped_dek).is_err() {
            return Err(err("wrapped_dek", "must be base64"));
        }
        Ok(PutOrgDek {
            wrapped_dek,
            kms_key_id: dek_field(obj, "kms_key_id")?,
        })
    }
}

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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Unavailable {
    /// Always false.
    pub available: bool,
    /// `byok` or `not_configured`.
    pub reason: &'static str,
}

impl Unavailable {
    pub fn because(reason: &'static str) -> Self {
        Self {
            available: false,
            reason,
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
