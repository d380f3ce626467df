//! The org actor: single owner of one org's hot state.
//!
//! It holds the headers of the org's open tasks, the pending queue in
//! claim order, the content of the tasks it created until they are first
//! claimed (within a byte budget shared by all orgs: see `content`), the
//! leases ordered by expiry with one timer for the earliest, the
//! blocker-to-dependents links, the org's members and keys, its vocabulary
//! and teams, and its usage counters and rate buckets. Every state change
//! of the org passes through its mailbox, so changes are totally ordered
//! without locks.
//!
//! A member's request is admitted (limits) and applied in one turn: the
//! actor takes a slot in its writer lane (or refuses as overloaded, with
//! nothing applied), admits, applies the change in memory, hands the rows
//! to the group-commit writer and answers with the commit, which the caller
//! awaits; the actor itself never waits for a commit.
//!
//! Finished tasks leave memory; when a message needs one (an update of a
//! completed task, a blocker's status) the actor waits for its own queued
//! writes to commit (`Writers::barrier`) and reads the store.
//!
//! The state is a cache of the store: the actor can be stopped when idle and
//! is rebuilt from the store when it starts or restarts. It tells whoever
//! supervises it about its lifecycle through an [`OrgEvents`] hook.

mod access;
mod admin;
mod claims;
mod content;
mod deletion;
mod limits;
mod messages;
mod refused;
mod retention;
mod schedules;
mod settings;
mod tasks;
mod time;
mod turn;
mod waiters;
mod webhooks;
mod work;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef};

pub use access::{format_api_key, parse_api_key};
pub use content::ContentBudget;
pub use messages::*;
pub use schedules::open_template;
pub use turn::Admission;

use crate::clock::Clock;
use crate::directory::{OrgDirectory, OrgEntry};
use crate::domain::account::{KeyRecord, MemberRecord};
use crate::domain::admin::{Membership, Tag, Team};
use crate::domain::open::OpenTasks;
use crate::domain::schedule::ScheduleRecord;
use crate::domain::usage::Usage;
use crate::domain::webhooks::Endpoint;
use crate::domain::{KeyId, OrgId, ScheduleId};
use crate::error::EngineError;
use crate::health::StoreHealth;
use crate::stats::OrgSnapshots;
use crate::store::{Fence, Store};
use crate::writer::Writers;

/// What every org actor shares with the rest of the engine.
#[derive(Clone)]
pub struct OrgDeps {
    pub store: Store,
    pub health: Arc<StoreHealth>,
    pub writers: Writers,
    pub directory: Arc<OrgDirectory>,
    pub clock: Arc<dyn Clock>,
    pub idle_after: Duration,
    /// Each org's open tasks by status and its leases, published for the
    /// operator (`/metrics`, `/admin/stats`).
    pub snapshots: Arc<OrgSnapshots>,
    /// Set when the server begins to stop: claims no longer wait.
    pub draining: Arc<std::sync::atomic::AtomicBool>,
    /// The bytes all orgs' [`content::ContentCache`]s may take together.
    pub content_budget: Arc<ContentBudget>,
    /// This node's place among several on one PostgreSQL; `None` alone.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
}

/// What an org actor tells its supervisor.
#[derive(Debug, Clone, Copy)]
pub enum OrgEvent {
    /// It has been idle long enough to stop.
    Idle { org: OrgId, actor: ActorId },
    /// It stopped with something due at a time (leases, waiting tasks,
    /// schedules): the org needs an actor so that it happens on time.
    StoppedNeedingTimer { org: OrgId },
}

pub type OrgEvents = Arc<dyn Fn(OrgEvent) + Send + Sync>;

pub struct OrgActor {
    pub deps: OrgDeps,
    pub events: OrgEvents,
}

pub struct OrgState {
    org: OrgId,
    /// This node's ownership of the org, checked by every commit (several
    /// nodes); `None` on a node alone.
    fence: Option<Fence>,
    entry: Arc<OrgEntry>,
    /// Open tasks (pending, paused, in_progress, feedback, blocked) and
    /// their indexes.
    open: OpenTasks,
    /// The content of tasks created here and not yet claimed, within a
    /// budget shared by all orgs.
    content: content::ContentCache,
    members: HashMap<String, MemberRecord>,
    keys: HashMap<KeyId, KeyRecord>,
    /// The tag vocabulary, by name.
    tags: BTreeMap<String, Tag>,
    teams: BTreeMap<String, Team>,
    /// (team, email) -> membership.
    memberships: BTreeMap<(String, String), Membership>,
    /// Webhook endpoints, active or not, without their secrets.
    webhooks: Vec<Endpoint>,
    /// Schedules, active or not, by id; their templates sealed.
    schedules: BTreeMap<ScheduleId, ScheduleRecord>,
    /// This month's counters.
    usage: Usage,
    buckets: limits::Buckets,
    /// Leases whose holders the write limit refused (their expiry uses no
    /// attempt).
    refused: refused::RefusedLeases,
    /// Claims waiting for a task (long polls), in arrival order.
    waiters: waiters::Waiters,
    /// Waits for tasks to finish.
    task_waits: waiters::TaskWaits,
    /// While a retention sweep runs: what tasks written since it began name.
    sweep_pins: Option<crate::domain::retention::SweepPins>,
    /// When the armed timer (leases, waiting tasks, schedules) fires, if
    /// one is armed.
    timer_at: Option<i64>,
    last_active: Instant,
    retiring: bool,
    /// The org is deleted: every later message is dropped unanswered, so
    /// its sender finds no org.
    deleted: bool,
    /// Memory may be ahead of the store after a failed message: restart.
    needs_reload: bool,
    /// This actor, for the tickets of its claims.
    myself: ActorRef<OrgMsg>,
}

/// Serves one replying message: takes a writer slot, admits the request
/// when it is a member's, runs `$op` with `$work` in scope, and answers
/// with the result and the commit of what was written.
macro_rules! serve {
    ($self:ident, $state:ident, $reply:expr, $admission:expr, |$work:ident| $op:expr) => {{
        match $self.begin($state, $admission) {
            Err(e) => {
                let _ = $reply.send(Outcome {
                    result: Err(e),
                    commit: None,
                });
            }
            Ok((slot, work)) => {
                #[allow(unused_mut)]
                let mut $work = work;
                let result = $op;
                $self.finish($state, slot, $work, result, $reply);
            }
        }
    }};
}

impl Actor for OrgActor {
    type Msg = OrgMsg;
    type State = OrgState;
    type Arguments = (OrgId, Option<Fence>);

    async fn pre_start(
        &self,
        myself: ActorRef<OrgMsg>,
        (org, fence): (OrgId, Option<Fence>),
    ) -> Result<OrgState, ActorProcessingErr> {
        // Cheap on purpose: the supervisor waits for this. The state is loaded
        // in `post_start`, while messages queue.
        let entry = self.deps.directory.get(org).await?;
        Ok(OrgState {
            org,
            fence,
            entry,
            open: OpenTasks::default(),
            content: content::ContentCache::new(self.deps.content_budget.clone()),
            members: HashMap::new(),
            keys: HashMap::new(),
            timer_at: None,
            tags: BTreeMap::new(),
            teams: BTreeMap::new(),
            memberships: BTreeMap::new(),
            webhooks: Vec::new(),
            schedules: BTreeMap::new(),
            usage: Usage::default(),
            buckets: limits::Buckets::default(),
            refused: refused::RefusedLeases::default(),
            waiters: waiters::Waiters::default(),
            task_waits: waiters::TaskWaits::default(),
            sweep_pins: None,
            last_active: Instant::now(),
            retiring: false,
            deleted: false,
            needs_reload: false,
            myself,
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
        let records = deps.store.load_org(org).await.inspect_err(|e| {
            deps.health.observe(e);
        })?;
        let record = records
            .record
            .ok_or_else(|| EngineError::NotFound("organization not found".into()))?;
        state.entry = deps.directory.install_stored(record)?;
        for h in records.open_tasks {
            state.open.put(h);
        }
        state.members = records
            .members
            .into_iter()
            .map(|m| (m.email.clone(), m))
            .collect();
        state.keys = records.keys.into_iter().map(|k| (k.key_id, k)).collect();
        state.tags = records
            .tags
            .into_iter()
            .map(|t| (t.name.clone(), t))
            .collect();
        state.teams = records
            .teams
            .into_iter()
            .map(|t| (t.name.clone(), t))
            .collect();
        state.memberships = records
            .memberships
            .into_iter()
            .map(|m| ((m.team.clone(), m.email.clone()), m))
            .collect();
        state.webhooks = records.webhooks;
        state.schedules = records
            .schedules
            .into_iter()
            .map(|s| (s.schedule_id, s))
            .collect();
        state.usage = records.usage.unwrap_or_default();
        tracing::info!(org_id = %org, open_tasks = state.open.len(), "org actor started");
        // Leases that ran out and ticks missed while nobody served the org
        // come first.
        self.expire_leases(state).await?;
        myself.send_message(OrgMsg::TimeTick)?;
        // Also replaces what a predecessor that failed left behind.
        self.publish(state);
        let period = (deps.idle_after / 2).max(Duration::from_millis(200));
        myself.send_interval(period, || OrgMsg::IdleTick);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<OrgMsg>,
        state: &mut OrgState,
    ) -> Result<(), ActorProcessingErr> {
        self.release_waiters(state);
        self.publish(state);
        if state.needs_timer() && !state.deleted {
            // A claim reached us while we drained: someone must expire it.
            (self.events)(OrgEvent::StoppedNeedingTimer { org: state.org });
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<OrgMsg>,
        msg: OrgMsg,
        state: &mut OrgState,
    ) -> Result<(), ActorProcessingErr> {
        if state.deleted {
            return Ok(());
        }
        if !matches!(
            msg,
            OrgMsg::IdleTick
                | OrgMsg::TimeTick
                | OrgMsg::WaitElapsed
                | OrgMsg::ReleaseWaiters
                | OrgMsg::SweepEnds { .. }
        ) {
            state.last_active = Instant::now();
        }
        let write = Some(Admission::write());
        let read = Some(Admission::read());
        match msg {
            OrgMsg::CreateTasks {
                caller,
                request,
                reply,
            } => {
                let admission = Some(Admission::create(request.tasks.len()));
                serve!(self, state, reply, admission, |work| {
                    self.create_tasks(state, &mut work, &caller, request, None)
                        .await
                })
            }
            OrgMsg::UpdateTasks {
                caller,
                request,
                reply,
            } => match self.begin(state, write) {
                Err(e) => {
                    if e.is_write_limit() {
                        state
                            .refused
                            .note(&state.open, &request.updates, self.now());
                    }
                    let _ = reply.send(Outcome {
                        result: Err(e),
                        commit: None,
                    });
                }
                Ok((slot, mut work)) => {
                    let result = self.update_tasks(state, &mut work, &caller, request).await;
                    self.finish(state, slot, work, result, reply);
                }
            },
            OrgMsg::ClaimNext {
                caller,
                request,
                reply,
            } => self.claim_or_wait(&myself, state, caller, request, reply),
            OrgMsg::WaitTasks {
                caller,
                request,
                reply,
            } => {
                self.wait_for_tasks(&myself, state, &caller, request, reply)
                    .await
            }
            OrgMsg::ListOpen {
                query,
                after,
                limit,
                reply,
            } => serve!(self, state, reply, read, |work| {
                Ok(state
                    .open
                    .list(after, limit, |h| query.matches(h, self.now())))
            }),
            OrgMsg::Admit { kind, reply } => {
                serve!(self, state, reply, Some(Admission::of(kind)), |work| Ok(()))
            }
            OrgMsg::CreateKey {
                caller,
                name,
                reply,
            } => serve!(self, state, reply, write, |work| {
                // A key revoked (a block) after this request authenticated
                // issues no successor.
                state
                    .require_live_key(&caller)
                    .and_then(|()| self.issue_key(state, &mut work, &caller.email, Some(name)))
            }),
            OrgMsg::RevokeKey {
                caller,
                key_id,
                reply,
            } => serve!(self, state, reply, write, |work| {
                self.revoke_key(state, &mut work, &caller.email, key_id)
            }),
            OrgMsg::ListTags { reply } => {
                serve!(self, state, reply, read, |work| Ok(self.list_tags(state)))
            }
            OrgMsg::CreateTags {
                caller,
                items,
                reply,
            } => serve!(self, state, reply, write, |work| {
                self.create_tags(state, &mut work, &caller, items)
            }),
            OrgMsg::UpdateTags {
                caller,
                patches,
                reply,
            } => serve!(self, state, reply, write, |work| {
                self.update_tags(state, &mut work, &caller, patches)
            }),
            OrgMsg::DeleteTags {
                caller,
                names,
                reply,
            } => serve!(self, state, reply, write, |work| {
                self.delete_tags(state, &mut work, &caller, names)
            }),
            OrgMsg::ListMembers { reply } => {
                serve!(
                    self,
                    state,
                    reply,
                    read,
                    |work| Ok(self.list_members(state))
                )
            }
            OrgMsg::GetMe { caller, reply } => serve!(self, state, reply, read, |work| {
                state.member_view(&caller.email)
            }),
            OrgMsg::PatchMember {
                caller,
                email,
                patch,
                reply,
            } => serve!(self, state, reply, write, |work| {
                self.patch_member(state, &mut work, &caller, &email, patch)
            }),
            OrgMsg::PatchMe {
                caller,
                profile_tags,
                reply,
            } => serve!(self, state, reply, write, |work| {
                self.patch_me(state, &mut work, &caller, profile_tags)
            }),
            OrgMsg::ListTeams { reply } => {
                serve!(self, state, reply, read, |work| Ok(self.list_teams(state)))
            }
            OrgMsg::GetTeam { team, reply } => {
                serve!(self, state, reply, read, |work| self.get_team(state, &team))
            }
            OrgMsg::CreateTeam {
                caller,
                team,
                reply,
            } => serve!(self, state, reply, write, |work| {
                self.create_team(state, &mut work, &caller, team)
            }),
            OrgMsg::PatchTeam {
                caller,
                team,
                patch,
                reply,
            } => serve!(self, state, reply, write, |work| {
                self.patch_team(state, &mut work, &caller, &team, patch)
            }),
            OrgMsg::DeleteTeam {
                caller,
                team,
                reply,
            } => serve!(self, state, reply, write, |work| {
                self.delete_team(state, &mut work, &caller, &team)
            }),
            OrgMsg::AddTeamMember {
                caller,
                team,
                email,
                reply,
            } => serve!(self, state, reply, write, |work| {
                self.add_team_member(state, &mut work, &caller, &team, &email)
            }),
            OrgMsg::RemoveTeamMember {
                caller,
                team,
                email,
                reply,
            } => serve!(self, state, reply, write, |work| {
                self.remove_team_member(state, &mut work, &caller, &team, &email)
            }),
            OrgMsg::GetQuota { reply } => {
                serve!(self, state, reply, read, |work| Ok(self.quota(state)))
            }
            OrgMsg::Webhook(msg) => self.serve_webhooks(state, msg),
            OrgMsg::Schedule(msg) => self.serve_schedules(state, msg),
            OrgMsg::ChargePlan { reply } => serve!(self, state, reply, write, |work| {
                self.charge_plan(state, &mut work)
            }),
            OrgMsg::AddMember { member, reply } => serve!(self, state, reply, None, |work| {
                self.add_member(state, &mut work, member)
            }),
            OrgMsg::IssueKey { email, name, reply } => {
                serve!(self, state, reply, None, |work| {
                    self.issue_key(state, &mut work, &email, name)
                })
            }
            OrgMsg::RevokeMemberKeys { email, reply } => {
                serve!(self, state, reply, None, |work| {
                    Ok(self.revoke_member_keys(state, &mut work, &email))
                })
            }
            OrgMsg::IdpSync { view, reply } => serve!(self, state, reply, None, |work| {
                self.idp_sync(state, &mut work, view)
            }),
            OrgMsg::ChangeSettings { change, reply } => {
                serve!(self, state, reply, None, |work| {
                    Ok(self.change_settings(state, &mut work, &change))
                })
            }
            OrgMsg::SweepBegins { reply } => self.sweep_begins(state, reply).await,
            OrgMsg::SweepRead { referrers, reply } => {
                if let Some(pins) = &mut state.sweep_pins {
                    pins.learn(&referrers);
                }
                let _ = reply.send(Outcome {
                    result: Ok(()),
                    commit: None,
                });
            }
            OrgMsg::SweepEnds { reply } => {
                state.sweep_pins = None;
                let _ = reply.send(Outcome {
                    result: Ok(()),
                    commit: None,
                });
            }
            OrgMsg::Prune {
                task_ids,
                cutoff,
                reply,
            } => self.prune(state, task_ids, cutoff, reply),
            OrgMsg::Delete { reply } => self.delete(&myself, state, reply).await,
            OrgMsg::TimeTick => self.time_passed(state).await?,
            OrgMsg::WaitElapsed => self.answer_elapsed_waiters(state),
            OrgMsg::ReleaseWaiters => self.release_waiters(state),
            OrgMsg::WaiterGone => self.drop_gone_waiters(state),
            OrgMsg::ClaimUndelivered { task, lease } => self.release(state, task, lease).await,
            OrgMsg::ContentRead(read) => state.content.refilled(read),
            OrgMsg::IdleTick => {
                if !state.retiring
                    && !state.needs_timer()
                    && state.waiters.is_empty()
                    && state.task_waits.is_empty()
                    && state.last_active.elapsed() >= self.deps.idle_after
                {
                    state.retiring = true;
                    tracing::info!(org_id = %state.org, "org actor idle; asking to stop");
                    (self.events)(OrgEvent::Idle {
                        org: state.org,
                        actor: myself.get_id(),
                    });
                }
            }
            #[cfg(feature = "test-hooks")]
            OrgMsg::Crash => panic!("org actor crash requested by a test hook"),
            #[cfg(feature = "test-hooks")]
            OrgMsg::ExpireLeases(reply) => {
                self.expire_leases(state).await?;
                let _ = reply.send(());
            }
        }
        if state.needs_reload {
            return Err(format!("org {} must reload its state from the store", state.org).into());
        }
        // Tasks whose `run_at` passed while the message was served.
        state.open.release_due(self.now());
        self.serve_waiters(state).await;
        self.release_settled_waits(state);
        self.arm_timer(&myself, state);
        self.publish(state);
        Ok(())
    }
}

impl OrgActor {
    fn now(&self) -> i64 {
        self.deps.clock.now_ms()
    }

    /// Publishes the org's open tasks, leases and waiting claims for the
    /// operator (skipped when none changed): true while the actor is
    /// stopped, since every change of the org passes through it.
    fn publish(&self, state: &OrgState) {
        self.deps.snapshots.publish(
            state.org,
            &state.open,
            (state.waiters.len(), state.task_waits.len()),
            state.needs_timer(),
        );
    }
}
