//! The engine's vocabulary for every front end: typed requests and answers.
//!
//! HTTP, MCP and the planner speak to the engine only in these types. A
//! request is checked against its own JSON Schema and deserialized by
//! serde ([`Decode`]), which refuses a bad body with a [`ValidationError`]
//! naming the offending field; an answer is serialized by serde into the
//! wire shape. Both derive their JSON Schema (schemars), so tool input
//! schemas, the OpenAPI document and what is accepted come from the same
//! types and cannot drift from each other.
//! `serde_json::Value` appears only where content is free-form (metadata,
//! output, client envelopes).
//!
//! Decoders are pure and check shape only; rules that need an org's state
//! (its vocabulary, members, plan, encryption) run in the org actor.

mod content;
mod create;
mod decode;
mod dek;
mod events;
mod integers;
mod keys;
mod operator;
mod org;
mod reports;
mod schedules;
mod search;
mod stats;
mod tags;
mod task_views;
mod tasks;
mod teams;
mod webhooks;

use std::borrow::Cow;

use serde::{Serialize, Serializer};
use serde_json::Value;

pub use crate::domain::error::ValidationError;
pub use crate::domain::usage::RequestKind;
pub use content::*;
pub use create::*;
pub use decode::{decode_query, request_schema, Decode, MAX_BATCH};
pub use dek::*;
pub use events::*;
pub use keys::*;
pub use operator::*;
pub use org::*;
pub use reports::*;
pub use schedules::*;
pub use search::*;
pub use stats::*;
pub use tags::*;
pub use task_views::*;
pub use tasks::*;
pub use teams::*;
pub use webhooks::*;

/// JSON Schema patterns of the names decoders accept: not blank, no control
/// character or bidirectional override, and for
/// tags no comma, for teams no `#` or `/`.
pub(crate) const NAME_PATTERN: &str = r"^[^\u0000-\u001F\u007F-\u009F\u202A-\u202E\u2066-\u2069]*[^\s\u0000-\u001F\u007F-\u009F\u202A-\u202E\u2066-\u2069][^\u0000-\u001F\u007F-\u009F\u202A-\u202E\u2066-\u2069]*$";
pub(crate) const TAG_NAME_PATTERN: &str = r"^[^,\u0000-\u001F\u007F-\u009F\u202A-\u202E\u2066-\u2069]*[^,\s\u0000-\u001F\u007F-\u009F\u202A-\u202E\u2066-\u2069][^,\u0000-\u001F\u007F-\u009F\u202A-\u202E\u2066-\u2069]*$";
pub(crate) const TEAM_NAME_PATTERN: &str = r"^[^#/\u0000-\u001F\u007F-\u009F\u202A-\u202E\u2066-\u2069]*[^#/\s\u0000-\u001F\u007F-\u009F\u202A-\u202E\u2066-\u2069][^#/\u0000-\u001F\u007F-\u009F\u202A-\u202E\u2066-\u2069]*$";

/// Text that is not blank.
pub(crate) const NON_BLANK_PATTERN: &str = r"\S";

/// Text kept as it is in a text column: no NUL, which PostgreSQL's text
/// cannot hold.
pub(crate) const NO_NUL_PATTERN: &str = r"^[^\u0000]*$";

/// Text kept in a text column that is not blank either.
pub(crate) const NON_BLANK_NO_NUL_PATTERN: &str = r"^[^\u0000]*[^\s\u0000][^\u0000]*$";

pub(crate) use crate::domain::UUID_PATTERN;

/// Reads a field whose `null` means "clear it": `null` is `Some(None)`,
/// and an absent field stays `None` through `#[serde(default)]`.
pub(crate) fn double_option<'de, T, D>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    T: serde::Deserialize<'de>,
    D: serde::Deserializer<'de>,
{
    <Option<T> as serde::Deserialize>::deserialize(d).map(Some)
}

/// The request of an operation that takes none: any field is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoArguments {}

impl schemars::JsonSchema for NoArguments {
    fn schema_name() -> Cow<'static, str> {
        "NoArguments".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        // `properties`, though empty, makes a validator name the fields
        // it refuses.
        schemars::json_schema!({
            "type": "object",
            "properties": {},
            "additionalProperties": false,
        })
    }
}

impl Decode for NoArguments {
    const BODY_REQUIRED: bool = false;
}

/// A free-form JSON object (metadata, output).
pub type Object = serde_json::Map<String, Value>;

/// A point in time: milliseconds since the epoch, written as RFC 3339 UTC
/// with millisecond precision and a `Z` suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp(pub i64);

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::clock::format_ms(self.0))
    }
}

/// As it is written on the wire.
impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::clock::format_ms(self.0))
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        chrono::DateTime::parse_from_rfc3339(&s)
            .map(|t| Timestamp(t.timestamp_millis()))
            .map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for Timestamp {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Timestamp".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "format": "date-time" })
    }
}

#[cfg(test)]
mod tests {
    use schemars::{schema_for, JsonSchema};
    use serde_json::Value;

    use super::*;

    fn schema<T: JsonSchema>() -> Value {
        serde_json::to_value(schema_for!(T)).expect("schemas serialize")
    }

    /// The definition of `name` in a schema, or the schema itself.
    fn definition<'a>(schema: &'a Value, name: &str) -> &'a Value {
        schema
            .get("$defs")
            .and_then(|d| d.get(name))
            .unwrap_or(schema)
    }

    #[test]
    fn request_schemas_describe_the_wire_shape() {
        let create = schema::<CreateTasks>();
        assert_eq!(create["required"], serde_json::json!(["tasks"]));
        assert_eq!(create["properties"]["tasks"]["maxItems"], 25);
        let item = definition(&create, "NewTask");
        assert_eq!(item["required"], serde_json::json!(["title"]));
        assert!(item["properties"]["ref"].is_object(), "{item}");
        assert_eq!(item["properties"]["priority"]["default"], DEFAULT_PRIORITY);
        assert_eq!(item["additionalProperties"], false);

        let claim = schema::<ClaimRequest>();
        assert_eq!(claim["properties"]["lease_seconds"]["maximum"], 259_200);
        assert!(claim.get("required").is_none(), "{claim}");

        let list = schema::<ListTasks>();
        assert!(list["properties"]["status"].is_object(), "{list}");
        assert!(list["properties"]["parent_task_id"].is_object(), "{list}");
    }

    #[test]
    fn answer_schemas_name_the_fields_clients_read() {
        let claimed = schema::<ClaimedTask>();
        for field in ["task_id", "title", "status", "lease_id", "context"] {
            assert!(
                claimed["properties"][field].is_object(),
                "{field}: {claimed}"
            );
        }
        let status = serde_json::to_string(&schema::<crate::domain::TaskStatus>()).unwrap();
        assert!(status.contains("in_progress"), "{status}");
    }
}
