//! Identifier newtypes. All ids are UUIDs rendered as canonical lowercase
//! hyphenated strings; server-minted ones are UUID v7 (time ordered).

use std::fmt;
use std::str::FromStr;

use uuid::Uuid;

/// A UUID in its hyphenated form, either case: what ids parse from.
pub const UUID_PATTERN: &str =
    "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";

/// The length of an id's canonical text.
pub const ID_TEXT_LEN: usize = 36;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub Uuid);

        impl $name {
            pub fn new_v7() -> Self {
                Self(Uuid::now_v7())
            }

            /// The canonical text, written into `buf` without the formatting
            /// machinery: every stored row and every answer renders ids.
            pub fn encode<'b>(&self, buf: &'b mut [u8; ID_TEXT_LEN]) -> &'b str {
                self.0.hyphenated().encode_lower(buf)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(self.encode(&mut [0; ID_TEXT_LEN]))
            }
        }

        impl FromStr for $name {
            type Err = ();
            /// Accepts only the canonical hyphenated form (either case).
            fn from_str(s: &str) -> Result<Self, ()> {
                if s.len() != 36 {
                    return Err(());
                }
                Uuid::parse_str(s).map(Self).map_err(|_| ())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.encode(&mut [0; ID_TEXT_LEN]))
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse()
                    .map_err(|_| serde::de::Error::custom("expected a canonical UUID string"))
            }
        }

        impl schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({
                    "type": "string",
                    "format": "uuid",
                    "pattern": UUID_PATTERN,
                })
            }
        }
    };
}

uuid_id!(
    /// An organization: the unit of isolation, quota and actor ownership.
    OrgId
);
uuid_id!(
    /// A task.
    TaskId
);
uuid_id!(
    /// An API key's public identifier (the secret is separate).
    KeyId
);
uuid_id!(
    /// A schedule: names the tasks its ticks create and binds its sealed
    /// template.
    ScheduleId
);
uuid_id!(
    /// A webhook endpoint: names its cursor, outbox rows and delivery log,
    /// and binds its sealed secret.
    WebhookId
);

impl TaskId {
    /// A client-minted id must already be canonical: lowercase and hyphenated.
    pub fn parse_canonical(s: &str) -> Option<Self> {
        let id: Self = s.parse().ok()?;
        (id.encode(&mut [0; ID_TEXT_LEN]) == s).then_some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_hyphenated_uuids() {
        let s = "0190a0c2-7f3e-7c1a-9b2d-3e4f5a6b7c8d";
        assert_eq!(s.parse::<TaskId>().unwrap().to_string(), s);
        assert!("0190a0c27f3e7c1a9b2d3e4f5a6b7c8d"
            .parse::<TaskId>()
            .is_err());
        assert!("not-a-uuid".parse::<TaskId>().is_err());
    }

    #[test]
    fn renders_the_canonical_text_everywhere() {
        let s = "0190a0c2-7f3e-7c1a-9b2d-3e4f5a6b7c8d";
        let id: OrgId = s.parse().unwrap();
        assert_eq!(id.encode(&mut [0; ID_TEXT_LEN]), s);
        assert_eq!(id.to_string(), id.0.hyphenated().to_string());
        assert_eq!(format!("[{id:>38}]"), format!("[  {s}]"));
        assert_eq!(serde_json::to_string(&id).unwrap(), format!("\"{s}\""));
    }

    #[test]
    fn canonical_ids_must_be_lowercase() {
        assert!(TaskId::parse_canonical("0190A0C2-7F3E-7C1A-9B2D-3E4F5A6B7C8D").is_none());
        assert!(TaskId::parse_canonical("0190a0c2-7f3e-7c1a-9b2d-3e4f5a6b7c8d").is_some());
    }
}
