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
/// The longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 1_000;
/// The longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 65_536;
/// The largest metadata, output, note or client envelope, in bytes (as
/// compact JSON, or as text for a note).
pub const MAX_CONTENT_BYTES: usize = 65_536;

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

/// Refuses a JSON value larger than `MAX_CONTENT_BYTES` as compact JSON.
fn check_bytes(v: &Value, field: &str) -> Result<()> {
    let mut counter = ByteCounter(0);
    // Writing to a counter cannot fail.
    let _ = serde_json::to_writer(&mut counter, v);
    if counter.0 > MAX_CONTENT_BYTES {
        return Err(err(
            field,
            format!("must be at most {MAX_CONTENT_BYTES} bytes as compact JSON"),
        ));
    }
    Ok(())
}

/// Counts what is written, to size a value without building it.
struct ByteCounter(usize);

impl std::io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A text field of at most `max_chars` characters, or an envelope object
/// in its place (of at most `MAX_CONTENT_BYTES`).
fn bounded_text(v: &Value, field: &str, max_chars: usize) -> Result<Text> {
    match v {
        Value::String(s) if s.chars().count() > max_chars => Err(err(
            field,
            format!("must be at most {max_chars} characters"),
        )),
        Value::String(s) => Ok(Text::Plain(s.clone())),
        Value::Object(o) if is_envelope(v) => {
            check_bytes(v, field)?;
            Ok(Text::Envelope(o.clone()))
        }
        _ => Err(err(field, "must be a string")),
    }
}

/// A description.
pub(super) fn text(v: &Value, field: &str) -> Result<Text> {
    bounded_text(v, field, MAX_DESCRIPTION_CHARS)
}

/// A title: a non-blank string or an envelope.
pub(super) fn title(v: &Value, field: &str) -> Result<Text> {
    let t = bounded_text(v, field, MAX_TITLE_CHARS)?;
    if matches!(&t, Text::Plain(s) if s.trim().is_empty()) {
        return Err(err(field, "must not be empty"));
    }
    Ok(t)
}

/// A state event's note: non-blank text of at most `MAX_CONTENT_BYTES`,
/// or `None` for null.
pub(super) fn note(v: &Value, field: &str) -> Result<Option<String>> {
    let note = super::decode::optional_string(v, field)?;
    if note.as_ref().is_some_and(|n| n.len() > MAX_CONTENT_BYTES) {
        return Err(err(
            field,
            format!("must be at most {MAX_CONTENT_BYTES} bytes"),
        ));
    }
    Ok(note)
}

/// An object field (metadata, output).
pub(super) fn content_object(v: &Value, field: &str) -> Result<Object> {
    let object = v
        .as_object()
        .ok_or_else(|| err(field, "must be a JSON object"))?;
    check_bytes(v, field)?;
    Ok(object.clone())
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn content_is_bounded() {
        assert!(title(&json!("t".repeat(MAX_TITLE_CHARS)), "title").is_ok());
        let e = title(&json!("t".repeat(MAX_TITLE_CHARS + 1)), "title").unwrap_err();
        assert_eq!(e.0, "title: must be at most 1000 characters");
        assert!(text(&json!("é".repeat(MAX_DESCRIPTION_CHARS)), "d").is_ok());
        assert!(text(&json!("d".repeat(MAX_DESCRIPTION_CHARS + 1)), "d").is_err());
        // {"k":"..."} is 8 bytes around the string.
        let fits = json!({ "k": "x".repeat(MAX_CONTENT_BYTES - 8) });
        assert!(content_object(&fits, "metadata").is_ok());
        let over = json!({ "k": "x".repeat(MAX_CONTENT_BYTES - 7) });
        let e = content_object(&over, "metadata").unwrap_err();
        assert!(
            e.0.starts_with("metadata: must be at most 65536 bytes"),
            "{e}"
        );
        assert!(note(&json!("n".repeat(MAX_CONTENT_BYTES + 1)), "note").is_err());
        let envelope = json!({ ENVELOPE_KEY: { "c": "x".repeat(MAX_CONTENT_BYTES) } });
        assert!(title(&envelope, "title").is_err());
    }
}
