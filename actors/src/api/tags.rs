//! The tag vocabulary: tag names, the create, update and delete requests,
//! and the tag as clients see it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::decode::{err, names, trim, Result};
use super::{Decode, Timestamp, NO_NUL_PATTERN, TAG_NAME_PATTERN};
use crate::domain::admin::{self, Tag};

pub const MAX_TAG_NAME: usize = 64;

/// Refuses a name given twice in one call.
fn unique_names<'a>(names: impl Iterator<Item = &'a str>) -> Result<()> {
    let mut seen: Vec<&str> = Vec::new();
    for name in names {
        if seen.contains(&name) {
            return Err(err("tags", format!("duplicate name '{name}' in this call")));
        }
        seen.push(name);
    }
    Ok(())
}

/// `POST /tags`: 1 to 25 new tags.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTags {
    #[schemars(length(min = 1, max = 25))]
    pub tags: Vec<NewTag>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = { "properties": { "strict": { "const": true } }, "required": ["strict"] },
    "then" = { "properties": { "description": { "type": "string" } }, "required": ["description"] },
))]
pub struct NewTag {
    #[schemars(length(min = 1, max = 64), regex(pattern = TAG_NAME_PATTERN))]
    pub name: String,
    /// Only members holding the tag may claim its work, and users cannot give it to themselves.
    #[serde(default)]
    pub strict: bool,
    /// Given to tasks created without tags.
    #[serde(rename = "default", default)]
    pub is_default: bool,
    /// At most 200 characters; required for a strict tag.
    #[serde(default)]
    #[schemars(length(max = 200), regex(pattern = NO_NUL_PATTERN))]
    pub description: Option<String>,
}

/// `POST /tags/update`: 1 to 25 changes; omitted fields stay.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateTags {
    #[schemars(length(min = 1, max = 25))]
    pub tags: Vec<TagPatch>,
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TagPatch {
    /// The tag to change.
    #[schemars(length(min = 1, max = 64), regex(pattern = TAG_NAME_PATTERN))]
    pub name: String,
    #[serde(default)]
    pub strict: Option<bool>,
    #[serde(rename = "default", default)]
    pub is_default: Option<bool>,
    /// `null` clears it.
    #[serde(default, deserialize_with = "super::double_option")]
    #[schemars(length(max = 200), regex(pattern = NO_NUL_PATTERN))]
    pub description: Option<Option<String>>,
}

/// `POST /tags/delete`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteTags {
    #[schemars(
        length(min = 1, max = 25),
        inner(length(min = 1, max = 64), regex(pattern = TAG_NAME_PATTERN))
    )]
    pub names: Vec<String>,
}

impl Decode for CreateTags {
    fn validate(&mut self) -> Result<()> {
        for (i, tag) in self.tags.iter_mut().enumerate() {
            trim(&mut tag.name);
            admin::check_strict_tag(
                &format!("tags[{i}].description"),
                tag.strict,
                tag.description.as_deref(),
            )?;
        }
        unique_names(self.tags.iter().map(|t| t.name.as_str()))
    }
}

impl Decode for UpdateTags {
    fn validate(&mut self) -> Result<()> {
        self.tags.iter_mut().for_each(|t| trim(&mut t.name));
        unique_names(self.tags.iter().map(|t| t.name.as_str()))
    }
}

impl Decode for DeleteTags {
    fn validate(&mut self) -> Result<()> {
        names(&mut self.names);
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TagView {
    pub name: String,
    pub strict: bool,
    #[serde(rename = "default")]
    pub is_default: bool,
    pub description: Option<String>,
    /// The email of the member who created it.
    pub created_by: String,
    pub created_at: Timestamp,
}

impl From<&Tag> for TagView {
    fn from(t: &Tag) -> Self {
        Self {
            name: t.name.clone(),
            strict: t.strict,
            is_default: t.is_default,
            description: t.description.clone(),
            created_by: t.created_by.clone(),
            created_at: Timestamp(t.created_at),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TagsCreated {
    pub created: usize,
    pub tags: Vec<TagView>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TagsUpdated {
    pub updated: usize,
    pub tags: Vec<TagView>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TagsDeleted {
    pub count: usize,
    pub deleted: Vec<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    #[test]
    fn strict_tags_need_a_description_and_names_are_unique() {
        let create = |v: Value| CreateTags::decode(&v);
        assert!(create(json!({"tags": [{"name": "a", "strict": true}]})).is_err());
        assert!(
            create(json!({"tags": [{"name": "a", "strict": true, "description": "d"}]})).is_ok()
        );
        assert!(create(json!({"tags": [{"name": "a"}, {"name": "a"}]})).is_err());
        let long = "x".repeat(201);
        assert!(create(json!({"tags": [{"name": "a", "description": long}]})).is_err());
        // PostgreSQL's text holds no NUL: refused before it reaches a store.
        let nul = create(json!({"tags": [{"name": "a", "description": "x\u{0}y"}]}));
        assert_eq!(
            nul.unwrap_err().0,
            "tags[0].description: must not hold a NUL character"
        );
        assert!(create(json!({"tags": []})).is_err());
        let patch =
            UpdateTags::decode(&json!({"tags": [{"name": "a", "description": null}]})).unwrap();
        assert_eq!(patch.tags[0].description, Some(None));
        assert_eq!(patch.tags[0].strict, None);
    }
}
