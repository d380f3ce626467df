//! Members and the caller's own profile, the quota, and feedback.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::decode::{names, Result};
use super::{Decode, Timestamp, NON_BLANK_PATTERN, TAG_NAME_PATTERN};
use crate::domain::account::{Role, Tier};
use crate::domain::TaskId;

// ---- members ----------------------------------------------------------------

/// `PATCH /members/{email}`: at least one field.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, JsonSchema)]
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

impl Decode for MemberPatch {
    fn validate(&mut self) -> Result<()> {
        if let Some(tags) = self.profile_tags.as_mut() {
            names(tags);
        }
        Ok(())
    }
}

/// `PATCH /me`: the caller's own profile tags. A user's request loses the
/// strict tags it names and keeps the strict tags the user already has.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MePatch {
    #[schemars(inner(length(min = 1, max = 64), regex(pattern = TAG_NAME_PATTERN)))]
    pub profile_tags: Vec<String>,
}

impl Decode for MePatch {
    fn validate(&mut self) -> Result<()> {
        names(&mut self.profile_tags);
        Ok(())
    }
}

/// A member as `GET /members` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
/// A first line (up to the first line feed, a carriage return before it
/// aside) of at most `MAX_FIRST_LINE_CHARS` characters.
const FIRST_LINE_PATTERN: &str = r"^[^\n]{0,256}(?:\r?\n[\s\S]*)?$";

/// `POST /feedback`: product feedback, filed as a task in the operator's
/// feedback org. The first line becomes its title.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendFeedback {
    /// At most 4,096 characters; the first line at most 256.
    #[schemars(
        length(min = 1, max = MAX_MESSAGE_CHARS),
        regex(pattern = NON_BLANK_PATTERN),
        extend("allOf" = [{ "pattern": FIRST_LINE_PATTERN }])
    )]
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

impl Decode for SendFeedback {}

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
