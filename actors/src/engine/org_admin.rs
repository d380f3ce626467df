//! Tags, members, self, teams, quota, and the identity provider's sync.

use super::Engine;
use crate::api::{
    AddTeamMember, CreateTags, DeleteTags, IdpEnrollment, IdpSync, IdpSyncAnswer, MePatch, MeView,
    MemberPatch, MemberView, NewTeam, QuotaView, TagView, TagsCreated, TagsDeleted, TagsUpdated,
    TeamDetail, TeamPatch, TeamView, UpdateTags, TEAMS,
};
use crate::domain::account::{Caller, SettingsChange};
use crate::domain::OrgId;
use crate::error::EngineError;
use crate::org::OrgMsg;

fn tag_views(tags: &[crate::domain::admin::Tag]) -> Vec<TagView> {
    tags.iter().map(TagView::from).collect()
}

impl Engine {
    /// `GET /quota`: the monthly task quota.
    pub async fn quota(&self, caller: &Caller) -> Result<QuotaView, EngineError> {
        self.request(caller.org_id, |reply| OrgMsg::GetQuota { reply })
            .await
    }

    pub async fn list_tags(&self, caller: &Caller) -> Result<Vec<TagView>, EngineError> {
        let tags = self
            .request(caller.org_id, |reply| OrgMsg::ListTags { reply })
            .await?;
        Ok(tag_views(&tags))
    }

    pub async fn create_tags(
        &self,
        caller: &Caller,
        request: CreateTags,
    ) -> Result<TagsCreated, EngineError> {
        let tags = self
            .request(caller.org_id, |reply| OrgMsg::CreateTags {
                caller: caller.clone(),
                items: request.tags.clone(),
                reply,
            })
            .await?;
        Ok(TagsCreated {
            created: tags.len(),
            tags: tag_views(&tags),
        })
    }

    pub async fn update_tags(
        &self,
        caller: &Caller,
        request: UpdateTags,
    ) -> Result<TagsUpdated, EngineError> {
        let tags = self
            .request(caller.org_id, |reply| OrgMsg::UpdateTags {
                caller: caller.clone(),
                patches: request.tags.clone(),
                reply,
            })
            .await?;
        Ok(TagsUpdated {
            updated: tags.len(),
            tags: tag_views(&tags),
        })
    }

    pub async fn delete_tags(
        &self,
        caller: &Caller,
        request: DeleteTags,
    ) -> Result<TagsDeleted, EngineError> {
        let deleted = self
            .request(caller.org_id, |reply| OrgMsg::DeleteTags {
                caller: caller.clone(),
                names: request.names.clone(),
                reply,
            })
            .await?;
        Ok(TagsDeleted {
            count: deleted.len(),
            deleted,
        })
    }

    pub async fn list_members(&self, caller: &Caller) -> Result<Vec<MemberView>, EngineError> {
        self.request(caller.org_id, |reply| OrgMsg::ListMembers { reply })
            .await
    }

    pub async fn patch_member(
        &self,
        caller: &Caller,
        email: &str,
        patch: MemberPatch,
    ) -> Result<MemberView, EngineError> {
        let email = email.to_lowercase();
        let member = self
            .request(caller.org_id, |reply| OrgMsg::PatchMember {
                caller: caller.clone(),
                email: email.clone(),
                patch: patch.clone(),
                reply,
            })
            .await?;
        // Role and seat are part of every cached authentication of this member.
        self.forget_member_keys(caller.org_id, &email);
        Ok(member)
    }

    /// `GET /me`: email, role and profile tags.
    pub async fn me(&self, caller: &Caller) -> Result<MeView, EngineError> {
        let m = self
            .request(caller.org_id, |reply| OrgMsg::GetMe {
                caller: caller.clone(),
                reply,
            })
            .await?;
        Ok(MeView {
            email: m.email,
            role: m.role,
            profile_tags: m.profile_tags,
        })
    }

    pub async fn patch_me(
        &self,
        caller: &Caller,
        patch: MePatch,
    ) -> Result<MemberView, EngineError> {
        self.request(caller.org_id, |reply| OrgMsg::PatchMe {
            caller: caller.clone(),
            profile_tags: patch.profile_tags.clone(),
            reply,
        })
        .await
    }

    /// The plan gate of every team route, checked before anything else.
    async fn require_team_plan(&self, caller: &Caller) -> Result<(), EngineError> {
        self.require_paid_plan(caller, TEAMS).await
    }

    pub async fn list_teams(&self, caller: &Caller) -> Result<Vec<TeamView>, EngineError> {
        self.require_team_plan(caller).await?;
        let teams = self
            .request(caller.org_id, |reply| OrgMsg::ListTeams { reply })
            .await?;
        Ok(teams.iter().map(TeamView::from).collect())
    }

    pub async fn get_team(&self, caller: &Caller, name: &str) -> Result<TeamDetail, EngineError> {
        self.require_team_plan(caller).await?;
        let (team, members) = self
            .request(caller.org_id, |reply| OrgMsg::GetTeam {
                team: name.to_owned(),
                reply,
            })
            .await?;
        Ok(TeamDetail {
            team: TeamView::from(&team),
            members: members.iter().map(Into::into).collect(),
        })
    }

    pub async fn create_team(
        &self,
        caller: &Caller,
        team: NewTeam,
    ) -> Result<TeamView, EngineError> {
        self.require_team_plan(caller).await?;
        let team = self
            .request(caller.org_id, |reply| OrgMsg::CreateTeam {
                caller: caller.clone(),
                team: team.clone(),
                reply,
            })
            .await?;
        Ok(TeamView::from(&team))
    }

    pub async fn patch_team(
        &self,
        caller: &Caller,
        name: &str,
        patch: TeamPatch,
    ) -> Result<TeamView, EngineError> {
        self.require_team_plan(caller).await?;
        let team = self
            .request(caller.org_id, |reply| OrgMsg::PatchTeam {
                caller: caller.clone(),
                team: name.to_owned(),
                patch: patch.clone(),
                reply,
            })
            .await?;
        Ok(TeamView::from(&team))
    }

    pub async fn delete_team(&self, caller: &Caller, name: &str) -> Result<(), EngineError> {
        self.require_team_plan(caller).await?;
        self.request(caller.org_id, |reply| OrgMsg::DeleteTeam {
            caller: caller.clone(),
            team: name.to_owned(),
            reply,
        })
        .await
    }

    pub async fn add_team_member(
        &self,
        caller: &Caller,
        name: &str,
        request: AddTeamMember,
    ) -> Result<crate::api::TeamMemberView, EngineError> {
        self.require_team_plan(caller).await?;
        let membership = self
            .request(caller.org_id, |reply| OrgMsg::AddTeamMember {
                caller: caller.clone(),
                team: name.to_owned(),
                email: request.email.clone(),
                reply,
            })
            .await?;
        Ok((&membership).into())
    }

    pub async fn remove_team_member(
        &self,
        caller: &Caller,
        name: &str,
        email: &str,
    ) -> Result<(), EngineError> {
        self.require_team_plan(caller).await?;
        self.request(caller.org_id, |reply| OrgMsg::RemoveTeamMember {
            caller: caller.clone(),
            team: name.to_owned(),
            email: email.to_lowercase(),
            reply,
        })
        .await
    }

    /// `POST /admin/orgs/{id}/idp`: turns the enrollment on or off.
    pub async fn set_idp_enrollment(
        &self,
        org: OrgId,
        request: IdpEnrollment,
    ) -> Result<IdpEnrollment, EngineError> {
        self.change_settings(org, SettingsChange::idp_enrollment(request.enrolled))
            .await?;
        Ok(request)
    }

    /// `POST /admin/orgs/{id}/idp/sync`.
    pub async fn idp_sync(
        &self,
        org: OrgId,
        request: IdpSync,
    ) -> Result<IdpSyncAnswer, EngineError> {
        self.inner.directory.get(org).await?;
        let (added, removed) = self
            .request(org, |reply| OrgMsg::IdpSync {
                view: request.teams.clone(),
                reply,
            })
            .await?;
        Ok(IdpSyncAnswer { added, removed })
    }
}
