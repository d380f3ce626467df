//! Members and the caller's own profile, the quota, and feedback.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::decode::{body, boolean, err, optional, optional_body, present, reject_unknown, Result};
use super::tags::tag_names;
use super::{
    Decode, MemberRequest, RequestKind, Timestamp, ValidationError, NON_BLANK_PATTERN,
    TAG_NAME_PATTERN,
};
use crate::domain::account::{Role, Tier};
use crate::domain::TaskId;

// ---- members ----------------------------------------------------------------

/// `PATCH /members/{email}`: at least one field.
#[derive(Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("minProperties" = 1))]
pub struct MemberPatch {
    #[serde(default)]
    #[schemars(with = "Role")]
    pub role: Option<Role>,
    #[serde(default)]
    #[schemars(
        with = "Vec<String>",
        inner(length(min = 1, max = 64), regex(pattern = TAG_NAME_PATTERN))
    )]
    pub profile_tags: Option<Vec<String>>,
    /// Seat-billed plans (pro, enterprise) only.
    #[serde(default)]
    #[schemars(with = "bool")]
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
    #[schemars(inner(length(min = 1, max = 64), regex(pattern = TAG_NAME_PATTERN)))]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendFeedback {
    /// At most 4,096 characters; the first line at most 256.
    #[schemars(length(min = 1, max = 4096), regex(pattern = NON_BLANK_PATTERN))]
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
}
