//! A member's own API keys.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::decode::{trim, Result};
use super::{Decode, Timestamp, NAME_PATTERN};
use crate::domain::KeyId;

/// `POST /keys`: a new key for the caller's own member; its secret is shown once.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    /// The key's name; tasks it claims are assigned to this name.
    #[schemars(length(min = 1, max = 200), regex(pattern = NAME_PATTERN))]
    pub name: String,
}

impl Decode for CreateKey {
    fn validate(&mut self) -> Result<()> {
        trim(&mut self.name);
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct KeyCreated {
    pub key_id: KeyId,
    pub name: String,
    /// The secret: shown this once, stored only as a hash.
    pub api_key: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct KeyView {
    pub key_id: KeyId,
    pub name: String,
    pub created_at: Timestamp,
    pub active: bool,
}

/// `GET /keys`: the caller's member's keys, never their secrets.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct KeyList {
    pub keys: Vec<KeyView>,
}
