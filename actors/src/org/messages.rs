//! The org actor's messages and what it answers.

use ractor::RpcReplyPort;
use serde::Serialize;

pub use super::limits::QuotaView;
use crate::domain::account::{Caller, KeyRecord, MemberRecord, Role};
use crate::domain::admin::{
    MemberPatch, MemberView, Membership, NewTag, NewTeam, Tag, TagPatch, Team, TeamPatch,
};
use crate::domain::usage::RequestKind;
use crate::domain::{
    ClaimRequest, KeyId, Lease, NewTask, TaskHeader, TaskId, TaskStatus, TaskUpdate,
};
use crate::error::EngineError;
use crate::writer::Commit;

pub type Reply<T> = RpcReplyPort<Result<T, EngineError>>;

/// Team name -> member emails, as the identity provider sees them.
pub type IdpView = std::collections::BTreeMap<String, std::collections::BTreeSet<String>>;

#[derive(Debug)]
pub enum OrgMsg {
    CreateTasks(Caller, Vec<NewTask>, Reply<(Vec<CreatedItem>, Commit)>),
    UpdateTasks(Caller, Vec<TaskUpdate>, Reply<(UpdateOutcome, Commit)>),
    ClaimNext(Caller, ClaimRequest, Reply<Option<(Claimed, Commit)>>),
    AddMember(NewMember, Reply<(MemberRecord, IssuedKey, Commit)>),
    /// Issues a key for an existing member (`POST /keys`, operator key reset).
    IssueKey(String, Option<String>, Reply<(IssuedKey, Commit)>),
    /// Revokes one of the member's (`email`) keys.
    RevokeKey(String, KeyId, Reply<Commit>),
    /// Revokes every key of the member (a strike block); answers their ids.
    RevokeMemberKeys(String, Reply<(Vec<KeyId>, Commit)>),

    ListTags(Reply<Vec<Tag>>),
    CreateTags(Caller, Vec<NewTag>, Reply<(Vec<Tag>, Commit)>),
    UpdateTags(Caller, Vec<TagPatch>, Reply<(Vec<Tag>, Commit)>),
    DeleteTags(Caller, Vec<String>, Reply<(Vec<String>, Commit)>),
    ListMembers(Reply<Vec<MemberView>>),
    GetMember(String, Reply<MemberView>),
    /// Changes the member `email` (`PATCH /members/{email}`).
    PatchMember(Caller, String, MemberPatch, Reply<(MemberView, Commit)>),
    /// Sets the caller's own profile tags (`PATCH /me`).
    PatchMe(Caller, Vec<String>, Reply<(MemberView, Commit)>),
    ListTeams(Reply<Vec<Team>>),
    GetTeam(String, Reply<(Team, Vec<Membership>)>),
    CreateTeam(Caller, NewTeam, Reply<(Team, Commit)>),
    PatchTeam(Caller, String, TeamPatch, Reply<(Team, Commit)>),
    DeleteTeam(Caller, String, Reply<Commit>),
    /// Adds the member `email` to a team by hand.
    AddTeamMember(Caller, String, String, Reply<(Membership, Commit)>),
    RemoveTeamMember(Caller, String, String, Reply<Commit>),
    /// The identity provider's whole view of team membership; answers how
    /// many `idp` sources were added and removed.
    IdpSync(IdpView, Reply<((usize, usize), Commit)>),

    /// Admits a request (kind, monthly requests, tasks it will create);
    /// the commit stores the usage it added.
    Admit(RequestKind, i64, i64, Reply<Commit>),
    GetQuota(Reply<QuotaView>),
    /// Charges one planning call; answers the plans left this month.
    ChargePlan(Reply<Option<i64>>),

    // Internal, reply-less.
    LeaseTick,
    IdleTick,
    #[cfg(feature = "test-hooks")]
    Crash,
}

#[derive(Debug, Clone)]
pub struct NewMember {
    pub email: String,
    pub role: Role,
    pub key_name: Option<String>,
}

/// A new key: its record and the secret, shown once.
#[derive(Debug, Clone)]
pub struct IssuedKey {
    pub record: KeyRecord,
    pub api_key: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct CreatedItem {
    #[serde(rename = "ref")]
    pub reference: Option<String>,
    pub task_id: TaskId,
    pub status: TaskStatus,
    pub created_at: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum UpdateResult {
    Applied {
        task_id: TaskId,
        status: TaskStatus,
        updated_at: String,
    },
    Failed {
        task_id: TaskId,
        error: &'static str,
    },
}

#[derive(Debug, Clone)]
pub struct UpdateOutcome {
    pub results: Vec<UpdateResult>,
}

impl UpdateOutcome {
    pub fn applied(&self) -> usize {
        self.results
            .iter()
            .filter(|r| matches!(r, UpdateResult::Applied { .. }))
            .count()
    }

    pub fn partial(&self) -> bool {
        self.applied() < self.results.len()
    }
}

#[derive(Debug, Clone)]
pub struct Claimed {
    /// The claimed task's header as the claim left it.
    pub header: TaskHeader,
    pub lease: Lease,
}

impl serde::Serialize for TaskStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Per-item error strings fixed by the contract.
pub mod item_error {
    pub const INVALID_TRANSITION: &str = "Invalid status transition";
    pub const ASSIGNEE_REQUIRED: &str = "assignee required";
    pub const LEASE_LOST: &str = "lease lost";
    pub const TASK_NOT_FOUND: &str = "task not found";
}
