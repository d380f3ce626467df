//! Org administration: the tag vocabulary, teams and memberships, and the
//! rules for changing members. Types, request validation and the pure
//! checks; the org actor applies them to its state.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Map, Value};

use super::account::{MemberRecord, Role};
use super::validate::{batch, reject_unknown};
use crate::clock::format_ms;
use crate::error::{EngineError, ValidationError};

pub const MAX_TAG_NAME: usize = 64;
pub const MAX_DESCRIPTION: usize = 200;
pub const MAX_TEAM_NAME: usize = 32;

type Result<T> = std::result::Result<T, ValidationError>;

fn err(field: &str, message: impl AsRef<str>) -> ValidationError {
    ValidationError::field(field, message)
}

fn serialize_ms<S: serde::Serializer>(ms: &i64, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&format_ms(*ms))
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tag {
    pub name: String,
    pub strict: bool,
    #[serde(rename = "default")]
    pub is_default: bool,
    pub description: Option<String>,
    pub created_by: String,
    #[serde(serialize_with = "serialize_ms")]
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Team {
    pub name: String,
    pub tags: Vec<String>,
    pub description: Option<String>,
    pub idp_only: bool,
    pub created_by: String,
    #[serde(serialize_with = "serialize_ms")]
    pub created_at: i64,
}

/// A member's place in a team and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Membership {
    pub team: String,
    pub email: String,
    pub manual: bool,
    pub idp: bool,
    pub added_by: String,
    pub added_at: i64,
}

impl Serialize for Membership {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut sources = Vec::new();
        if self.manual {
            sources.push("manual");
        }
        if self.idp {
            sources.push("idp");
        }
        serde_json::json!({
            "email": self.email,
            "sources": sources,
            "added_by": self.added_by,
            "added_at": format_ms(self.added_at),
        })
        .serialize(s)
    }
}

/// A member as `GET /members` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemberView {
    pub email: String,
    pub role: &'static str,
    pub profile_tags: Vec<String>,
    pub team_tags: Vec<String>,
    pub seated: bool,
    #[serde(serialize_with = "serialize_ms")]
    pub joined_at: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewTag {
    pub name: String,
    pub strict: bool,
    pub is_default: bool,
    pub description: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct TagPatch {
    pub name: String,
    pub strict: Option<bool>,
    pub is_default: Option<bool>,
    pub description: Option<Option<String>>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct MemberPatch {
    pub role: Option<Role>,
    pub profile_tags: Option<Vec<String>>,
    pub seated: Option<bool>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewTeam {
    pub name: String,
    pub tags: Vec<String>,
    pub description: Option<String>,
    pub idp_only: bool,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct TeamPatch {
    pub tags: Option<Vec<String>>,
    pub description: Option<Option<String>>,
    pub idp_only: Option<bool>,
}

// ---- request validation ---------------------------------------------------

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>> {
    v.as_object()
        .ok_or_else(|| ValidationError::new(format!("{what} must be a JSON object")))
}

fn boolean(v: &Value, field: &str) -> Result<bool> {
    v.as_bool().ok_or_else(|| err(field, "must be a boolean"))
}

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
    Ok(name.to_owned())
}

fn description(v: &Value, field: &str) -> Result<Option<String>> {
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

/// A list of tag names, deduplicated in order.
pub fn tag_names(v: &Value, field: &str) -> Result<Vec<String>> {
    let list = v
        .as_array()
        .ok_or_else(|| err(field, "must be an array of strings"))?;
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let name = tag_name(t, &format!("{field}[{i}]"))?;
        if !out.contains(&name) {
            out.push(name);
        }
    }
    Ok(out)
}

fn check_duplicates<'a>(names: impl Iterator<Item = &'a String>, key: &str) -> Result<()> {
    let mut seen = BTreeSet::new();
    for n in names {
        if !seen.insert(n) {
            return Err(err(key, format!("duplicate name '{n}' in this call")));
        }
    }
    Ok(())
}

/// `POST /tags`.
pub fn new_tags(body: &Value) -> Result<Vec<NewTag>> {
    let mut out = Vec::new();
    for (i, item) in batch(body, "tags")?.iter().enumerate() {
        let p = format!("tags[{i}]");
        let obj = object(item, &p)?;
        reject_unknown(
            obj,
            &format!("{p}."),
            &["name", "strict", "default", "description"],
        )?;
        let f = |k: &str| format!("{p}.{k}");
        let tag = NewTag {
            name: tag_name(obj.get("name").unwrap_or(&Value::Null), &f("name"))?,
            strict: match obj.get("strict") {
                None | Some(Value::Null) => false,
                Some(v) => boolean(v, &f("strict"))?,
            },
            is_default: match obj.get("default") {
                None | Some(Value::Null) => false,
                Some(v) => boolean(v, &f("default"))?,
            },
            description: match obj.get("description") {
                None => None,
                Some(v) => description(v, &f("description"))?,
            },
        };
        if tag.strict && tag.description.is_none() {
            return Err(err(&f("description"), "is required for a strict tag"));
        }
        out.push(tag);
    }
    check_duplicates(out.iter().map(|t| &t.name), "tags")?;
    Ok(out)
}

/// `POST /tags/update`.
pub fn tag_patches(body: &Value) -> Result<Vec<TagPatch>> {
    let mut out = Vec::new();
    for (i, item) in batch(body, "tags")?.iter().enumerate() {
        let p = format!("tags[{i}]");
        let obj = object(item, &p)?;
        reject_unknown(
            obj,
            &format!("{p}."),
            &["name", "strict", "default", "description"],
        )?;
        let f = |k: &str| format!("{p}.{k}");
        out.push(TagPatch {
            name: tag_name(obj.get("name").unwrap_or(&Value::Null), &f("name"))?,
            strict: obj
                .get("strict")
                .map(|v| boolean(v, &f("strict")))
                .transpose()?,
            is_default: obj
                .get("default")
                .map(|v| boolean(v, &f("default")))
                .transpose()?,
            description: obj
                .get("description")
                .map(|v| description(v, &f("description")))
                .transpose()?,
        });
    }
    check_duplicates(out.iter().map(|t| &t.name), "tags")?;
    Ok(out)
}

/// `POST /tags/delete`.
pub fn tag_deletions(body: &Value) -> Result<Vec<String>> {
    let list = batch(body, "names")?;
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        let name = tag_name(v, &format!("names[{i}]"))?;
        if !out.contains(&name) {
            out.push(name);
        }
    }
    Ok(out)
}

/// `PATCH /members/{email}`.
pub fn member_patch(body: &Value) -> Result<MemberPatch> {
    let obj = object(body, "request body")?;
    reject_unknown(obj, "", &["role", "profile_tags", "seated"])?;
    let patch = MemberPatch {
        role: obj
            .get("role")
            .map(|v| {
                v.as_str()
                    .and_then(Role::parse)
                    .ok_or_else(|| err("role", "must be one of owner, admin, user"))
            })
            .transpose()?,
        profile_tags: obj
            .get("profile_tags")
            .map(|v| tag_names(v, "profile_tags"))
            .transpose()?,
        seated: obj
            .get("seated")
            .map(|v| boolean(v, "seated"))
            .transpose()?,
    };
    if patch == MemberPatch::default() {
        return Err(ValidationError::new(
            "request body needs at least one of role, profile_tags, seated",
        ));
    }
    Ok(patch)
}

/// `PATCH /me`.
pub fn me_patch(body: &Value) -> Result<Vec<String>> {
    let obj = object(body, "request body")?;
    reject_unknown(obj, "", &["profile_tags"])?;
    match obj.get("profile_tags") {
        Some(v) => tag_names(v, "profile_tags"),
        None => Err(err("profile_tags", "is required")),
    }
}

/// A team name as stored: trimmed and lowercased.
pub fn team_name(v: &Value, field: &str) -> Result<String> {
    let name = v
        .as_str()
        .ok_or_else(|| err(field, "must be a string"))?
        .trim()
        .to_lowercase();
    if name.is_empty() {
        return Err(err(field, "must not be empty"));
    }
    if name.chars().count() > MAX_TEAM_NAME {
        return Err(err(
            field,
            format!("must be at most {MAX_TEAM_NAME} characters"),
        ));
    }
    if name.contains('#') || name.contains('/') {
        return Err(err(field, "must not contain '#' or '/'"));
    }
    Ok(name)
}

/// `POST /teams`.
pub fn new_team(body: &Value) -> Result<NewTeam> {
    let obj = object(body, "request body")?;
    reject_unknown(obj, "", &["name", "tags", "description", "idp_only"])?;
    Ok(NewTeam {
        name: team_name(obj.get("name").unwrap_or(&Value::Null), "name")?,
        tags: match obj.get("tags") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => tag_names(v, "tags")?,
        },
        description: match obj.get("description") {
            None => None,
            Some(v) => description(v, "description")?,
        },
        idp_only: match obj.get("idp_only") {
            None | Some(Value::Null) => false,
            Some(v) => boolean(v, "idp_only")?,
        },
    })
}

/// `PATCH /teams/{name}`.
pub fn team_patch(body: &Value) -> Result<TeamPatch> {
    let obj = object(body, "request body")?;
    reject_unknown(obj, "", &["tags", "description", "idp_only"])?;
    Ok(TeamPatch {
        tags: obj.get("tags").map(|v| tag_names(v, "tags")).transpose()?,
        description: obj
            .get("description")
            .map(|v| description(v, "description"))
            .transpose()?,
        idp_only: obj
            .get("idp_only")
            .map(|v| boolean(v, "idp_only"))
            .transpose()?,
    })
}

/// `POST /teams/{name}/members`: the member's email.
pub fn team_member(body: &Value) -> Result<String> {
    let obj = object(body, "request body")?;
    reject_unknown(obj, "", &["email"])?;
    match obj.get("email") {
        Some(Value::String(e)) if e.contains('@') => Ok(e.trim().to_lowercase()),
        Some(_) => Err(err("email", "must be an email address")),
        None => Err(err("email", "is required")),
    }
}

/// `POST /admin/orgs/{id}/idp/sync`: team -> emails, the provider's view.
pub fn idp_sync(body: &Value) -> Result<BTreeMap<String, BTreeSet<String>>> {
    let obj = object(body, "request body")?;
    reject_unknown(obj, "", &["teams"])?;
    let teams = obj
        .get("teams")
        .ok_or_else(|| err("teams", "is required"))?
        .as_object()
        .ok_or_else(|| err("teams", "must be an object of team name to emails"))?;
    let mut out = BTreeMap::new();
    for (name, emails) in teams {
        let field = format!("teams.{name}");
        let team = team_name(&Value::String(name.clone()), &field)?;
        let list = emails
            .as_array()
            .ok_or_else(|| err(&field, "must be an array of emails"))?;
        let mut set = BTreeSet::new();
        for (i, e) in list.iter().enumerate() {
            match e.as_str() {
                Some(s) if s.contains('@') => {
                    set.insert(s.trim().to_lowercase());
                }
                _ => return Err(err(&format!("{field}[{i}]"), "must be an email address")),
            }
        }
        out.insert(team, set);
    }
    Ok(out)
}

// ---- rules ------------------------------------------------------------

/// Whether `caller` may apply `patch` to `target`, given how many owners the
/// org has. Seats and tags are checked by the caller of this function.
pub fn check_member_change(
    caller: Role,
    target: &MemberRecord,
    patch: &MemberPatch,
    owners: usize,
) -> std::result::Result<(), EngineError> {
    if caller < Role::Admin {
        return Err(EngineError::admin_required());
    }
    if target.role == Role::Owner && caller != Role::Owner {
        return Err(EngineError::Forbidden(
            "only an owner can change an owner".into(),
        ));
    }
    if patch.role == Some(Role::Owner) && caller != Role::Owner {
        return Err(EngineError::Forbidden(
            "only an owner can grant the owner role".into(),
        ));
    }
    let demoted = patch.role.is_some_and(|r| r != Role::Owner);
    if target.role == Role::Owner && demoted && owners <= 1 {
        return Err(EngineError::Conflict("cannot demote the last owner".into()));
    }
    if target.role == Role::Owner && patch.seated == Some(false) {
        return Err(ValidationError::field("seated", "an owner is always seated").into());
    }
    Ok(())
}

/// The profile tags a member ends up with after asking for `requested`:
/// admins and owners get what they ask; a user's request loses the strict
/// tags, and the strict tags the user already had are kept.
pub fn self_profile_tags(
    role: Role,
    requested: Vec<String>,
    current: &[String],
    is_strict: impl Fn(&str) -> bool,
) -> Vec<String> {
    if role >= Role::Admin {
        return requested;
    }
    let mut out: Vec<String> = requested.into_iter().filter(|t| !is_strict(t)).collect();
    for t in current.iter().filter(|t| is_strict(t)) {
        if !out.contains(t) {
            out.push(t.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::OrgId;

    fn member(role: Role) -> MemberRecord {
        MemberRecord {
            org_id: OrgId::new_v7(),
            email: "m@x.io".into(),
            role,
            seated: true,
            profile_tags: Vec::new(),
            joined_at: 0,
        }
    }

    #[test]
    fn strict_tags_need_a_description_and_names_are_unique() {
        assert!(new_tags(&json!({"tags": [{"name": "a", "strict": true}]})).is_err());
        assert!(
            new_tags(&json!({"tags": [{"name": "a", "strict": true, "description": "d"}]})).is_ok()
        );
        assert!(new_tags(&json!({"tags": [{"name": "a"}, {"name": "a"}]})).is_err());
        let long = "x".repeat(201);
        assert!(new_tags(&json!({"tags": [{"name": "a", "description": long}]})).is_err());
        assert!(new_tags(&json!({"tags": []})).is_err());
    }

    #[test]
    fn team_names_are_lowercased_and_bounded() {
        let t = new_team(&json!({"name": "Backend"})).unwrap();
        assert_eq!(t.name, "backend");
        assert!(new_team(&json!({"name": "a#b"})).is_err());
        assert!(new_team(&json!({"name": "x".repeat(33)})).is_err());
        assert_eq!(
            team_patch(&json!({"description": null}))
                .unwrap()
                .description,
            Some(None)
        );
    }

    #[test]
    fn member_changes_follow_roles() {
        let patch = MemberPatch {
            role: Some(Role::User),
            ..MemberPatch::default()
        };
        assert!(matches!(
            check_member_change(Role::User, &member(Role::User), &patch, 1),
            Err(EngineError::Forbidden(_))
        ));
        assert!(matches!(
            check_member_change(Role::Admin, &member(Role::Owner), &patch, 2),
            Err(EngineError::Forbidden(_))
        ));
        assert!(matches!(
            check_member_change(Role::Owner, &member(Role::Owner), &patch, 1),
            Err(EngineError::Conflict(_))
        ));
        assert!(check_member_change(Role::Owner, &member(Role::Owner), &patch, 2).is_ok());
        let promote = MemberPatch {
            role: Some(Role::Owner),
            ..MemberPatch::default()
        };
        assert!(check_member_change(Role::Admin, &member(Role::User), &promote, 1).is_err());
        assert!(check_member_change(Role::Admin, &member(Role::User), &patch, 1).is_ok());
    }

    #[test]
    fn users_cannot_give_themselves_strict_tags_but_keep_theirs() {
        let strict = |t: &str| t.starts_with('s');
        let got = self_profile_tags(
            Role::User,
            vec!["a".into(), "s-new".into()],
            &["s-old".into(), "b".into()],
            strict,
        );
        assert_eq!(got, vec!["a".to_string(), "s-old".to_string()]);
        let admin = self_profile_tags(Role::Admin, vec!["s-new".into()], &[], strict);
        assert_eq!(admin, vec!["s-new".to_string()]);
    }
}
