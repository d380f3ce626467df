//! How a request is read: the JSON is checked against the request type's
//! own JSON Schema (the one the OpenAPI document and the MCP tools
//! publish), then deserialized by serde, then the type's
//! [`Decode::validate`] runs what a schema cannot state. So what a client
//! is told it may send is exactly what is accepted, and a rule is written
//! once, as an attribute on the type. Integers follow JSON Schema's rule
//! everywhere (`3.0` is one; see `integers`).
//!
//! Refusals name the field by its path (`tasks[2].priority: ...`).

use std::any::TypeId;
use std::sync::LazyLock;

use dashmap::DashMap;
use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::paths::LocationSegment;
use jsonschema::{Draft, Validator};
use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::integers::Integers;
use super::{ValidationError, NAME_PATTERN, NON_BLANK_PATTERN, TAG_NAME_PATTERN};
use super::{NON_BLANK_NO_NUL_PATTERN, NO_NUL_PATTERN};
use super::{TEAM_NAME_PATTERN, UUID_PATTERN};

pub(super) type Result<T> = std::result::Result<T, ValidationError>;

/// The most items a batch call carries.
pub const MAX_BATCH: usize = 25;

/// A request read from JSON: a body, a tool's arguments, or a query
/// string turned into an object by [`decode_query`].
pub trait Decode: DeserializeOwned + JsonSchema + Send + 'static {
    /// Whether the request needs a body; a front end reads an absent body
    /// of one that does not as `{}`.
    const BODY_REQUIRED: bool = true;

    /// What the schema cannot state (a cycle among `ref:`s, a duplicate
    /// across items), and the normal form of what was read (trimmed
    /// names, lists without repeats). Runs after the schema and serde.
    fn validate(&mut self) -> Result<()> {
        Ok(())
    }

    /// The request `body` holds, or why it is refused.
    fn decode(body: &Value) -> Result<Self> {
        decode(body)
    }
}

/// The schema requests of `T` are checked against: JSON Schema 2020-12,
/// as they are read (the OpenAPI document uses the same settings).
pub fn request_schema<T: JsonSchema>() -> Value {
    SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

/// A request type's schema and its compiled validator.
struct Checked {
    schema: Value,
    validator: Validator,
}

/// `T`'s schema and validator, built on first use and kept for the
/// process: a request is read without generating a schema again.
fn checked<T: JsonSchema + 'static>() -> &'static Checked {
    static CHECKED: LazyLock<DashMap<TypeId, &'static Checked>> = LazyLock::new(DashMap::new);
    let id = TypeId::of::<T>();
    if let Some(c) = CHECKED.get(&id) {
        return *c;
    }
    let schema = request_schema::<T>();
    // The schemas come from the types' derives; every operation's request
    // is decoded by the black-box tests, so one that did not compile
    // would fail them.
    let validator = jsonschema::options()
        .with_draft(Draft::Draft202012)
        .should_validate_formats(true)
        .build(&schema)
        .unwrap_or_else(|e| panic!("the schema of {} compiles: {e}", T::schema_name()));
    *CHECKED
        .entry(id)
        .or_insert(Box::leak(Box::new(Checked { schema, validator })))
}

/// Checks `body` against `T`'s schema, deserializes it, and validates.
pub fn decode<T: Decode>(body: &Value) -> Result<T> {
    let validator = &checked::<T>().validator;
    // The quick yes first: collecting errors allocates.
    if !validator.is_valid(body) {
        if let Some(error) = validator.iter_errors(body).next() {
            return Err(refusal(&error));
        }
    }
    // Read again through `serde_path_to_error` only to name a refusal's
    // path: tracking the path of every value costs more than the read.
    let mut request = match T::deserialize(Integers(body)) {
        Ok(request) => request,
        Err(_) => return Err(serde_refusal::<T>(body)),
    };
    request.validate()?;
    Ok(request)
}

/// Why serde refuses `body` as a `T`, naming the field by its path.
fn serde_refusal<T: DeserializeOwned>(body: &Value) -> ValidationError {
    match serde_path_to_error::deserialize::<_, T>(Integers(body)) {
        Ok(_) => ValidationError::new("request body could not be read"),
        Err(e) => {
            let path = e.path().to_string();
            let message = e.into_inner().to_string();
            if path == "." {
                ValidationError::new(message)
            } else {
                ValidationError::field(path, message)
            }
        }
    }
}

/// Reads query parameters (each a string; a repeated one already joined
/// with commas) as `T`: a value whose property the schema types as an
/// integer or a number is read as a JSON number when it is one (`5`,
/// `5.0`, `1e3`: then the schema and the integer rule decide, as for a
/// body), one typed as a boolean as `true` or `false`; anything else stays
/// text and the schema refuses it.
pub fn decode_query<T: Decode>(pairs: Vec<(String, String)>) -> Result<T> {
    let schema = &checked::<T>().schema;
    let mut object = Map::new();
    for (key, text) in pairs {
        let kinds = schema["properties"][&key]["type"].clone();
        let is = |kind: &str| match &kinds {
            Value::String(k) => k == kind,
            Value::Array(ks) => ks.iter().any(|k| k == kind),
            _ => false,
        };
        let value = if is("integer") || is("number") {
            query_number(&text)
        } else if is("boolean") {
            match text.as_str() {
                "true" => Some(Value::Bool(true)),
                "false" => Some(Value::Bool(false)),
                _ => None,
            }
        } else {
            None
        };
        object.insert(key, value.unwrap_or(Value::String(text)));
    }
    decode(&Value::Object(object))
}

/// A query value as a JSON number, when it is one; a sign or zeros before
/// the digits are taken as an integer's (`+5`, `007`).
fn query_number(text: &str) -> Option<Value> {
    if let Ok(integer) = text.parse::<i64>() {
        return Some(Value::from(integer));
    }
    if text.trim() != text {
        return None;
    }
    serde_json::from_str::<serde_json::Number>(text)
        .ok()
        .map(Value::Number)
}

/// `tasks[0].title` for the instance path `/tasks/0/title`.
fn dotted<'a>(segments: impl Iterator<Item = LocationSegment<'a>>) -> String {
    let mut out = String::new();
    for segment in segments {
        match segment {
            LocationSegment::Property(name) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&name);
            }
            LocationSegment::Index(i) => {
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
        }
    }
    out
}

/// `{parent}.{name}`, or `name` at the top.
fn child(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_owned()
    } else {
        format!("{parent}.{name}")
    }
}

/// The first schema violation, in the words clients read.
fn refusal(error: &jsonschema::ValidationError<'_>) -> ValidationError {
    let path = dotted(error.instance_path().iter());
    let at = |message: String| {
        if path.is_empty() {
            ValidationError::new(message)
        } else {
            ValidationError::field(&path, message)
        }
    };
    match error.kind() {
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().unwrap_or_default();
            ValidationError::field(child(&path, name), "is required")
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            let name = unexpected.first().map(String::as_str).unwrap_or_default();
            ValidationError::field(child(&path, name), "unknown field")
        }
        ValidationErrorKind::Type { kind } if path.is_empty() && !error.instance().is_object() => {
            let _ = kind;
            ValidationError::new("request body must be a JSON object")
        }
        ValidationErrorKind::Type { kind } => at(match error.instance().as_ref() {
            Value::Null => "must not be null".to_owned(),
            _ => format!("must be {}", type_names(kind)),
        }),
        ValidationErrorKind::MinLength { limit: 1 } => at("must not be empty".to_owned()),
        ValidationErrorKind::MinLength { limit } => {
            at(format!("must be at least {limit} characters"))
        }
        ValidationErrorKind::MaxLength { limit } => {
            at(format!("must be at most {limit} characters"))
        }
        ValidationErrorKind::MinItems { limit } | ValidationErrorKind::MaxItems { limit } => {
            let _ = limit;
            at(items_bounds(error))
        }
        ValidationErrorKind::Minimum { .. } | ValidationErrorKind::Maximum { .. } => {
            at(number_bounds(error))
        }
        ValidationErrorKind::Pattern { pattern } => at(pattern_message(pattern)),
        ValidationErrorKind::Enum { options } => at(format!(
            "must be one of {}",
            options
                .as_array()
                .into_iter()
                .flatten()
                .map(|o| o.as_str().map_or_else(|| o.to_string(), str::to_owned))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        ValidationErrorKind::Constant { expected_value } => at(format!("must be {expected_value}")),
        ValidationErrorKind::Format { format } => at(match format.as_str() {
            "uuid" => "must be a canonical UUID string".to_owned(),
            "email" => "must be an email address".to_owned(),
            "date-time" => "must be an RFC 3339 date-time".to_owned(),
            other => format!("must be a valid {other}"),
        }),
        ValidationErrorKind::MinProperties { .. } => at("must not be empty".to_owned()),
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            // The alternative of the value's own type says what is wrong.
            let fitting = context.iter().find(|errors| {
                !errors.is_empty()
                    && !errors.iter().any(|e| {
                        matches!(e.kind(), ValidationErrorKind::Type { .. })
                            && e.instance_path() == error.instance_path()
                    })
            });
            match fitting.and_then(|errors| errors.first()) {
                Some(inner) => refusal(inner),
                None => at("is not any of the accepted forms".to_owned()),
            }
        }
        ValidationErrorKind::PropertyNames { error: name } => {
            let name = name.instance();
            let name = name
                .as_str()
                .map_or_else(|| name.to_string(), str::to_owned);
            ValidationError::field(child(&path, &name), "is not an accepted name")
        }
        ValidationErrorKind::Not { schema } => {
            not_allowed(&path, schema, error.instance().as_ref())
                .unwrap_or_else(|| at("is not an accepted form".to_owned()))
        }
        ValidationErrorKind::UniqueItems => at("must not repeat an item".to_owned()),
        // `additionalProperties: false` without `properties` refuses each
        // field on its own.
        ValidationErrorKind::FalseSchema => at("unknown field".to_owned()),
        _ => at(error.to_string()),
    }
}

/// A `not` of `required` sets (fields that must not be given, alone or
/// together) names the field given: `task.ref: is not allowed here`, or
/// `delay_seconds: cannot be given with run_at`.
fn not_allowed(path: &str, schema: &Value, instance: &Value) -> Option<ValidationError> {
    let sets = match schema.get("anyOf") {
        Some(Value::Array(alternatives)) => alternatives.iter().collect(),
        _ => vec![schema],
    };
    let object = instance.as_object()?;
    sets.into_iter().find_map(|set| {
        let names: Vec<&str> = set
            .get("required")?
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        if !names.iter().all(|n| object.contains_key(*n)) {
            return None;
        }
        match names.as_slice() {
            [one] => Some(ValidationError::field(
                child(path, one),
                "is not allowed here",
            )),
            [first @ .., last] => Some(ValidationError::field(
                child(path, last),
                format!("cannot be given with {}", first.join(", ")),
            )),
            [] => None,
        }
    })
}

fn type_names(kind: &TypeKind) -> String {
    let article = |t: &str| match t {
        "array" | "integer" | "object" => format!("an {t}"),
        "null" => "null".to_owned(),
        other => format!("a {other}"),
    };
    let names: Vec<String> = match kind {
        TypeKind::Single(t) => vec![t.to_string()],
        TypeKind::Multiple(ts) => ts
            .iter()
            .map(|t| t.to_string())
            .filter(|t| t != "null")
            .collect(),
    };
    names
        .iter()
        .map(|t| {
            if t == "object" {
                "a JSON object".to_owned()
            } else {
                article(t)
            }
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

/// `must hold 1 to 25 items`, from the schema that refused the value.
fn items_bounds(error: &jsonschema::ValidationError<'_>) -> String {
    let len = error.instance().as_array().map_or(0, Vec::len);
    match error.kind() {
        ValidationErrorKind::MinItems { limit } => {
            format!("must hold at least {limit} items, got {len}")
        }
        ValidationErrorKind::MaxItems { limit } => {
            format!("must hold at most {limit} items, got {len}")
        }
        _ => String::new(),
    }
}

fn number_bounds(error: &jsonschema::ValidationError<'_>) -> String {
    match error.kind() {
        ValidationErrorKind::Minimum { limit } => format!("must be at least {limit}"),
        ValidationErrorKind::Maximum { limit } => format!("must be at most {limit}"),
        _ => String::new(),
    }
}

/// What a pattern of ours means, said plainly.
fn pattern_message(pattern: &str) -> String {
    const NAME: &str = "must not be blank or contain control characters or bidirectional overrides";
    if pattern == NAME_PATTERN {
        NAME.to_owned()
    } else if pattern == TAG_NAME_PATTERN {
        format!("{NAME}, nor a comma")
    } else if pattern == TEAM_NAME_PATTERN {
        format!("{NAME}, nor '#' or '/'")
    } else if pattern == NON_BLANK_PATTERN {
        "must not be blank".to_owned()
    } else if pattern == NON_BLANK_NO_NUL_PATTERN {
        "must not be blank or hold a NUL character".to_owned()
    } else if pattern == NO_NUL_PATTERN {
        "must not hold a NUL character".to_owned()
    } else if pattern == UUID_PATTERN {
        "must be a canonical UUID string".to_owned()
    } else {
        format!("must match {pattern}")
    }
}

/// Trims `s` in place.
pub(super) fn trim(s: &mut String) {
    let trimmed = s.trim();
    if trimmed.len() != s.len() {
        *s = trimmed.to_owned();
    }
}

/// Drops repeats, keeping the first of each in order.
pub(super) fn dedup<T: PartialEq>(items: &mut Vec<T>) {
    let mut i = 0;
    while i < items.len() {
        if items[..i].contains(&items[i]) {
            items.remove(i);
        } else {
            i += 1;
        }
    }
}

/// Trims each name and drops repeats.
pub(super) fn names(items: &mut Vec<String>) {
    items.iter_mut().for_each(trim);
    dedup(items);
}

/// An email address as stored: trimmed and lowercased.
pub(super) fn normal_email(s: &mut String) {
    *s = s.trim().to_lowercase();
}

pub(super) fn err(field: &str, message: impl AsRef<str>) -> ValidationError {
    ValidationError::field(field, message)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Item {
        #[schemars(length(min = 1, max = 64), regex(pattern = TAG_NAME_PATTERN))]
        name: String,
        #[serde(default)]
        #[schemars(range(min = 1, max = 5))]
        priority: Option<u8>,
    }

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Batch {
        #[schemars(length(min = 1, max = 25))]
        items: Vec<Item>,
        #[serde(default)]
        full: bool,
    }

    impl Decode for Batch {}

    fn refused(body: Value) -> String {
        Batch::decode(&body).unwrap_err().0
    }

    #[test]
    fn refusals_name_the_field_by_its_path() {
        assert_eq!(
            refused(json!({"items": [{"name": "a"}, {"name": "b", "priority": 6}]})),
            "items[1].priority: must be at most 5"
        );
        assert_eq!(
            refused(json!({"items": [{"name": "a", "colour": 1}]})),
            "items[0].colour: unknown field"
        );
        assert_eq!(
            refused(json!({"items": [{}]})),
            "items[0].name: is required"
        );
        assert_eq!(refused(json!({})), "items: is required");
        assert_eq!(
            refused(json!({"items": []})),
            "items: must hold at least 1 items, got 0"
        );
        assert_eq!(refused(json!([])), "request body must be a JSON object");
        assert_eq!(
            refused(json!({"items": [{"name": null}]})),
            "items[0].name: must not be null"
        );
        assert!(refused(json!({"items": [{"name": "a\u{202E}b"}]})).contains("bidirectional"));
        assert!(refused(json!({"items": [{"name": "a,b"}]})).contains("comma"));
    }

    #[test]
    fn names_refuse_controls_and_bidi_overrides() {
        for bad in [
            "a\u{0007}b",
            "a\nb",
            "a\u{009B}b",
            "a\u{202E}b",
            "a\u{2066}b",
            "  ",
        ] {
            let e = refused(json!({"items": [{"name": bad}]}));
            assert!(
                e.starts_with("items[0].name: must not be blank"),
                "{bad:?}: {e}"
            );
        }
        let batch = Batch::decode(&json!({"items": [{"name": "naïve Ünïcode ✓"}]})).unwrap();
        assert_eq!(
            (
                batch.items[0].name.as_str(),
                batch.items[0].priority,
                batch.full
            ),
            ("naïve Ünïcode ✓", None, false)
        );
    }

    #[test]
    fn query_values_are_read_as_their_schema_types() {
        let pairs = |p: &[(&str, &str)]| {
            p.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        };
        #[derive(Debug, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        struct Query {
            #[serde(default)]
            #[schemars(range(min = 1, max = 200))]
            limit: Option<u32>,
            #[serde(default)]
            full: bool,
            #[serde(default)]
            cursor: Option<String>,
        }
        impl Decode for Query {}
        let q: Query =
            decode_query(pairs(&[("limit", "20"), ("full", "true"), ("cursor", "7")])).unwrap();
        assert_eq!(
            (q.limit, q.full, q.cursor.as_deref()),
            (Some(20), true, Some("7"))
        );
        let e = decode_query::<Query>(pairs(&[("limit", "x")])).unwrap_err();
        assert_eq!(e.0, "limit: must be an integer");
        // The integers of a body: a number without a fraction.
        for integral in ["20.0", "2e1", "+20", "020"] {
            let q: Query = decode_query(pairs(&[("limit", integral)])).unwrap();
            assert_eq!(q.limit, Some(20), "{integral}");
        }
        for refused in ["20.5", "inf", "NaN", " 20", "20 "] {
            let e = decode_query::<Query>(pairs(&[("limit", refused)])).unwrap_err();
            assert_eq!(e.0, "limit: must be an integer", "{refused}");
        }
        let e = decode_query::<Query>(pairs(&[("limit", "2e3")])).unwrap_err();
        assert_eq!(e.0, "limit: must be at most 200");
        let e = decode_query::<Query>(pairs(&[("full", "yes")])).unwrap_err();
        assert_eq!(e.0, "full: must be a boolean");
        let e = decode_query::<Query>(pairs(&[("zzz", "1")])).unwrap_err();
        assert_eq!(e.0, "zzz: unknown field");
    }

    #[test]
    fn integral_floats_read_as_integers() {
        let batch = Batch::decode(&json!({"items": [{"name": "a", "priority": 3.0}]})).unwrap();
        assert_eq!(batch.items[0].priority, Some(3));
        let e = Batch::decode(&json!({"items": [{"name": "a", "priority": 2.5}]})).unwrap_err();
        assert_eq!(e.0, "items[0].priority: must be an integer");
        // A free-form object keeps its numbers as they were written.
        #[derive(Debug, Deserialize, JsonSchema)]
        struct Free {
            metadata: Value,
        }
        impl Decode for Free {}
        let free = Free::decode(&json!({"metadata": {"ratio": 2.0}})).unwrap();
        assert!(free.metadata["ratio"].is_f64(), "{:?}", free.metadata);
    }

    #[test]
    fn dedup_keeps_the_first_of_each() {
        let mut v = vec![" b", "a", "b ", "a"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        names(&mut v);
        assert_eq!(v, ["b", "a"]);
    }
}
