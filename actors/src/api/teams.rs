//! Teams: team names, the team requests, and teams and memberships as
//! clients see them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::decode::{names, normal_email, Result};
use super::{Decode, Timestamp, NO_NUL_PATTERN, TAG_NAME_PATTERN, TEAM_NAME_PATTERN};
use crate::domain::admin::{Membership, Team};

pub const MAX_TEAM_NAME: usize = 32;
/// The paid feature of the team routes.
pub const TEAMS: &str = "teams";

/// A team's name as stored: trimmed and lowercased.
pub fn normal_team_name(name: &str) -> String {
    name.trim().to_lowercase()
}

/// `POST /teams`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTeam {
    /// At most 32 characters, stored lowercased; no `#` or `/`.
    #[schemars(length(min = 1, max = 32), regex(pattern = TEAM_NAME_PATTERN))]
    pub name: String,
    /// Tags from the org's vocabulary that members of the team inherit.
    #[serde(default)]
    #[schemars(inner(length(min = 1, max = 64), regex(pattern = TAG_NAME_PATTERN)))]
    pub tags: Vec<String>,
    #[serde(default)]
    #[schemars(length(max = 200), regex(pattern = NO_NUL_PATTERN))]
    pub description: Option<String>,
    /// Membership managed only by the identity provider's sync.
    #[serde(default)]
    pub idp_only: bool,
}

impl Decode for NewTeam {
    fn validate(&mut self) -> Result<()> {
        self.name = normal_team_name(&self.name);
        names(&mut self.tags);
        Ok(())
    }
}

/// `PATCH /teams/{name}`: omitted fields stay.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TeamPatch {
    #[serde(default)]
    #[schemars(
        with = "Vec<String>",
        inner(length(min = 1, max = 64), regex(pattern = TAG_NAME_PATTERN))
    )]
    pub tags: Option<Vec<String>>,
    /// `null` clears it.
    #[serde(default, deserialize_with = "super::double_option")]
    #[schemars(length(max = 200), regex(pattern = NO_NUL_PATTERN))]
    pub description: Option<Option<String>>,
    #[serde(default)]
    #[schemars(with = "bool")]
    pub idp_only: Option<bool>,
}

impl Decode for TeamPatch {
    fn validate(&mut self) -> Result<()> {
        if let Some(tags) = self.tags.as_mut() {
            names(tags);
        }
        Ok(())
    }
}

/// `POST /teams/{name}/members`: adds a member by hand.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddTeamMember {
    #[schemars(email)]
    pub email: String,
}

impl Decode for AddTeamMember {
    fn validate(&mut self) -> Result<()> {
        normal_email(&mut self.email);
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
