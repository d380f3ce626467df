//! Task content as clients send it: text or, for a BYOK org, a client
//! envelope in its place; free-form objects; and the rule that a managed
//! org refuses envelopes.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::decode::{err, Result};
use super::{Object, ValidationError, NON_BLANK_PATTERN};

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

    /// The text, unless it is an envelope.
    pub fn as_plain(&self) -> Option<&str> {
        match self {
            Text::Plain(s) => Some(s),
            Text::Envelope(_) => None,
        }
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Self {
        Text::Plain(s.to_owned())
    }
}

/// Whether the org encrypts for itself (BYOK) or lets the server do it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentPolicy {
    Managed,
    ClientEncrypted,
}

/// Refuses a JSON value larger than `MAX_CONTENT_BYTES` as compact JSON:
/// a size in bytes, which no JSON Schema keyword measures.
fn check_bytes<T: Serialize>(v: &T, field: &str) -> Result<()> {
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

/// The sizes in bytes of a title or description: an envelope's.
pub(super) fn check_text_bytes(t: Option<&Text>, field: impl FnOnce() -> String) -> Result<()> {
    match t {
        Some(Text::Envelope(o)) => check_bytes(o, &field()),
        _ => Ok(()),
    }
}

/// The size in bytes of a note: its text, or its envelope as JSON.
pub(super) fn check_note_bytes(t: Option<&Text>, field: impl FnOnce() -> String) -> Result<()> {
    match t {
        Some(Text::Plain(s)) if s.len() > MAX_CONTENT_BYTES => Err(err(
            &field(),
            format!("must be at most {MAX_CONTENT_BYTES} bytes"),
        )),
        Some(Text::Envelope(o)) => check_bytes(o, &field()),
        _ => Ok(()),
    }
}

/// The size in bytes of metadata or output, as compact JSON.
pub(super) fn check_object_bytes(o: Option<&Object>, field: impl FnOnce() -> String) -> Result<()> {
    match o {
        Some(o) => check_bytes(o, &field()),
        None => Ok(()),
    }
}

/// A client envelope: an object holding the reserved key.
fn envelope_schema() -> Value {
    json!({
        "type": "object",
        "required": [ENVELOPE_KEY],
        "description": "a client-encrypted envelope (BYOK orgs only)",
    })
}

fn text_schema(text: Value, nullable: bool) -> schemars::Schema {
    let mut options = vec![text, envelope_schema()];
    if nullable {
        options.push(json!({ "type": "null" }));
    }
    let schema = json!({ "anyOf": options });
    schemars::Schema::try_from(schema).unwrap_or_default()
}

/// A title: non-blank text of at most 1,000 characters, or an envelope.
pub(super) fn title_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    text_schema(
        json!({ "type": "string", "minLength": 1, "maxLength": MAX_TITLE_CHARS, "pattern": NON_BLANK_PATTERN }),
        false,
    )
}

fn description_text() -> Value {
    json!({ "type": "string", "maxLength": MAX_DESCRIPTION_CHARS })
}

/// A description: text of at most 65,536 characters, or an envelope.
pub(super) fn description_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    text_schema(description_text(), false)
}

/// A description, or `null`.
pub(super) fn nullable_description_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    text_schema(description_text(), true)
}

/// A note, or `null`: non-blank text (at most 65,536 bytes), or an envelope.
pub(super) fn note_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    text_schema(
        json!({ "type": "string", "minLength": 1, "maxLength": MAX_CONTENT_BYTES, "pattern": NON_BLANK_PATTERN }),
        true,
    )
}

/// Merges a metadata patch key by key. A client envelope cannot be merged
/// into or out of: when the patch or the current value is one, the patch
/// replaces the whole value.
pub fn merge_metadata(current: &mut Object, patch: &Object) {
    if patch.contains_key(ENVELOPE_KEY) || current.contains_key(ENVELOPE_KEY) {
        *current = patch.clone();
        return;
    }
    for (k, v) in patch {
        current.insert(k.clone(), v.clone());
    }
}

/// How a note is stored before sealing: plain text as its UTF-8 bytes, an
/// envelope as a marker byte that UTF-8 never starts with, then its JSON.
pub fn note_bytes(note: &Text) -> Vec<u8> {
    match note {
        Text::Plain(s) => s.as_bytes().to_vec(),
        Text::Envelope(o) => {
            let mut out = vec![NOTE_ENVELOPE];
            // Writing an object of JSON values cannot fail.
            let _ = serde_json::to_writer(&mut out, o);
            out
        }
    }
}

/// The note [`note_bytes`] stored; `None` for an envelope that does not parse.
pub fn note_from_bytes(bytes: &[u8]) -> Option<Text> {
    match bytes.split_first() {
        Some((&NOTE_ENVELOPE, json)) => serde_json::from_slice(json).ok().map(Text::Envelope),
        _ => Some(Text::Plain(String::from_utf8_lossy(bytes).into_owned())),
    }
}

/// Never the first byte of UTF-8 text.
const NOTE_ENVELOPE: u8 = 0xFF;

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
        use super::super::{CreateTasks, Decode, UpdateTasks};
        let create = |task: Value| CreateTasks::decode(&json!({ "tasks": [task] }));
        assert!(create(json!({"title": "t".repeat(MAX_TITLE_CHARS)})).is_ok());
        let e = create(json!({"title": "t".repeat(MAX_TITLE_CHARS + 1)})).unwrap_err();
        assert_eq!(e.0, "tasks[0].title: must be at most 1000 characters");
        let long = |n| "é".repeat(n);
        assert!(create(json!({"title": "t", "description": long(MAX_DESCRIPTION_CHARS)})).is_ok());
        assert!(
            create(json!({"title": "t", "description": long(MAX_DESCRIPTION_CHARS + 1)})).is_err()
        );
        // {"k":"..."} is 8 bytes around the string.
        let fits = json!({ "k": "x".repeat(MAX_CONTENT_BYTES - 8) });
        assert!(create(json!({"title": "t", "metadata": fits})).is_ok());
        let over = json!({ "k": "x".repeat(MAX_CONTENT_BYTES - 7) });
        let e = create(json!({"title": "t", "metadata": over})).unwrap_err();
        assert!(
            e.0.starts_with("tasks[0].metadata: must be at most 65536 bytes"),
            "{e}"
        );
        let envelope = json!({ ENVELOPE_KEY: { "c": "x".repeat(MAX_CONTENT_BYTES) } });
        assert!(create(json!({ "title": envelope })).is_err());
        let id = "0190a0c2-7f3e-7c1a-9b2d-3e4f5a6b7c8d";
        let note = |n: &str| UpdateTasks::decode(&json!({"updates": [{"task_id": id, "note": n}]}));
        assert!(note(&"n".repeat(MAX_CONTENT_BYTES)).is_ok());
        // Within the characters, over the bytes.
        let e = note(&"é".repeat(MAX_CONTENT_BYTES / 2 + 1)).unwrap_err();
        assert!(
            e.0.starts_with("updates[0].note: must be at most 65536 bytes"),
            "{e}"
        );
        assert!(note(" ").is_err());
    }

    fn object(v: Value) -> Object {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn metadata_merges_key_by_key_but_envelopes_replace() {
        let mut m = object(json!({"a": 1, "b": 2}));
        merge_metadata(&mut m, &object(json!({"b": 3, "c": 4})));
        assert_eq!(Value::Object(m.clone()), json!({"a": 1, "b": 3, "c": 4}));
        let envelope = object(json!({ENVELOPE_KEY: {"ct": "x"}}));
        merge_metadata(&mut m, &envelope);
        assert_eq!(m, envelope);
        merge_metadata(&mut m, &object(json!({"plain": true})));
        assert_eq!(Value::Object(m), json!({"plain": true}));
    }

    #[test]
    fn notes_round_trip_as_text_or_envelope() {
        let plain = Text::Plain("{\"looks\": \"like json\"}".into());
        assert_eq!(note_from_bytes(&note_bytes(&plain)), Some(plain));
        let envelope = Text::Envelope(object(json!({ENVELOPE_KEY: {"v": 1, "ct": "AA=="}})));
        assert_eq!(note_from_bytes(&note_bytes(&envelope)), Some(envelope));
        assert_eq!(note_from_bytes(&[NOTE_ENVELOPE, b'x']), None);
    }

    #[test]
    fn envelopes_keep_their_key_order() {
        let text = r#"{"__service_enc__":{"v":1,"iv":"aXY=","ct":"dA==","alg":"A256GCM"}}"#;
        let t: Text = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_string(&t).unwrap(), text);
    }
}
