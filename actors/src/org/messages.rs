//! The org actor's messages and what it answers.
//!
//! A member's request is admitted against the org's limits before anything
//! else, in the same turn, so a limited request costs one hop and one
//! commit; the variant says how it counts. Operator and system messages are
//! not admitted.

use std::sync::Arc;

use ractor::{ActorRef, RpcReplyPort};

use crate::api::{
    ClaimRequest, CreateSchedule, CreateTasks, CreateWebhook, CreatedItem, ListTasks, MemberPatch,
    MemberView, NewTag, NewTeam, PatchSchedule, QuotaView, TagPatch, TeamPatch, UpdateResult,
    UpdateTasks, WaitTasks,
};
use crate::directory::OrgEntry;
use crate::domain::account::{Caller, KeyRecord, MemberRecord, Role, SettingsChange};
use crate::domain::admin::{Membership, Tag, Team};
use crate::domain::order::ListKey;
use crate::domain::retention::Referrer;
use crate::domain::schedule::ScheduleRecord;
use crate::domain::usage::RequestKind;
use crate::domain::webhooks::Endpoint;
use crate::domain::{KeyId, Lease, ScheduleId, StoredTask, TaskHeader, TaskId, WebhookId};
use crate::error::EngineError;
use crate::writer::Commit;

/// What the actor answers: the result, and the commit of whatever it wrote
/// (usage included, also when the request failed), which the caller awaits
/// before it answers anyone.
pub struct Outcome<T> {
    pub result: Result<T, EngineError>,
    pub commit: Option<Commit>,
}

pub type Reply<T> = RpcReplyPort<Outcome<T>>;

/// Team name -> member emails, as the identity provider sees them.
pub type IdpView = std::collections::BTreeMap<String, std::collections::BTreeSet<String>>;

pub enum OrgMsg {
    // Members' requests, admitted first.
    CreateTasks {
        caller: Caller,
        request: CreateTasks,
        reply: Reply<Vec<CreatedItem>>,
    },
    UpdateTasks {
        caller: Caller,
        request: UpdateTasks,
        reply: Reply<Vec<UpdateResult>>,
    },
    /// Claims up to `request.limit()` tasks (none when nothing matches).
    ClaimNext {
        caller: Caller,
        request: ClaimRequest,
        reply: Reply<Vec<Claimed>>,
    },
    /// Admits a list request and answers the first `limit` open tasks
    /// that match `query`, in list order, strictly after `after`; the
    /// store serves the rest of the list, the finished tasks.
    ListOpen {
        query: ListTasks,
        after: Option<ListKey>,
        limit: usize,
        reply: Reply<Vec<ListKey>>,
    },
    /// Admits a wait for tasks and holds it until all (or any) of those
    /// found are finished, or its time runs out. The answer says only
    /// that: the engine reads the tasks once what finished them is
    /// committed.
    WaitTasks {
        caller: Caller,
        request: WaitTasks,
        reply: Reply<()>,
    },
    /// Admits a request served from the store (get, keys).
    Admit {
        kind: RequestKind,
        reply: Reply<()>,
    },
    CreateKey {
        caller: Caller,
        name: String,
        reply: Reply<IssuedKey>,
    },
    /// Revokes one of the caller's member's keys (`None`: an id that did
    /// not parse, which names no key).
    RevokeKey {
        caller: Caller,
        key_id: Option<KeyId>,
        reply: Reply<()>,
    },
    ListTags {
        reply: Reply<Vec<Tag>>,
    },
    CreateTags {
        caller: Caller,
        items: Vec<NewTag>,
        reply: Reply<Vec<Tag>>,
    },
    UpdateTags {
        caller: Caller,
        patches: Vec<TagPatch>,
        reply: Reply<Vec<Tag>>,
    },
    DeleteTags {
        caller: Caller,
        names: Vec<String>,
        reply: Reply<Vec<String>>,
    },
    ListMembers {
        reply: Reply<Vec<MemberView>>,
    },
    /// The caller's own member.
    GetMe {
        caller: Caller,
        reply: Reply<MemberView>,
    },
    PatchMember {
        caller: Caller,
        email: String,
        patch: MemberPatch,
        reply: Reply<MemberView>,
    },
    /// Sets the caller's own profile tags.
    PatchMe {
        caller: Caller,
        profile_tags: Vec<String>,
        reply: Reply<MemberView>,
    },
    ListTeams {
        reply: Reply<Vec<Team>>,
    },
    GetTeam {
        team: String,
        reply: Reply<(Team, Vec<Membership>)>,
    },
    CreateTeam {
        caller: Caller,
        team: NewTeam,
        reply: Reply<Team>,
    },
    PatchTeam {
        caller: Caller,
        team: String,
        patch: TeamPatch,
        reply: Reply<Team>,
    },
    DeleteTeam {
        caller: Caller,
        team: String,
        reply: Reply<()>,
    },
    /// Adds the member `email` to a team by hand.
    AddTeamMember {
        caller: Caller,
        team: String,
        email: String,
        reply: Reply<Membership>,
    },
    RemoveTeamMember {
        caller: Caller,
        team: String,
        email: String,
        reply: Reply<()>,
    },
    GetQuota {
        reply: Reply<QuotaView>,
    },
    /// The org's webhook endpoints (admins and owners).
    Webhook(WebhookMsg),
    Schedule(ScheduleMsg),
    /// Charges one planning call; answers the plans left this month.
    ChargePlan {
        reply: Reply<Option<i64>>,
    },

    // The operator's and the system's, not admitted.
    AddMember {
        member: NewMember,
        reply: Reply<(MemberRecord, IssuedKey)>,
    },
    /// Issues a key for an existing member (the operator's key reset).
    IssueKey {
        email: String,
        name: Option<String>,
        reply: Reply<IssuedKey>,
    },
    /// Revokes every key of the member (a strike block); answers their ids.
    RevokeMemberKeys {
        email: String,
        reply: Reply<Vec<KeyId>>,
    },
    /// The identity provider's whole view of team membership; answers how
    /// many `idp` sources were added and removed.
    IdpSync {
        view: IdpView,
        reply: Reply<(usize, usize)>,
    },

    /// Changes the org's settings; answers the org's entry as it now is.
    ChangeSettings {
        change: SettingsChange,
        reply: Reply<Arc<OrgEntry>>,
    },

    /// The retention sweep begins with the org: until it ends, what tasks
    /// written from now on name is pinned (`SweepPins`). Answered once
    /// what was written before is committed, so the sweep's reads see it.
    SweepBegins {
        reply: Reply<()>,
    },
    /// The tasks naming others the sweep read after it began.
    SweepRead {
        referrers: Vec<Referrer>,
        reply: Reply<()>,
    },
    /// The retention sweep is done with the org.
    SweepEnds {
        reply: Reply<()>,
    },
    /// The retention sweep's page: removes those of these finished tasks
    /// still last changed before `cutoff` and not pinned since the sweep
    /// began; answers how many it asked the store to remove.
    Prune {
        task_ids: Vec<TaskId>,
        cutoff: i64,
        reply: Reply<usize>,
    },

    /// The operator deleted the org: its data key and what acts for it go
    /// in one commit, and the actor takes no message after it.
    Delete {
        reply: Reply<()>,
    },

    // Internal, reply-less.
    /// The earliest lease expiry, waiting task or schedule tick may be due
    /// (`time.rs`); also sent to every running actor when a test moves the
    /// clock.
    TimeTick,
    /// A waiting claim's or wait's time may have run out.
    WaitElapsed,
    /// The server is stopping: every waiting claim answers `null` now, and
    /// every wait for tasks as it stands.
    ReleaseWaiters,
    /// A waiting claim's or wait's caller went away: it leaves now rather
    /// than the next time the actor looks.
    WaiterGone,
    /// A claim's answer never reached its claimant: the lease is undone,
    /// the task back to `pending`, unless the lease already changed.
    ClaimUndelivered {
        task: TaskId,
        lease: uuid::Uuid,
    },
    /// A refill's read of pending tasks' content, in claim order, to keep
    /// for their claims; empty when the read failed.
    ContentRead(Vec<StoredTask>),
    IdleTick,
    #[cfg(feature = "test-hooks")]
    Crash,
    /// Test hook: expires the leases due by the engine's clock now, without
    /// waiting for the timer, and answers when their batch is queued.
    #[cfg(feature = "test-hooks")]
    ExpireLeases(RpcReplyPort<()>),
}

/// A request about the org's schedules, a member's, admitted first.
pub enum ScheduleMsg {
    List {
        caller: Caller,
        reply: Reply<Vec<ScheduleRecord>>,
    },
    Get {
        caller: Caller,
        schedule: ScheduleId,
        reply: Reply<ScheduleRecord>,
    },
    Create {
        caller: Caller,
        request: CreateSchedule,
        reply: Reply<ScheduleRecord>,
    },
    Patch {
        caller: Caller,
        schedule: ScheduleId,
        patch: PatchSchedule,
        reply: Reply<ScheduleRecord>,
    },
    Delete {
        caller: Caller,
        schedule: ScheduleId,
        reply: Reply<()>,
    },
}

/// A request about the org's webhook endpoints; all but `Disable` are a
/// member's, admitted first.
pub enum WebhookMsg {
    List {
        caller: Caller,
        reply: Reply<Vec<Endpoint>>,
    },
    /// Answers whether the caller may see the org's endpoint `webhook`.
    Find {
        caller: Caller,
        webhook: WebhookId,
        reply: Reply<()>,
    },
    /// Answers the endpoint and its secret, shown once.
    Create {
        caller: Caller,
        request: CreateWebhook,
        reply: Reply<(Endpoint, String)>,
    },
    Delete {
        caller: Caller,
        webhook: WebhookId,
        reply: Reply<()>,
    },
    /// Answers the new secret.
    RotateSecret {
        caller: Caller,
        webhook: WebhookId,
        reply: Reply<String>,
    },
    /// Queues a test event; answers its id.
    Test {
        caller: Caller,
        webhook: WebhookId,
        reply: Reply<String>,
    },
    /// The delivery worker's: no more deliveries to the endpoint.
    Disable {
        webhook: WebhookId,
        reply: Reply<()>,
    },
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

pub struct Claimed {
    /// The claimed task's header as the claim left it.
    pub header: TaskHeader,
    pub lease: Lease,
    /// The task's content, when the actor still had it from the task's
    /// creation (its header is the one before the claim); otherwise the
    /// content is read from the store.
    pub content: Option<Box<StoredTask>>,
    pub ticket: ClaimTicket,
}

/// Travels with a claim until its answer is built for the claimant. Dropped
/// before that (the claimant's request was cancelled because it hung up,
/// the reply found nobody, or the answer failed to build), it tells the
/// actor to undo the claim, so no task waits out a lease nobody holds.
pub struct ClaimTicket {
    actor: ActorRef<OrgMsg>,
    task: TaskId,
    lease: uuid::Uuid,
    handed_over: bool,
}

impl ClaimTicket {
    pub(super) fn new(actor: ActorRef<OrgMsg>, task: TaskId, lease: uuid::Uuid) -> Self {
        ClaimTicket {
            actor,
            task,
            lease,
            handed_over: false,
        }
    }

    /// The answer is built: the claimant has the lease.
    pub fn handed_over(mut self) {
        self.handed_over = true;
    }
}

impl Drop for ClaimTicket {
    fn drop(&mut self) {
        if !self.handed_over {
            // A stopped actor reloads the lease, which then expires.
            let _ = self.actor.cast(OrgMsg::ClaimUndelivered {
                task: self.task,
                lease: self.lease,
            });
        }
    }
}
