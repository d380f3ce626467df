//! Org administration inside the org actor: the tag vocabulary, members'
//! roles, seats and profile tags, teams and their memberships, and the
//! identity provider's view of them. Role checks use the actor's own member
//! records, which are authoritative. The plan gate of team routes runs in the
//! engine before anything else, from the org record.

use std::collections::BTreeSet;

use super::work::Work;
use super::{IdpView, OrgActor, OrgState};
use crate::api::{MemberPatch, MemberView, NewTag, NewTeam, TagPatch, TeamPatch, Timestamp};
use crate::domain::account::{Caller, LimitKey, Role};
use crate::domain::admin::{self, MemberChange, Membership, Tag, Team};
use crate::domain::error::RuleError;
use crate::error::{EngineError, LimitKind, ValidationError};
use crate::store::WriteOp;

impl OrgState {
    /// The caller's current role, from the member records.
    fn role_of(&self, caller: &Caller) -> Result<Role, EngineError> {
        self.members
            .get(&caller.email)
            .map(|m| m.role)
            .ok_or(EngineError::InvalidApiKey)
    }

    pub(super) fn require_admin(&self, caller: &Caller) -> Result<Role, EngineError> {
        let role = self.role_of(caller)?;
        if role < Role::Admin {
            return Err(RuleError::admin_required().into());
        }
        Ok(role)
    }

    pub(super) fn is_strict(&self, tag: &str) -> bool {
        self.tags.get(tag).is_some_and(|t| t.strict)
    }

    /// Every tag of `tags` is in the vocabulary (any tag passes while it is empty).
    pub(super) fn check_vocabulary(
        &self,
        field: &str,
        tags: &[String],
    ) -> Result<(), ValidationError> {
        if self.tags.is_empty() {
            return Ok(());
        }
        match tags.iter().find(|t| !self.tags.contains_key(*t)) {
            Some(t) => Err(ValidationError::field(
                field,
                format!("unknown tag '{t}': not in the org's tag vocabulary"),
            )),
            None => Ok(()),
        }
    }

    /// Tags inherited from the member's teams, sorted.
    pub(super) fn team_tags(&self, email: &str) -> Vec<String> {
        let tags: BTreeSet<&String> = self
            .memberships
            .values()
            .filter(|m| m.email == email)
            .filter_map(|m| self.teams.get(&m.team))
            .flat_map(|t| t.tags.iter())
            .collect();
        tags.into_iter().cloned().collect()
    }

    pub(super) fn member_view(&self, email: &str) -> Result<MemberView, EngineError> {
        let m = self
            .members
            .get(email)
            .ok_or_else(|| EngineError::NotFound(format!("{email} is not a member of this org")))?;
        Ok(MemberView {
            email: m.email.clone(),
            role: m.role,
            profile_tags: m.profile_tags.clone(),
            team_tags: self.team_tags(&m.email),
            seated: m.seated,
            joined_at: Timestamp(m.joined_at),
        })
    }

    /// A team whose membership may be changed by hand (not `idp_only`).
    fn hand_managed_team(&self, name: &str) -> Result<Team, EngineError> {
        let team = self.team(name)?;
        if team.idp_only {
            return Err(ValidationError::new(format!(
                "team '{}' is managed by the identity provider only",
                team.name
            ))
            .into());
        }
        Ok(team.clone())
    }

    fn team(&self, name: &str) -> Result<&Team, EngineError> {
        self.teams
            .get(&name.to_lowercase())
            .ok_or_else(|| EngineError::NotFound(format!("team '{name}' not found")))
    }
}

impl OrgActor {
    /// Puts a team into memory and queues it for storage.
    fn save_team(&self, state: &mut OrgState, work: &mut Work, team: &Team) {
        state.teams.insert(team.name.clone(), team.clone());
        work.accounts.push(WriteOp::UpsertTeam(team.clone()));
    }

    /// Puts tags into the vocabulary and queues them for storage.
    fn save_tags(&self, state: &mut OrgState, work: &mut Work, tags: &[Tag]) {
        for t in tags {
            state.tags.insert(t.name.clone(), t.clone());
            work.accounts.push(WriteOp::UpsertTag(t.clone()));
        }
    }

    pub(super) fn list_tags(&self, state: &OrgState) -> Vec<Tag> {
        state.tags.values().cloned().collect()
    }

    pub(super) fn create_tags(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        items: Vec<NewTag>,
    ) -> Result<Vec<Tag>, EngineError> {
        state.require_admin(caller)?;
        if let Some(t) = items.iter().find(|t| state.tags.contains_key(&t.name)) {
            return Err(EngineError::Conflict(format!(
                "tag '{}' already exists",
                t.name
            )));
        }
        state.check_count(
            LimitKey::Tags,
            LimitKind::Tags,
            state.tags.len() + items.len(),
        )?;
        let now = self.deps.clock.now_ms();
        let tags: Vec<Tag> = items
            .into_iter()
            .map(|t| Tag {
                name: t.name,
                strict: t.strict,
                is_default: t.is_default,
                description: t.description,
                created_by: caller.email.clone(),
                created_at: now,
            })
            .collect();
        self.save_tags(state, work, &tags);
        Ok(tags)
    }

    pub(super) fn update_tags(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        patches: Vec<TagPatch>,
    ) -> Result<Vec<Tag>, EngineError> {
        state.require_admin(caller)?;
        let mut updated = Vec::with_capacity(patches.len());
        for (i, p) in patches.iter().enumerate() {
            let mut tag = state
                .tags
                .get(&p.name)
                .cloned()
                .ok_or_else(|| EngineError::NotFound(format!("tag '{}' not found", p.name)))?;
            if let Some(strict) = p.strict {
                tag.strict = strict;
            }
            if let Some(d) = p.is_default {
                tag.is_default = d;
            }
            if let Some(desc) = &p.description {
                tag.description = desc.clone();
            }
            admin::check_strict_tag(
                &format!("tags[{i}].description"),
                tag.strict,
                tag.description.as_deref(),
            )?;
            updated.push(tag);
        }
        self.save_tags(state, work, &updated);
        Ok(updated)
    }

    pub(super) fn delete_tags(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        names: Vec<String>,
    ) -> Result<Vec<String>, EngineError> {
        state.require_admin(caller)?;
        if let Some(n) = names.iter().find(|n| !state.tags.contains_key(*n)) {
            return Err(EngineError::NotFound(format!("tag '{n}' not found")));
        }
        for n in &names {
            state.tags.remove(n);
            work.accounts.push(WriteOp::DeleteTag(n.clone()));
        }
        Ok(names)
    }

    pub(super) fn list_members(&self, state: &OrgState) -> Vec<MemberView> {
        let mut members: Vec<MemberView> = state
            .members
            .keys()
            .filter_map(|e| state.member_view(e).ok())
            .collect();
        members.sort_by(|a, b| a.joined_at.cmp(&b.joined_at).then(a.email.cmp(&b.email)));
        members
    }

    pub(super) fn patch_member(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        email: &str,
        patch: MemberPatch,
    ) -> Result<MemberView, EngineError> {
        let caller_role = state.role_of(caller)?;
        if caller_role < Role::Admin {
            return Err(RuleError::admin_required().into());
        }
        let target =
            state.members.get(email).cloned().ok_or_else(|| {
                EngineError::NotFound(format!("{email} is not a member of this org"))
            })?;
        let owners = state
            .members
            .values()
            .filter(|m| m.role == Role::Owner)
            .count();
        let change = MemberChange {
            role: patch.role,
            seated: patch.seated,
        };
        admin::check_member_change(caller_role, &target, &change, owners)?;
        let mut member = target.clone();
        if let Some(tags) = patch.profile_tags {
            state.check_vocabulary("profile_tags", &tags)?;
            member.profile_tags = tags;
        }
        if let Some(seated) = patch.seated {
            let record = &state.entry.record;
            if !record.tier.is_seat_billed() {
                return Err(ValidationError::field(
                    "seated",
                    format!("the {} plan is not billed per seat", record.tier.as_str()),
                )
                .into());
            }
            let taken = state.members.values().filter(|m| m.seated).count() as i64;
            if seated && !target.seated && taken >= record.seats {
                return Err(ValidationError::field(
                    "seated",
                    format!("no free seat: all {} seats are taken", record.seats),
                )
                .into());
            }
            member.seated = seated;
        }
        if let Some(role) = patch.role {
            member.role = role;
        }
        state.members.insert(member.email.clone(), member.clone());
        work.accounts.push(WriteOp::UpdateMember(member));
        state.member_view(email)
    }

    pub(super) fn patch_me(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        requested: Vec<String>,
    ) -> Result<MemberView, EngineError> {
        let role = state.role_of(caller)?;
        state.check_vocabulary("profile_tags", &requested)?;
        let mut member = state
            .members
            .get(&caller.email)
            .cloned()
            .ok_or(EngineError::InvalidApiKey)?;
        member.profile_tags =
            admin::self_profile_tags(role, requested, &member.profile_tags, |t| {
                state.is_strict(t)
            });
        state.members.insert(member.email.clone(), member.clone());
        work.accounts.push(WriteOp::UpdateMember(member));
        state.member_view(&caller.email)
    }

    pub(super) fn list_teams(&self, state: &OrgState) -> Vec<Team> {
        state.teams.values().cloned().collect()
    }

    pub(super) fn get_team(
        &self,
        state: &OrgState,
        name: &str,
    ) -> Result<(Team, Vec<Membership>), EngineError> {
        let team = state.team(name)?.clone();
        let members = state
            .memberships
            .values()
            .filter(|m| m.team == team.name)
            .cloned()
            .collect();
        Ok((team, members))
    }

    /// Owner role and an active enrollment, needed to set or change idp_only.
    fn check_idp_only_change(&self, state: &OrgState, role: Role) -> Result<(), EngineError> {
        if role != Role::Owner {
            return Err(EngineError::Forbidden(
                "only an owner can change idp_only".into(),
            ));
        }
        if !state.entry.record.idp_enrolled {
            return Err(EngineError::Forbidden(
                "idp_only needs an active identity-provider enrollment".into(),
            ));
        }
        Ok(())
    }

    pub(super) fn create_team(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        new: NewTeam,
    ) -> Result<Team, EngineError> {
        let role = state.require_admin(caller)?;
        state.check_vocabulary("tags", &new.tags)?;
        if new.idp_only {
            self.check_idp_only_change(state, role)?;
        }
        if state.teams.contains_key(&new.name) {
            return Err(EngineError::Conflict(format!(
                "team '{}' already exists",
                new.name
            )));
        }
        state.check_count(LimitKey::Teams, LimitKind::Teams, state.teams.len() + 1)?;
        let team = Team {
            name: new.name,
            tags: new.tags,
            description: new.description,
            idp_only: new.idp_only,
            created_by: caller.email.clone(),
            created_at: self.deps.clock.now_ms(),
        };
        self.save_team(state, work, &team);
        Ok(team)
    }

    pub(super) fn patch_team(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        name: &str,
        patch: TeamPatch,
    ) -> Result<Team, EngineError> {
        let role = state.require_admin(caller)?;
        let mut team = state.team(name)?.clone();
        if let Some(tags) = patch.tags {
            state.check_vocabulary("tags", &tags)?;
            team.tags = tags;
        }
        if let Some(description) = patch.description {
            team.description = description;
        }
        if let Some(idp_only) = patch.idp_only.filter(|v| *v != team.idp_only) {
            self.check_idp_only_change(state, role)?;
            team.idp_only = idp_only;
        }
        self.save_team(state, work, &team);
        Ok(team)
    }

    pub(super) fn delete_team(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        name: &str,
    ) -> Result<(), EngineError> {
        state.require_admin(caller)?;
        let team = state.team(name)?.name.clone();
        state.teams.remove(&team);
        state.memberships.retain(|(t, _), _| *t != team);
        work.accounts.push(WriteOp::DeleteTeam(team));
        Ok(())
    }

    pub(super) fn add_team_member(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        name: &str,
        email: &str,
    ) -> Result<Membership, EngineError> {
        state.require_admin(caller)?;
        let team = state.hand_managed_team(name)?;
        if !state.members.contains_key(email) {
            return Err(EngineError::NotFound(format!(
                "{email} is not a member of this org"
            )));
        }
        let key = (team.name.clone(), email.to_owned());
        let membership = match state.memberships.get(&key) {
            Some(m) if m.manual => {
                return Err(EngineError::Conflict(format!(
                    "{email} is already a member of team '{}'",
                    team.name
                )))
            }
            Some(m) => Membership {
                manual: true,
                ..m.clone()
            },
            None => Membership {
                team: team.name.clone(),
                email: email.to_owned(),
                manual: true,
                idp: false,
                added_by: caller.email.clone(),
                added_at: self.deps.clock.now_ms(),
            },
        };
        state.memberships.insert(key, membership.clone());
        work.accounts
            .push(WriteOp::UpsertMembership(membership.clone()));
        Ok(membership)
    }

    pub(super) fn remove_team_member(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        name: &str,
        email: &str,
    ) -> Result<(), EngineError> {
        state.require_admin(caller)?;
        let team = state.hand_managed_team(name)?;
        let key = (team.name.clone(), email.to_owned());
        let membership = state.memberships.get(&key).cloned().ok_or_else(|| {
            EngineError::NotFound(format!("{email} is not a member of team '{}'", team.name))
        })?;
        if !membership.manual {
            return Err(ValidationError::new(format!(
                "{email} is in team '{}' through the identity provider only",
                team.name
            ))
            .into());
        }
        let op = if membership.idp {
            let kept = Membership {
                manual: false,
                ..membership
            };
            state.memberships.insert(key, kept.clone());
            WriteOp::UpsertMembership(kept)
        } else {
            state.memberships.remove(&key);
            WriteOp::DeleteMembership {
                team: team.name,
                email: email.to_owned(),
            }
        };
        work.accounts.push(op);
        Ok(())
    }

    pub(super) fn idp_sync(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        view: IdpView,
    ) -> Result<(usize, usize), EngineError> {
        if !state.entry.record.idp_enrolled {
            return Err(EngineError::Conflict(
                "the identity-provider enrollment is not active".into(),
            ));
        }
        for (team, emails) in &view {
            if !state.teams.contains_key(team) {
                return Err(ValidationError::field(format!("teams.{team}"), "no such team").into());
            }
            if let Some(e) = emails.iter().find(|e| !state.members.contains_key(*e)) {
                return Err(ValidationError::field(
                    format!("teams.{team}"),
                    format!("{e} is not a member of this org"),
                )
                .into());
            }
        }
        let now = self.deps.clock.now_ms();
        let (mut added, mut removed) = (0, 0);
        let ops = &mut work.accounts;
        let keys: Vec<(String, String)> = state.memberships.keys().cloned().collect();
        for key in keys {
            let listed = view
                .get(&key.0)
                .is_some_and(|emails| emails.contains(&key.1));
            let m = &state.memberships[&key];
            if m.idp && !listed {
                removed += 1;
                if m.manual {
                    let kept = Membership {
                        idp: false,
                        ..m.clone()
                    };
                    ops.push(WriteOp::UpsertMembership(kept.clone()));
                    state.memberships.insert(key, kept);
                } else {
                    ops.push(WriteOp::DeleteMembership {
                        team: key.0.clone(),
                        email: key.1.clone(),
                    });
                    state.memberships.remove(&key);
                }
            }
        }
        for (team, emails) in view {
            for email in emails {
                let key = (team.clone(), email.clone());
                let membership = match state.memberships.get(&key) {
                    Some(m) if m.idp => continue,
                    Some(m) => Membership {
                        idp: true,
                        ..m.clone()
                    },
                    None => Membership {
                        team: team.clone(),
                        email,
                        manual: false,
                        idp: true,
                        added_by: "idp".into(),
                        added_at: now,
                    },
                };
                added += 1;
                ops.push(WriteOp::UpsertMembership(membership.clone()));
                state.memberships.insert(key, membership);
            }
        }
        Ok((added, removed))
    }
}
