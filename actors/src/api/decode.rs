//! The small pieces every decoder is made of. Each refuses with the field's
//! path and a short reason (`tasks[2].priority: must be ...`).

use serde_json::Value;

use super::{Object, ValidationError};

pub(super) type Result<T> = std::result::Result<T, ValidationError>;

/// The most items a batch call carries.
pub const MAX_BATCH: usize = 25;

pub(super) fn err(field: &str, message: impl AsRef<str>) -> ValidationError {
    ValidationError::field(field, message)
}

/// The request body as an object.
pub(super) fn body(v: &Value) -> Result<&Object> {
    v.as_object()
        .ok_or_else(|| ValidationError::new("request body must be a JSON object"))
}

/// The request body as an object; an absent body (`null`) reads as `{}`.
pub(super) fn optional_body(v: &Value) -> Result<&Object> {
    static EMPTY: std::sync::OnceLock<Object> = std::sync::OnceLock::new();
    match v {
        Value::Null => Ok(EMPTY.get_or_init(Object::new)),
        other => body(other),
    }
}

/// `v` as an object, or `{what} must be a JSON object`.
pub(super) fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Object> {
    v.as_object()
        .ok_or_else(|| ValidationError::new(format!("{what} must be a JSON object")))
}

/// `{parent}.{name}`, the path of an item's field. Built by hand: a batch
/// decodes one for every field of every item, and the formatting
/// machinery costs more than the copy.
pub(super) fn field_path(parent: &str, name: &str) -> String {
    let mut path = String::with_capacity(parent.len() + 1 + name.len());
    path.push_str(parent);
    path.push('.');
    path.push_str(name);
    path
}

/// Refuses keys outside `known`, naming the first by its path under
/// `parent` (the item's path, or `""` for the body itself).
pub(super) fn reject_unknown(obj: &Object, parent: &str, known: &[&str]) -> Result<()> {
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) if parent.is_empty() => Err(ValidationError::new(format!("{k}: unknown field"))),
        Some(k) => Err(ValidationError::new(format!(
            "{}: unknown field",
            field_path(parent, k)
        ))),
        None => Ok(()),
    }
}

/// The `key` array of a batch body: present, an array, 1 to 25 items.
pub(super) fn batch<'a>(body: &'a Value, key: &str) -> Result<&'a Vec<Value>> {
    let obj = body.as_object().ok_or_else(|| {
        ValidationError::new(format!(
            "request body must be a JSON object with a `{key}` array"
        ))
    })?;
    reject_unknown(obj, "", &[key])?;
    let items = match obj.get(key) {
        None => return Err(err(key, "is required")),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(err(key, "must be an array")),
    };
    if items.is_empty() || items.len() > MAX_BATCH {
        return Err(err(
            key,
            format!("must hold 1 to {MAX_BATCH} items, got {}", items.len()),
        ));
    }
    Ok(items)
}

/// A present, non-null value of `key`.
pub(super) fn present<'a>(obj: &'a Object, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

pub(super) fn string(v: &Value, field: &str) -> Result<String> {
    v.as_str()
        .map(str::to_owned)
        .ok_or_else(|| err(field, "must be a string"))
}

pub(super) fn non_empty_string(v: &Value, field: &str) -> Result<String> {
    let s = string(v, field)?;
    if s.trim().is_empty() {
        return Err(err(field, "must not be empty"));
    }
    Ok(s)
}

/// A non-empty string, or `None` for null.
pub(super) fn optional_string(v: &Value, field: &str) -> Result<Option<String>> {
    match v {
        Value::Null => Ok(None),
        _ => non_empty_string(v, field).map(Some),
    }
}

pub(super) fn boolean(v: &Value, field: &str) -> Result<bool> {
    v.as_bool().ok_or_else(|| err(field, "must be a boolean"))
}

/// A list of strings checked one by one, deduplicated in order.
pub(super) fn string_list(
    v: &Value,
    field: &str,
    item: impl Fn(&Value, &str) -> Result<String>,
) -> Result<Vec<String>> {
    let items = v
        .as_array()
        .ok_or_else(|| err(field, "must be an array of strings"))?;
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for (i, t) in items.iter().enumerate() {
        let s = item(t, &format!("{field}[{i}]"))?;
        if !out.contains(&s) {
            out.push(s);
        }
    }
    Ok(out)
}

/// An email address, trimmed and lowercased.
pub(super) fn email(v: &Value, field: &str) -> Result<String> {
    let s = v
        .as_str()
        .map(str::trim)
        .filter(|s| is_email(s))
        .ok_or_else(|| err(field, "must be an email address"))?;
    Ok(s.to_lowercase())
}

/// Something shaped like `local@domain`, without white space.
pub fn is_email(s: &str) -> bool {
    match s.split_once('@') {
        Some((local, domain)) => {
            !local.is_empty() && !domain.is_empty() && !s.contains(char::is_whitespace)
        }
        None => false,
    }
}

/// The longest description in characters.
pub const MAX_DESCRIPTION: usize = 200;

/// A description: a string of at most 200 characters, or null.
pub(super) fn description(v: &Value, field: &str) -> Result<Option<String>> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) if s.chars().count() > MAX_DESCRIPTION => Err(err(
            field,
            format!("must be at most {MAX_DESCRIPTION} characters"),
        )),
        Value::String(s) => Ok(Some(s.clone())),
        _ => Err(err(field, "must be a string or null")),
    }
}

pub(super) fn optional<T>(
    obj: &super::Object,
    key: &str,
    field: &str,
    parse: impl Fn(&Value, &str) -> Result<T>,
) -> Result<Option<T>> {
    obj.get(key).map(|v| parse(v, field)).transpose()
}

/// The longest name (org, key) in characters.
pub const MAX_NAME_CHARS: usize = 200;

/// A name: a non-blank string of at most 200 characters, trimmed.
pub(super) fn name(v: &Value, field: &str) -> Result<String> {
    match v {
        Value::String(s) if s.trim().is_empty() => Err(err(field, "must not be empty")),
        Value::String(s) if s.chars().count() > MAX_NAME_CHARS => Err(err(
            field,
            format!("must be at most {MAX_NAME_CHARS} characters"),
        )),
        Value::String(s) => safe_name(s.trim(), field).map(str::to_owned),
        _ => Err(err(field, "must be a string")),
    }
}

/// Whether `c` would let a name rewrite what a terminal, a log or a page
/// shows: a control character or a bidirectional override.
fn is_unsafe_in_name(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Refuses a name (tag, team, key, org) with a control character or a
/// bidirectional override: names reach logs, terminals and pages.
pub(super) fn safe_name<'a>(name: &'a str, field: &str) -> Result<&'a str> {
    if name.chars().any(is_unsafe_in_name) {
        return Err(err(
            field,
            "must not contain control characters or bidirectional overrides",
        ));
    }
    Ok(name)
}

/// A required field: present and not null.
pub(super) fn required<'a>(obj: &'a Object, key: &str) -> Result<&'a Value> {
    present(obj, key).ok_or_else(|| err(key, "is required"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn names_refuse_controls_and_bidi_overrides() {
        assert_eq!(name(&json!(" acme "), "name").unwrap(), "acme");
        for bad in [
            "a\u{0007}b",
            "a\nb",
            "a\u{009B}b",
            "a\u{202E}b",
            "a\u{2066}b",
        ] {
            let e = name(&json!(bad), "name").unwrap_err();
            assert!(e.0.contains("control characters"), "{bad:?}: {e}");
        }
        assert!(name(&json!("naïve Ünïcode ✓"), "name").is_ok());
    }
}
