//! The tag vocabulary: tag names, the create, update and delete requests,
//! and the tag as clients see it.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::decode::{
    batch, boolean, description, err, field_path, object, optional, reject_unknown, safe_name,
    string_list, Result,
};
use super::{Decode, MemberRequest, RequestKind, Timestamp, TAG_NAME_PATTERN};
use crate::domain::admin::{self, Tag};

pub const MAX_TAG_NAME: usize = 64;

/// A tag name as stored: trimmed, at most 64 characters, no comma.
pub fn tag_name(v: &Value, field: &str) -> Result<String> {
    let name = v
        .as_str()
        .ok_or_else(|| err(field, "must be a string"))?
        .trim();
    if name.is_empty() {
        return Err(err(field, "must not be empty"));
    }
    if name.chars().count() > MAX_TAG_NAME {
        return Err(err(
            field,
            format!("must be at most {MAX_TAG_NAME} characters"),
        ));
    }
    if name.contains(',') {
        return Err(err(field, "must not contain a comma"));
    }
    safe_name(name, field).map(str::to_owned)
}

/// A list of tag names, deduplicated in order.
pub fn tag_names(v: &Value, field: &str) -> Result<Vec<String>> {
    string_list(v, field, tag_name)
}

/// `POST /tags`: 1 to 25 new tags.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTags {
    #[schemars(length(min = 1, max = 25))]
    pub tags: Vec<NewTag>,
}

#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
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
    #[schemars(length(max = 200))]
    pub description: Option<String>,
}

/// `POST /tags/update`: 1 to 25 changes; omitted fields stay.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateTags {
    #[schemars(length(min = 1, max = 25))]
    pub tags: Vec<TagPatch>,
}

#[derive(Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TagPatch {
    /// The tag to change.
    #[schemars(length(min = 1, max = 64), regex(pattern = TAG_NAME_PATTERN))]
    pub name: String,
    #[serde(default)]
    #[schemars(with = "bool")]
    pub strict: Option<bool>,
    #[serde(rename = "default", default)]
    #[schemars(with = "bool")]
    pub is_default: Option<bool>,
    /// `null` clears it.
    #[serde(default)]
    #[schemars(length(max = 200))]
    pub description: Option<Option<String>>,
}

/// `POST /tags/delete`.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteTags {
    #[schemars(
        length(min = 1, max = 25),
        inner(length(min = 1, max = 64), regex(pattern = TAG_NAME_PATTERN))
    )]
    pub names: Vec<String>,
}

/// The items of a tag batch; a patch leaves out what it does not change.
fn tag_items(body: &Value, patch: bool) -> Result<Vec<TagPatch>> {
    let mut out: Vec<TagPatch> = Vec::new();
    for (i, item) in batch(body, "tags")?.iter().enumerate() {
        let p = format!("tags[{i}]");
        let obj = object(item, &p)?;
        reject_unknown(obj, &p, &["name", "strict", "default", "description"])?;
        let f = |k: &str| field_path(&p, k);
        let name = tag_name(obj.get("name").unwrap_or(&Value::Null), &f("name"))?;
        let flag = |key: &str| -> Result<Option<bool>> {
            match obj.get(key) {
                Some(Value::Null) if !patch => Ok(None),
                v => v.map(|v| boolean(v, &f(key))).transpose(),
            }
        };
        let tag = TagPatch {
            strict: flag("strict")?,
            is_default: flag("default")?,
            description: optional(obj, "description", &f("description"), description)?,
            name,
        };
        if out.iter().any(|t| t.name == tag.name) {
            return Err(err(
                "tags",
                format!("duplicate name '{}' in this call", tag.name),
            ));
        }
        out.push(tag);
    }
    Ok(out)
}

impl MemberRequest for CreateTags {
    const KIND: RequestKind = RequestKind::Write;
}

impl Decode for CreateTags {
    fn decode(body: &Value) -> Result<Self> {
        let mut tags = Vec::new();
        for (i, t) in tag_items(body, false)?.into_iter().enumerate() {
            let tag = NewTag {
                name: t.name,
                strict: t.strict.unwrap_or(false),
                is_default: t.is_default.unwrap_or(false),
                description: t.description.flatten(),
            };
            admin::check_strict_tag(
                &format!("tags[{i}].description"),
                tag.strict,
                tag.description.as_deref(),
            )?;
            tags.push(tag);
        }
        Ok(CreateTags { tags })
    }
}

impl MemberRequest for UpdateTags {
    const KIND: RequestKind = RequestKind::Write;
}

impl Decode for UpdateTags {
    fn decode(body: &Value) -> Result<Self> {
        Ok(UpdateTags {
            tags: tag_items(body, true)?,
        })
    }
}

impl MemberRequest for DeleteTags {
    const KIND: RequestKind = RequestKind::Write;
}

impl Decode for DeleteTags {
    fn decode(body: &Value) -> Result<Self> {
        let list = batch(body, "names")?;
        let mut names: Vec<String> = Vec::with_capacity(list.len());
        for (i, v) in list.iter().enumerate() {
            let name = tag_name(v, &format!("names[{i}]"))?;
            if !names.contains(&name) {
                names.push(name);
            }
        }
        Ok(DeleteTags { names })
    }
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
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

#[derive(Debug, Clone, Serialize, JsonSchema)]
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
    use serde_json::json;

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
        assert!(create(json!({"tags": []})).is_err());
        let patch =
            UpdateTags::decode(&json!({"tags": [{"name": "a", "description": null}]})).unwrap();
        assert_eq!(patch.tags[0].description, Some(None));
        assert_eq!(patch.tags[0].strict, None);
    }
}
