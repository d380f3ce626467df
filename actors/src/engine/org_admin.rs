//! Tags, members, self, teams, and the identity provider's sync.

use serde_json::{json, Value};

use super::{committed, Engine};
use crate::domain::account::Caller;
use crate::domain::admin::{self, MemberView, Tag, Team};
use crate::domain::usage::RequestKind;
use crate::domain::OrgId;
use crate::error::EngineError;
use crate::org::OrgMsg;

impl Engine {
    pub async fn list_tags(&self, caller: &Caller) -> Result<Vec<Tag>, EngineError> {
        self.admit(caller, RequestKind::Read, 1, 0).await?;
        self.ask(caller.org_id, OrgMsg::ListTags).await
    }

    pub async fn create_tags(&self, caller: &Caller, body: &Value) -> Result<Value, EngineError> {
        self.admit(caller, RequestKind::Write, 1, 0).await?;
        let items = admin::new_tags(body)?;
        let (tags, commit) = self
            .ask(caller.org_id, |r| {
                OrgMsg::CreateTags(caller.clone(), items.clone(), r)
            })
            .await?;
        committed(commit).await?;
        Ok(json!({ "created": tags.len(), "tags": tags }))
    }

    pub async fn update_tags(&self, caller: &Caller, body: &Value) -> Result<Value, EngineError> {
        self.admit(caller, RequestKind::Write, 1, 0).await?;
        let patches = admin::tag_patches(body)?;
        let (tags, commit) = self
            .ask(caller.org_id, |r| {
                OrgMsg::UpdateTags(caller.clone(), patches.clone(), r)
            })
            .await?;
        committed(commit).await?;
        Ok(json!({ "updated": tags.len(), "tags": tags }))
    }

    pub async fn delete_tags(&self, caller: &Caller, body: &Value) -> Result<Value, EngineError> {
        self.admit(caller, RequestKind::Write, 1, 0).await?;
        let names = admin::tag_deletions(body)?;
        let (deleted, commit) = self
            .ask(caller.org_id, |r| {
                OrgMsg::DeleteTags(caller.clone(), names.clone(), r)
            })
            .await?;
        committed(commit).await?;
        Ok(json!({ "count": deleted.len(), "deleted": deleted }))
    }

    pub async fn list_members(&self, caller: &Caller) -> Result<Vec<MemberView>, EngineError> {
        self.admit(caller, RequestKind::Read, 1, 0).await?;
        self.ask(caller.org_id, OrgMsg::ListMembers).await
    }

    pub async fn patch_member(
        &self,
        caller: &Caller,
        email: &str,
        body: &Value,
    ) -> Result<MemberView, EngineError> {
        self.admit(caller, RequestKind::Write, 1, 0).await?;
        let patch = admin::member_patch(body)?;
        let email = email.to_lowercase();
        let (member, commit) = self
            .ask(caller.org_id, |r| {
                OrgMsg::PatchMember(caller.clone(), email.clone(), patch.clone(), r)
            })
            .await?;
        committed(commit).await?;
        // Role and seat are part of every cached authentication of this member.
        self.forget_member_keys(caller.org_id, &email);
        Ok(member)
    }

    /// `GET /me`: email, role and profile tags.
    pub async fn me(&self, caller: &Caller) -> Result<Value, EngineError> {
        self.admit(caller, RequestKind::Read, 1, 0).await?;
        let email = caller.email.clone();
        let m = self
            .ask(caller.org_id, |r| OrgMsg::GetMember(email.clone(), r))
            .await?;
        Ok(json!({ "email": m.email, "role": m.role, "profile_tags": m.profile_tags }))
    }

    pub async fn patch_me(&self, caller: &Caller, body: &Value) -> Result<MemberView, EngineError> {
        self.admit(caller, RequestKind::Write, 1, 0).await?;
        let tags = admin::me_patch(body)?;
        let (member, commit) = self
            .ask(caller.org_id, |r| {
                OrgMsg::PatchMe(caller.clone(), tags.clone(), r)
            })
            .await?;
        committed(commit).await?;
        Ok(member)
    }

    /// The plan gate of every team route, checked before anything else (a
    /// free org hears that teams need an upgrade, not what its body lacks).
    async fn require_team_plan(&self, caller: &Caller) -> Result<(), EngineError> {
        let entry = self.inner.directory.get(caller.org_id).await?;
        entry.record.require_paid_plan("teams")
    }

    pub async fn list_teams(&self, caller: &Caller) -> Result<Vec<Team>, EngineError> {
        self.require_team_plan(caller).await?;
        self.admit(caller, RequestKind::Read, 1, 0).await?;
        self.ask(caller.org_id, OrgMsg::ListTeams).await
    }

    pub async fn get_team(&self, caller: &Caller, name: &str) -> Result<Value, EngineError> {
        self.require_team_plan(caller).await?;
        self.admit(caller, RequestKind::Read, 1, 0).await?;
        let (team, members) = self
            .ask(caller.org_id, |r| OrgMsg::GetTeam(name.to_owned(), r))
            .await?;
        let mut out = json!(team);
        out["members"] = json!(members);
        Ok(out)
    }

    pub async fn create_team(&self, caller: &Caller, body: &Value) -> Result<Team, EngineError> {
        self.require_team_plan(caller).await?;
        self.admit(caller, RequestKind::Write, 1, 0).await?;
        let new = admin::new_team(body)?;
        let (team, commit) = self
            .ask(caller.org_id, |r| {
                OrgMsg::CreateTeam(caller.clone(), new.clone(), r)
            })
            .await?;
        committed(commit).await?;
        Ok(team)
    }

    pub async fn patch_team(
        &self,
        caller: &Caller,
        name: &str,
        body: &Value,
    ) -> Result<Team, EngineError> {
        self.require_team_plan(caller).await?;
        self.admit(caller, RequestKind::Write, 1, 0).await?;
        let patch = admin::team_patch(body)?;
        let (team, commit) = self
            .ask(caller.org_id, |r| {
                OrgMsg::PatchTeam(caller.clone(), name.to_owned(), patch.clone(), r)
            })
            .await?;
        committed(commit).await?;
        Ok(team)
    }

    pub async fn delete_team(&self, caller: &Caller, name: &str) -> Result<(), EngineError> {
        self.require_team_plan(caller).await?;
        self.admit(caller, RequestKind::Write, 1, 0).await?;
        let commit = self
            .ask(caller.org_id, |r| {
                OrgMsg::DeleteTeam(caller.clone(), name.to_owned(), r)
            })
            .await?;
        committed(commit).await
    }

    pub async fn add_team_member(
        &self,
        caller: &Caller,
        name: &str,
        body: &Value,
    ) -> Result<Value, EngineError> {
        self.require_team_plan(caller).await?;
        self.admit(caller, RequestKind::Write, 1, 0).await?;
        let email = admin::team_member(body)?;
        let (membership, commit) = self
            .ask(caller.org_id, |r| {
                OrgMsg::AddTeamMember(caller.clone(), name.to_owned(), email.clone(), r)
            })
            .await?;
        committed(commit).await?;
        Ok(json!(membership))
    }

    pub async fn remove_team_member(
        &self,
        caller: &Caller,
        name: &str,
        email: &str,
    ) -> Result<(), EngineError> {
        self.require_team_plan(caller).await?;
        self.admit(caller, RequestKind::Write, 1, 0).await?;
        let email = email.to_lowercase();
        let commit = self
            .ask(caller.org_id, |r| {
                OrgMsg::RemoveTeamMember(caller.clone(), name.to_owned(), email.clone(), r)
            })
            .await?;
        committed(commit).await
    }

    /// `POST /admin/orgs/{id}/idp`: turns the enrollment on or off.
    pub async fn set_idp_enrollment(
        &self,
        org_id: &str,
        body: &Value,
    ) -> Result<Value, EngineError> {
        let org: OrgId = org_id
            .parse()
            .map_err(|_| EngineError::NotFound("organization not found".into()))?;
        let enrolled = body
            .as_object()
            .and_then(|o| o.get("enrolled"))
            .and_then(Value::as_bool)
            .ok_or_else(|| EngineError::validation("enrolled: must be a boolean"))?;
        let mut record = self
            .inner
            .store
            .get_org(org)
            .await?
            .ok_or_else(|| EngineError::NotFound("organization not found".into()))?;
        record.idp_enrolled = enrolled;
        self.inner.store.update_org(&record).await?;
        self.inner.directory.refresh(record)?;
        Ok(json!({ "enrolled": enrolled }))
    }

    /// `POST /admin/orgs/{id}/idp/sync`.
    pub async fn idp_sync(&self, org_id: &str, body: &Value) -> Result<Value, EngineError> {
        let org: OrgId = org_id
            .parse()
            .map_err(|_| EngineError::NotFound("organization not found".into()))?;
        let view = admin::idp_sync(body)?;
        self.inner.directory.get(org).await?;
        let ((added, removed), commit) =
            self.ask(org, |r| OrgMsg::IdpSync(view.clone(), r)).await?;
        committed(commit).await?;
        Ok(json!({ "added": added, "removed": removed }))
    }
}
