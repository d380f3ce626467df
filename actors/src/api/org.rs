//! Org administration by members: the tag vocabulary, members and the
//! caller's own profile, teams, quota and feedback.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::decode::{
    batch, body, boolean, email, err, object, optional_body, present, reject_unknown, string_list,
    Result,
};
use super::{Decode, MemberRequest, RequestKind, Timestamp, ValidationError};
use crate::domain::account::{Role, Tier};
use crate::domain::admin::{self, Membership, Tag, Team};
use crate::domain::TaskId;

pub const MAX_TAG_NAME: usize = 64;
pub const MAX_DESCRIPTION: usize = 200;
pub const MAX_TEAM_NAME: usize = 32;
/// The paid feature of the team routes.
pub const TEAMS: &str = "teams";

// ---- names ------------------------------------------------------------------

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
    Ok(name.to_owned())
}

/// A list of tag names, deduplicated in order.
pub fn tag_names(v: &Value, field: &str) -> Result<Vec<String>> {
    string_list(v, field, tag_name)
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

/// A description: a string of at most 200 characters, or null.
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

fn optional<T>(
    obj: &super::Object,
    key: &str,
    field: &str,
    parse: impl Fn(&Value, &str) -> Result<T>,
) -> Result<Option<T>> {
    obj.get(key).map(|v| parse(v, field)).transpose()
}

// ---- tags -------------------------------------------------------------------

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
    pub name: String,
    /// Only members holding the tag may claim its work, and users cannot give it to themselves.
    #[serde(default)]
    pub strict: bool,
    /// Given to tasks created without tags.
    #[serde(rename = "default", default)]
    pub is_default: bool,
    /// At most 200 characters; required for a strict tag.
    #[serde(default)]
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
    pub name: String,
    #[serde(default)]
    pub strict: Option<bool>,
    #[serde(rename = "default", default)]
    pub is_default: Option<bool>,
    /// `null` clears it.
    #[serde(default)]
    pub description: Option<Option<String>>,
}

/// `POST /tags/delete`.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteTags {
    #[schemars(length(min = 1, max = 25))]
    pub names: Vec<String>,
}

/// The items of a tag batch; a patch leaves out what it does not change.
fn tag_items(body: &Value, patch: bool) -> Result<Vec<TagPatch>> {
    let mut out: Vec<TagPatch> = Vec::new();
    for (i, item) in batch(body, "tags")?.iter().enumerate() {
        let p = format!("tags[{i}]");
        let obj = object(item, &p)?;
        reject_unknown(
            obj,
            &format!("{p}."),
            &["name", "strict", "default", "description"],
        )?;
        let f = |k: &str| format!("{p}.{k}");
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

// ---- members ----------------------------------------------------------------

/// `PATCH /members/{email}`: at least one field.
#[derive(Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemberPatch {
    #[serde(default)]
    pub role: Option<Role>,
    #[serde(default)]
    pub profile_tags: Option<Vec<String>>,
    /// Seat-billed plans (pro, enterprise) only.
    #[serde(default)]
    pub seated: Option<bool>,
}

impl MemberRequest for MemberPatch {
    const KIND: RequestKind = RequestKind::Write;
}

impl Decode for MemberPatch {
    fn decode(v: &Value) -> Result<Self> {
        let obj = body(v)?;
        reject_unknown(obj, "", &["role", "profile_tags", "seated"])?;
        let patch = MemberPatch {
            role: optional(obj, "role", "role", |v, f| {
                v.as_str()
                    .and_then(Role::parse)
                    .ok_or_else(|| err(f, "must be one of owner, admin, user"))
            })?,
            profile_tags: optional(obj, "profile_tags", "profile_tags", tag_names)?,
            seated: optional(obj, "seated", "seated", boolean)?,
        };
        if patch == MemberPatch::default() {
            return Err(ValidationError::new(
                "request body needs at least one of role, profile_tags, seated",
            ));
        }
        Ok(patch)
    }
}

/// `PATCH /me`: the caller's own profile tags. A user's request loses the
/// strict tags it names and keeps the strict tags the user already has.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MePatch {
    pub profile_tags: Vec<String>,
}

impl MemberRequest for MePatch {
    const KIND: RequestKind = RequestKind::Write;
}

impl Decode for MePatch {
    fn decode(v: &Value) -> Result<Self> {
        let obj = body(v)?;
        reject_unknown(obj, "", &["profile_tags"])?;
        match obj.get("profile_tags") {
            Some(v) => Ok(MePatch {
                profile_tags: tag_names(v, "profile_tags")?,
            }),
            None => Err(err("profile_tags", "is required")),
        }
    }
}

/// A member as `GET /members` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct MemberView {
    pub email: String,
    pub role: Role,
    pub profile_tags: Vec<String>,
    /// Inherited from the member's teams.
    pub team_tags: Vec<String>,
    pub seated: bool,
    pub joined_at: Timestamp,
}

/// `GET /me`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct MeView {
    pub email: String,
    pub role: Role,
    pub profile_tags: Vec<String>,
}

// ---- teams ------------------------------------------------------------------

/// `POST /teams`.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTeam {
    /// At most 32 characters, stored lowercased; no `#` or `/`.
    pub name: String,
    /// Tags from the org's vocabulary that members of the team inherit.
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// Membership managed only by the identity provider's sync.
    #[serde(default)]
    pub idp_only: bool,
}

impl MemberRequest for NewTeam {
    const KIND: RequestKind = RequestKind::Write;
    const PAID_FEATURE: Option<&'static str> = Some(TEAMS);
}

impl Decode for NewTeam {
    fn decode(v: &Value) -> Result<Self> {
        let obj = body(v)?;
        reject_unknown(obj, "", &["name", "tags", "description", "idp_only"])?;
        Ok(NewTeam {
            name: team_name(obj.get("name").unwrap_or(&Value::Null), "name")?,
            tags: present(obj, "tags")
                .map(|v| tag_names(v, "tags"))
                .transpose()?
                .unwrap_or_default(),
            description: optional(obj, "description", "description", description)?.flatten(),
            idp_only: present(obj, "idp_only")
                .map(|v| boolean(v, "idp_only"))
                .transpose()?
                .unwrap_or(false),
        })
    }
}

/// `PATCH /teams/{name}`: omitted fields stay.
#[derive(Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TeamPatch {
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// `null` clears it.
    #[serde(default)]
    pub description: Option<Option<String>>,
    #[serde(default)]
    pub idp_only: Option<bool>,
}

impl MemberRequest for TeamPatch {
    const KIND: RequestKind = RequestKind::Write;
    const PAID_FEATURE: Option<&'static str> = Some(TEAMS);
}

impl Decode for TeamPatch {
    fn decode(v: &Value) -> Result<Self> {
        let obj = body(v)?;
        reject_unknown(obj, "", &["tags", "description", "idp_only"])?;
        Ok(TeamPatch {
            tags: optional(obj, "tags", "tags", tag_names)?,
            description: optional(obj, "description", "description", description)?,
            idp_only: optional(obj, "idp_only", "idp_only", boolean)?,
        })
    }
}

/// `POST /teams/{name}/members`: adds a member by hand.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddTeamMember {
    pub email: String,
}

impl MemberRequest for AddTeamMember {
    const KIND: RequestKind = RequestKind::Write;
    const PAID_FEATURE: Option<&'static str> = Some(TEAMS);
}

impl Decode for AddTeamMember {
    fn decode(v: &Value) -> Result<Self> {
        let obj = body(v)?;
        reject_unknown(obj, "", &["email"])?;
        match obj.get("email") {
            Some(v) => Ok(AddTeamMember {
                email: email(v, "email")?,
            }),
            None => Err(err("email", "is required")),
        }
    }
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TeamView {
    pub name: String,
    pub tags: Vec<String>,
    pub description: Option<String>,
    pub idp_only: bool,
    pub created_by: String,
    pub created_at: Timestamp,
}

impl From<&Team> for TeamView {
    fn from(t: &Team) -> Self {
        Self {
            name: t.name.clone(),
            tags: t.tags.clone(),
            description: t.description.clone(),
            idp_only: t.idp_only,
            created_by: t.created_by.clone(),
            created_at: Timestamp(t.created_at),
        }
    }
}

/// Where a team membership comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MembershipSource {
    Manual,
    Idp,
}

/// A member's place in a team.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TeamMemberView {
    pub email: String,
    pub sources: Vec<MembershipSource>,
    pub added_by: String,
    pub added_at: Timestamp,
}

impl From<&Membership> for TeamMemberView {
    fn from(m: &Membership) -> Self {
        let sources = [
            (m.manual, MembershipSource::Manual),
            (m.idp, MembershipSource::Idp),
        ]
        .into_iter()
        .filter_map(|(on, source)| on.then_some(source))
        .collect();
        Self {
            email: m.email.clone(),
            sources,
            added_by: m.added_by.clone(),
            added_at: Timestamp(m.added_at),
        }
    }
}

/// `GET /teams/{name}`: the team and its members.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TeamDetail {
    #[serde(flatten)]
    pub team: TeamView,
    pub members: Vec<TeamMemberView>,
}

// ---- quota and feedback -----------------------------------------------------

/// `GET /quota`: the monthly task quota.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct QuotaView {
    pub tier: Tier,
    /// Tasks per month; `null` when unlimited.
    pub limit: Option<i64>,
    /// Tasks created this month.
    pub used: i64,
    pub remaining: Option<i64>,
    /// 00:00 UTC on the first of next month.
    pub resets_at: Timestamp,
}

/// The kinds of feedback, each a tag in the feedback org.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FeedbackKind {
    Bug,
    Feature,
    #[default]
    General,
}

impl FeedbackKind {
    pub const ALL: [FeedbackKind; 3] = [
        FeedbackKind::Bug,
        FeedbackKind::Feature,
        FeedbackKind::General,
    ];

    /// Also the name of its tag in the feedback org.
    pub fn as_str(self) -> &'static str {
        match self {
            FeedbackKind::Bug => "bug",
            FeedbackKind::Feature => "feature",
            FeedbackKind::General => "general",
        }
    }
}

pub const MAX_MESSAGE_CHARS: usize = 4096;
pub const MAX_FIRST_LINE_CHARS: usize = 256;

/// `POST /feedback`: product feedback, filed as a task in the operator's
/// feedback org. The first line becomes its title.
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendFeedback {
    /// At most 4,096 characters; the first line at most 256.
    pub message: String,
    #[serde(rename = "type", default)]
    pub kind: FeedbackKind,
}

impl SendFeedback {
    /// The task title: the first line, or the start of the message when the
    /// first line is blank.
    pub fn title(&self) -> String {
        let first = self.message.lines().next().unwrap_or("").trim();
        if first.is_empty() {
            self.message
                .trim()
                .chars()
                .take(MAX_FIRST_LINE_CHARS)
                .collect()
        } else {
            first.to_owned()
        }
    }
}

impl MemberRequest for SendFeedback {
    const KIND: RequestKind = RequestKind::Write;
}

impl Decode for SendFeedback {
    fn decode(v: &Value) -> Result<Self> {
        let obj = optional_body(v)?;
        reject_unknown(obj, "", &["message", "type"])?;
        let message = match present(obj, "message") {
            None => return Err(err("message", "is required")),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(err("message", "must be a string")),
        };
        if message.trim().is_empty() {
            return Err(err("message", "must not be empty"));
        }
        if message.chars().count() > MAX_MESSAGE_CHARS {
            return Err(err(
                "message",
                format!("must be at most {MAX_MESSAGE_CHARS} characters"),
            ));
        }
        let first_line = message.lines().next().unwrap_or("");
        if first_line.chars().count() > MAX_FIRST_LINE_CHARS {
            return Err(err(
                "message",
                format!("the first line must be at most {MAX_FIRST_LINE_CHARS} characters"),
            ));
        }
        let kind = match present(obj, "type") {
            None => FeedbackKind::General,
            Some(Value::String(t)) => FeedbackKind::ALL
                .into_iter()
                .find(|k| k.as_str() == t)
                .ok_or_else(|| err("type", "must be one of bug, feature, general"))?,
            Some(_) => return Err(err("type", "must be a string")),
        };
        Ok(SendFeedback { message, kind })
    }
}

/// `POST /feedback` answer: the task it became.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FeedbackFiled {
    pub task_id: TaskId,
    pub created_at: Timestamp,
}

/// Emails as a set, for the identity provider's view.
pub(super) fn email_set(v: &Value, field: &str) -> Result<BTreeSet<String>> {
    let list = v
        .as_array()
        .ok_or_else(|| err(field, "must be an array of emails"))?;
    list.iter()
        .enumerate()
        .map(|(i, e)| email(e, &format!("{field}[{i}]")))
        .collect()
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

    #[test]
    fn team_names_are_lowercased_and_bounded() {
        let t = NewTeam::decode(&json!({"name": "Backend"})).unwrap();
        assert_eq!(t.name, "backend");
        assert!(NewTeam::decode(&json!({"name": "a#b"})).is_err());
        assert!(NewTeam::decode(&json!({"name": "x".repeat(33)})).is_err());
        assert_eq!(
            TeamPatch::decode(&json!({"description": null}))
                .unwrap()
                .description,
            Some(None)
        );
    }

    #[test]
    fn feedback_validates_messages_and_types() {
        let f = SendFeedback::decode(&json!({"message": "It broke\nwhen I clicked"})).unwrap();
        assert_eq!(
            (f.kind, f.title().as_str()),
            (FeedbackKind::General, "It broke")
        );
        assert!(SendFeedback::decode(&json!({})).is_err());
        assert!(SendFeedback::decode(&json!({"message": 5})).is_err());
        assert!(SendFeedback::decode(&json!({"message": "x".repeat(4097)})).is_err());
        assert!(SendFeedback::decode(&json!({"message": "x".repeat(4096)})).is_err());
        assert!(
            SendFeedback::decode(&json!({"message": format!("{}\nrest", "x".repeat(256))})).is_ok()
        );
        assert!(SendFeedback::decode(&json!({"message": "hi", "type": "rant"})).is_err());
        let bug = SendFeedback::decode(&json!({"message": "hi", "type": "bug"})).unwrap();
        assert_eq!(bug.kind, FeedbackKind::Bug);
    }

    #[test]
    fn memberships_list_their_sources() {
        let m = Membership {
            team: "t".into(),
            email: "a@b.io".into(),
            manual: true,
            idp: true,
            added_by: "x@b.io".into(),
            added_at: 0,
        };
        let v = serde_json::to_value(TeamMemberView::from(&m)).unwrap();
        assert_eq!(v["sources"], json!(["manual", "idp"]));
    }
}
