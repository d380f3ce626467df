//! A member's own API keys.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::decode::{body, name, reject_unknown, required, Result};
use super::{Decode, MemberRequest, RequestKind, Timestamp, NAME_PATTERN};
use crate::domain::KeyId;

/// `POST /keys`: a new key for the caller's own member; its secret is shown once.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    /// The key's name; tasks it claims are assigned to this name.
    #[schemars(length(min = 1, max = 200), regex(pattern = NAME_PATTERN))]
    pub name: String,
}

impl MemberRequest for CreateKey {
    const KIND: RequestKind = RequestKind::Write;
}

impl Decode for CreateKey {
    fn decode(v: &Value) -> Result<Self> {
        let obj = body(v)?;
        reject_unknown(obj, "", &["name"])?;
        Ok(CreateKey {
            name: name(required(obj, "name")?, "name")?,
        })
    }
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct KeyCreated {
    pub key_id: KeyId,
    pub name: String,
    /// The secret: shown this once, stored only as a hash.
    pub api_key: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct KeyView {
    pub key_id: KeyId,
    pub name: String,
    pub created_at: Timestamp,
    pub active: bool,
}

/// `GET /keys`: the caller's member's keys, never their secrets.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct KeyList {
    pub keys: Vec<KeyView>,
}
