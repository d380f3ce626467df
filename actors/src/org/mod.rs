//! The org actor: single owner of one org's hot state.
//!
//! It holds the headers of the org's open tasks (never their content), the
//! pending queue in claim order, the leases ordered by expiry with one timer
//! for the earliest, the blocker-to-dependents links, and the org's members
//! and keys. Every state change of the org passes through its mailbox, so
//! changes are totally ordered without locks. It applies a change in memory,
//! hands the rows to the group-commit writer and answers with a `Commit` the
//! caller awaits; the actor itself never waits for a commit.
//!
//! Finished tasks leave memory; when a message needs one (an update of a
//! completed task, a blocker's status) the actor waits for its own queued
//! writes to commit (`Writers::barrier`) and reads the store.
//!
//! The state is a cache of the store: the actor can be stopped when idle and
//! is rebuilt from the store when it starts or restarts.

mod access;
mod admin;
mod limits;
mod messages;
mod tasks;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use ractor::{Actor, ActorProcessingErr, ActorRef};

pub use access::{format_api_key, parse_api_key};
pub use messages::*;

use crate::clock::Clock;
use crate::directory::{OrgDirectory, OrgEntry};
use crate::domain::account::{KeyRecord, MemberRecord};
use crate::domain::admin::{Membership, Tag, Team};
use crate::domain::open::OpenTasks;
use crate::domain::usage::Usage;
use crate::domain::{KeyId, OrgId};
use crate::store::Store;
use crate::supervisor::SupervisorMsg;
use crate::writer::Writers;

/// What every org actor shares with the rest of the engine.
#[derive(Clone)]
pub struct OrgDeps {
    pub store: Store,
    pub writers: Writers,
    pub directory: Arc<OrgDirectory>,
    pub clock: Arc<dyn Clock>,
    pub idle_after: Duration,
    /// Pending tasks per org, published for `/metrics`.
    pub queue_depths: Arc<DashMap<OrgId, usize>>,
}

pub struct OrgActor {
    pub deps: OrgDeps,
    pub supervisor: ActorRef<SupervisorMsg>,
}

pub struct OrgState {
    org: OrgId,
    entry: Arc<OrgEntry>,
    /// Open tasks (pending, paused, in_progress, feedback, blocked) and
    /// their indexes.
    open: OpenTasks,
    members: HashMap<String, MemberRecord>,
    keys: HashMap<KeyId, KeyRecord>,
    /// The tag vocabulary, by name.
    tags: BTreeMap<String, Tag>,
    teams: BTreeMap<String, Team>,
    /// (team, email) -> membership.
    memberships: BTreeMap<(String, String), Membership>,
    /// This month's counters.
    usage: Usage,
    buckets: limits::Buckets,
    /// When the armed lease timer fires, if one is armed.
    lease_timer_at: Option<i64>,
    last_active: Instant,
    retiring: bool,
    /// Memory may be ahead of the store after a failed message: restart.
    needs_reload: bool,
}

impl Actor for OrgActor {
    type Msg = OrgMsg;
    type State = OrgState;
    type Arguments = OrgId;

    async fn pre_start(
        &self,
        _myself: ActorRef<OrgMsg>,
        org: OrgId,
    ) -> Result<OrgState, ActorProcessingErr> {
        // Cheap on purpose: the supervisor waits for this. The state is loaded
        // in `post_start`, while messages queue.
        let entry = self.deps.directory.get(org).await?;
        Ok(OrgState {
            org,
            entry,
            open: OpenTasks::default(),
            members: HashMap::new(),
            keys: HashMap::new(),
            lease_timer_at: None,
            tags: BTreeMap::new(),
            teams: BTreeMap::new(),
            memberships: BTreeMap::new(),
            usage: Usage::default(),
            buckets: limits::Buckets::default(),
            last_active: Instant::now(),
            retiring: false,
            needs_reload: false,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<OrgMsg>,
        state: &mut OrgState,
    ) -> Result<(), ActorProcessingErr> {
        let deps = &self.deps;
        let org = state.org;
        // Every batch of a previous incarnation is committed before we read.
        deps.writers.reopen(org).await?;
        let headers = deps.store.open_task_headers(org).await?;
        for h in headers {
            state.open.put(h);
        }
        for m in deps.store.org_members(org).await? {
            state.members.insert(m.email.clone(), m);
        }
        for k in deps.store.org_keys(org).await? {
            state.keys.insert(k.key_id, k);
        }
        for t in deps.store.org_tags(org).await? {
            state.tags.insert(t.name.clone(), t);
        }
        for t in deps.store.org_teams(org).await? {
            state.teams.insert(t.name.clone(), t);
        }
        for m in deps.store.org_memberships(org).await? {
            state
                .memberships
                .insert((m.team.clone(), m.email.clone()), m);
        }
        if let Some(usage) = deps.store.org_usage(org).await? {
            state.usage = usage;
        }
        tracing::info!(org_id = %org, open_tasks = state.open.len(), "org actor started");
        self.expire_leases(state);
        self.publish_depth(state);
        let period = (deps.idle_after / 2).max(Duration::from_millis(200));
        myself.send_interval(period, || OrgMsg::IdleTick);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<OrgMsg>,
        state: &mut OrgState,
    ) -> Result<(), ActorProcessingErr> {
        if state.open.has_leases() {
            // A claim reached us while we drained: someone must expire it.
            let _ = self.supervisor.cast(SupervisorMsg::Wake(state.org));
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<OrgMsg>,
        msg: OrgMsg,
        state: &mut OrgState,
    ) -> Result<(), ActorProcessingErr> {
        if !matches!(msg, OrgMsg::IdleTick | OrgMsg::LeaseTick) {
            state.last_active = Instant::now();
        }
        if let Some(entry) = self.deps.directory.cached(state.org) {
            state.entry = entry;
        }
        match msg {
            OrgMsg::CreateTasks(caller, items, reply) => {
                let _ = reply.send(self.create_tasks(state, &caller, items).await);
            }
            OrgMsg::UpdateTasks(caller, items, reply) => {
                let _ = reply.send(self.update_tasks(state, &caller, items).await);
            }
            OrgMsg::ClaimNext(caller, request, reply) => {
                let _ = reply.send(Ok(self.claim_next(state, &caller, &request)));
            }
            OrgMsg::AddMember(member, reply) => {
                let _ = reply.send(self.add_member(state, member));
            }
            OrgMsg::IssueKey(email, name, reply) => {
                let _ = reply.send(self.issue_key(state, &email, name));
            }
            OrgMsg::RevokeKey(email, key_id, reply) => {
                let _ = reply.send(self.revoke_key(state, &email, key_id));
            }
            OrgMsg::RevokeMemberKeys(email, reply) => {
                let _ = reply.send(Ok(self.revoke_member_keys(state, &email)));
            }
            OrgMsg::ListTags(reply) => {
                let _ = reply.send(Ok(self.list_tags(state)));
            }
            OrgMsg::CreateTags(caller, items, reply) => {
                let _ = reply.send(self.create_tags(state, &caller, items));
            }
            OrgMsg::UpdateTags(caller, items, reply) => {
                let _ = reply.send(self.update_tags(state, &caller, items));
            }
            OrgMsg::DeleteTags(caller, names, reply) => {
                let _ = reply.send(self.delete_tags(state, &caller, names));
            }
            OrgMsg::ListMembers(reply) => {
                let _ = reply.send(Ok(self.list_members(state)));
            }
            OrgMsg::GetMember(email, reply) => {
                let _ = reply.send(self.get_member(state, &email));
            }
            OrgMsg::PatchMember(caller, email, patch, reply) => {
                let _ = reply.send(self.patch_member(state, &caller, &email, patch));
            }
            OrgMsg::PatchMe(caller, tags, reply) => {
                let _ = reply.send(self.patch_me(state, &caller, tags));
            }
            OrgMsg::ListTeams(reply) => {
                let _ = reply.send(Ok(self.list_teams(state)));
            }
            OrgMsg::GetTeam(name, reply) => {
                let _ = reply.send(self.get_team(state, &name));
            }
            OrgMsg::CreateTeam(caller, team, reply) => {
                let _ = reply.send(self.create_team(state, &caller, team));
            }
            OrgMsg::PatchTeam(caller, name, patch, reply) => {
                let _ = reply.send(self.patch_team(state, &caller, &name, patch));
            }
            OrgMsg::DeleteTeam(caller, name, reply) => {
                let _ = reply.send(self.delete_team(state, &caller, &name));
            }
            OrgMsg::AddTeamMember(caller, name, email, reply) => {
                let _ = reply.send(self.add_team_member(state, &caller, &name, &email));
            }
            OrgMsg::RemoveTeamMember(caller, name, email, reply) => {
                let _ = reply.send(self.remove_team_member(state, &caller, &name, &email));
            }
            OrgMsg::IdpSync(view, reply) => {
                let _ = reply.send(self.idp_sync(state, view));
            }
            OrgMsg::Admit(kind, requests, tasks, reply) => {
                let now = self.deps.clock.now_ms();
                let admitted = state
                    .admit(kind, requests, tasks, now, &self.deps.clock)
                    .map(|()| self.save_usage(state));
                let _ = reply.send(admitted);
            }
            OrgMsg::ChargePlan(reply) => {
                let charged = state.charge_plan(self.deps.clock.now_ms());
                if charged.is_ok() {
                    // Charged before the model runs; nobody waits for this.
                    drop(self.save_usage(state));
                }
                let _ = reply.send(charged);
            }
            OrgMsg::GetQuota(reply) => {
                let _ = reply.send(Ok(self.quota(state)));
            }
            OrgMsg::LeaseTick => {
                state.lease_timer_at = None;
                self.expire_leases(state);
            }
            OrgMsg::IdleTick => {
                if !state.retiring
                    && !state.open.has_leases()
                    && state.last_active.elapsed() >= self.deps.idle_after
                {
                    state.retiring = true;
                    tracing::info!(org_id = %state.org, "org actor idle; asking to stop");
                    let _ = self
                        .supervisor
                        .cast(SupervisorMsg::Idle(state.org, myself.get_id()));
                }
            }
            #[cfg(feature = "test-hooks")]
            OrgMsg::Crash => panic!("org actor crash requested by a test hook"),
        }
        if state.needs_reload {
            return Err(format!("org {} must reload its state from the store", state.org).into());
        }
        self.arm_lease_timer(&myself, state);
        self.publish_depth(state);
        Ok(())
    }
}

impl OrgActor {
    fn publish_depth(&self, state: &OrgState) {
        let depth = state.open.pending_len();
        if self.deps.queue_depths.get(&state.org).map(|d| *d) != Some(depth) {
            self.deps.queue_depths.insert(state.org, depth);
        }
    }

    /// Arms the single lease timer for the earliest expiry, unless one that
    /// fires no later is already armed.
    fn arm_lease_timer(&self, myself: &ActorRef<OrgMsg>, state: &mut OrgState) {
        let Some(next) = state.open.next_lease_deadline() else {
            return;
        };
        if state.lease_timer_at.is_some_and(|at| at <= next) {
            return;
        }
        let wait_ms = (next - self.deps.clock.now_ms()).max(0) as u64 + 1;
        myself.send_after(Duration::from_millis(wait_ms), || OrgMsg::LeaseTick);
        state.lease_timer_at = Some(next);
    }
}
