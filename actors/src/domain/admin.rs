//! Org administration: the tag vocabulary, teams and memberships as the
//! org actor holds them, and the rules for changing members and tags.

use super::account::{MemberRecord, Role};
use super::error::{RuleError, ValidationError};

#[derive(Debug, Clone, PartialEq)]
pub struct Tag {
    pub name: String,
    pub strict: bool,
    pub is_default: bool,
    pub description: Option<String>,
    pub created_by: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Team {
    pub name: String,
    pub tags: Vec<String>,
    pub description: Option<String>,
    pub idp_only: bool,
    pub created_by: String,
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

/// What a member change asks for.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MemberChange {
    pub role: Option<Role>,
    pub seated: Option<bool>,
}

// ---- rules ------------------------------------------------------------

/// Whether `caller` may apply `patch` to `target`, given how many owners the
/// org has. Seats and tags are checked by the caller of this function.
pub fn check_member_change(
    caller: Role,
    target: &MemberRecord,
    patch: &MemberChange,
    owners: usize,
) -> Result<(), RuleError> {
    if caller < Role::Admin {
        return Err(RuleError::admin_required());
    }
    if target.role == Role::Owner && caller != Role::Owner {
        return Err(RuleError::Forbidden(
            "only an owner can change an owner".into(),
        ));
    }
    if patch.role == Some(Role::Owner) && caller != Role::Owner {
        return Err(RuleError::Forbidden(
            "only an owner can grant the owner role".into(),
        ));
    }
    let demoted = patch.role.is_some_and(|r| r != Role::Owner);
    if target.role == Role::Owner && demoted && owners <= 1 {
        return Err(RuleError::Conflict("cannot demote the last owner".into()));
    }
    if target.role == Role::Owner && patch.seated == Some(false) {
        return Err(ValidationError::field("seated", "an owner is always seated").into());
    }
    Ok(())
}

/// A strict tag needs a description: it tells members why they may not
/// claim its work. `field` names the description in the error.
pub fn check_strict_tag(
    field: &str,
    strict: bool,
    description: Option<&str>,
) -> Result<(), ValidationError> {
    if strict && description.is_none() {
        return Err(ValidationError::field(
            field,
            "a strict tag needs a description",
        ));
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
    fn member_changes_follow_roles() {
        let patch = MemberChange {
            role: Some(Role::User),
            ..MemberChange::default()
        };
        assert!(matches!(
            check_member_change(Role::User, &member(Role::User), &patch, 1),
            Err(RuleError::Forbidden(_))
        ));
        assert!(matches!(
            check_member_change(Role::Admin, &member(Role::Owner), &patch, 2),
            Err(RuleError::Forbidden(_))
        ));
        assert!(matches!(
            check_member_change(Role::Owner, &member(Role::Owner), &patch, 1),
            Err(RuleError::Conflict(_))
        ));
        assert!(check_member_change(Role::Owner, &member(Role::Owner), &patch, 2).is_ok());
        let promote = MemberChange {
            role: Some(Role::Owner),
            ..MemberChange::default()
        };
        assert!(check_member_change(Role::Admin, &member(Role::User), &promote, 1).is_err());
        assert!(check_member_change(Role::Admin, &member(Role::User), &patch, 1).is_ok());
    }

    #[test]
    fn strict_tags_need_a_description() {
        assert!(check_strict_tag("d", true, None).is_err());
        assert!(check_strict_tag("d", true, Some("why")).is_ok());
        assert!(check_strict_tag("d", false, None).is_ok());
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
