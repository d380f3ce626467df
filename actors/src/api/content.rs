//! Task content as clients send it: text or, for a BYOK org, a client
//! envelope in its place; free-form objects; and the rule that a managed
//! org refuses envelopes.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::decode::{err, Result};
use super::{Object, ValidationError};

/// The reserved key of a client-encrypted envelope.
pub const ENVELOPE_KEY: &str = "__service_enc__";

/// A title or description: plain text, or for a BYOK org a client envelope
/// (`{"__service_enc__": {...}}`) in its place, kept byte for byte.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Text {
    Plain(String),
    Envelope(Object),
}

impl Text {
    pub fn is_envelope(&self) -> bool {
        matches!(self, Text::Envelope(_))
    }
}

/// Whether the org encrypts for itself (BYOK) or lets the server do it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentPolicy {
    Managed,
    ClientEncrypted,
}

fn is_envelope(v: &Value) -> bool {
    v.as_object().is_some_and(|o| o.contains_key(ENVELOPE_KEY))
}

/// A text field: a string, or an envelope object in its place.
pub(super) fn text(v: &Value, field: &str) -> Result<Text> {
    match v {
        Value::String(s) => Ok(Text::Plain(s.clone())),
        Value::Object(o) if is_envelope(v) => Ok(Text::Envelope(o.clone())),
        _ => Err(err(field, "must be a string")),
    }
}

/// A title: a non-blank string or an envelope.
pub(super) fn title(v: &Value, field: &str) -> Result<Text> {
    let t = text(v, field)?;
    if matches!(&t, Text::Plain(s) if s.trim().is_empty()) {
        return Err(err(field, "must not be empty"));
    }
    Ok(t)
}

/// An object field (metadata, output).
pub(super) fn content_object(v: &Value, field: &str) -> Result<Object> {
    v.as_object()
        .cloned()
        .ok_or_else(|| err(field, "must be a JSON object"))
}

/// A managed org refuses client envelopes: `field` carries one.
fn managed_rejects(field: &str) -> ValidationError {
    err(
        field,
        "client-encrypted content (__service_enc__) is not accepted by a server-managed org",
    )
}

pub(super) fn check_text(t: Option<&Text>, field: impl FnOnce() -> String) -> Result<()> {
    match t {
        Some(t) if t.is_envelope() => Err(managed_rejects(&field())),
        _ => Ok(()),
    }
}

pub(super) fn check_object(o: Option<&Object>, field: impl FnOnce() -> String) -> Result<()> {
    match o {
        Some(o) if o.contains_key(ENVELOPE_KEY) => Err(managed_rejects(&field())),
        _ => Ok(()),
    }
}
