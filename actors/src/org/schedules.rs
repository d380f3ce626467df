//! Schedules inside the org actor: it holds the org's schedules (their
//! templates sealed), is the one writer of their rows, and fires their
//! ticks from its one timer (`time`).
//!
//! Exactly once per tick rests on two things. A tick's task is committed in
//! the same batch as the schedule's new `last_run_at` and `next_run_at`, so
//! a restarted or new owner (a takeover) never fires it again; and only
//! the org's owner commits its batches (the fence). Beneath both, the
//! task's id is derived from the schedule and the tick
//! (`schedule::tick_task_id`), so a tick fired twice in any way names one
//! task: an open one is seen here, a finished one is refused by the store
//! as an existing id, and neither makes a second task.

use super::work::Work;
use super::{OrgActor, OrgState, ScheduleMsg};
use crate::api::{
    read_template, read_timing, CreateSchedule, CreateTasks, ItemPath, PatchSchedule,
};
use crate::domain::account::{Caller, LimitKey, Principal};
use crate::domain::schedule::{tick_task_id, ScheduleRecord};
use crate::domain::{ScheduleId, Scheduled};
use crate::error::{EngineError, LimitKind};
use crate::store::WriteOp;
use serde_json::Value;

/// The field a schedule's sealed template is bound to.
const TEMPLATE_FIELD: &str = "schedule_task";

fn not_found() -> EngineError {
    EngineError::NotFound("schedule not found".into())
}

impl OrgState {
    /// Whether any schedule is active: its ticks need the actor running.
    pub(super) fn has_active_schedules(&self) -> bool {
        self.schedules.values().any(|s| s.active)
    }

    /// The earliest next tick of the active schedules.
    pub(super) fn next_tick(&self) -> Option<i64> {
        self.schedules
            .values()
            .filter(|s| s.active)
            .filter_map(|s| s.next_run_at)
            .min()
    }

    fn schedule(&self, id: ScheduleId) -> Result<&ScheduleRecord, EngineError> {
        self.schedules.get(&id).ok_or_else(not_found)
    }

    /// Seals a template's JSON, bound to the schedule.
    fn seal_template(&self, id: ScheduleId, template: &Value) -> Vec<u8> {
        let bytes = serde_json::to_vec(template).expect("JSON values serialize");
        self.entry.cipher.seal(id, TEMPLATE_FIELD, &bytes)
    }

    /// A managed org refuses client envelopes in a template, as in a create.
    fn check_template_content(&self, template: &Value) -> Result<(), EngineError> {
        let item = read_template(template)?;
        Ok(item.check_content(self.content_policy(), ItemPath::Template)?)
    }
}

/// A schedule's template, opened.
pub fn open_template(
    cipher: &crate::crypto::OrgCipher,
    s: &ScheduleRecord,
) -> Result<Value, EngineError> {
    let bytes = cipher
        .open(s.schedule_id, TEMPLATE_FIELD, &s.task)
        .map_err(|_| {
            EngineError::Internal(format!(
                "schedule {}: its template does not open",
                s.schedule_id
            ))
        })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| EngineError::Internal(format!("schedule {}: {e}", s.schedule_id)))
}

impl OrgActor {
    pub(super) fn serve_schedules(&self, state: &mut OrgState, msg: ScheduleMsg) {
        use super::Admission;
        let (read, write) = (Some(Admission::read()), Some(Admission::write()));
        match msg {
            ScheduleMsg::List { caller, reply } => self.serve_now(state, reply, read, |s, _| {
                s.require_admin(&caller)?;
                Ok(s.schedules.values().cloned().collect())
            }),
            ScheduleMsg::Get {
                caller,
                schedule,
                reply,
            } => self.serve_now(state, reply, read, |s, _| {
                s.require_admin(&caller)?;
                s.schedule(schedule).cloned()
            }),
            ScheduleMsg::Create {
                caller,
                request,
                reply,
            } => self.serve_now(state, reply, write, |s, w| {
                self.create_schedule(s, w, &caller, request)
            }),
            ScheduleMsg::Patch {
                caller,
                schedule,
                patch,
                reply,
            } => self.serve_now(state, reply, write, |s, w| {
                self.patch_schedule(s, w, &caller, schedule, patch)
            }),
            ScheduleMsg::Delete {
                caller,
                schedule,
                reply,
            } => self.serve_now(state, reply, write, |s, w| {
                s.require_admin(&caller)?;
                s.schedule(schedule)?;
                s.schedules.remove(&schedule);
                w.accounts.push(WriteOp::DeleteSchedule(schedule));
                Ok(())
            }),
        }
    }

    fn create_schedule(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        request: CreateSchedule,
    ) -> Result<ScheduleRecord, EngineError> {
        state.require_admin(caller)?;
        state.check_count(
            LimitKey::Schedules,
            LimitKind::Schedules,
            state.schedules.len() + 1,
        )?;
        if state.schedules.values().any(|s| s.name == request.name) {
            return Err(EngineError::Conflict("schedule name already exists".into()));
        }
        state.check_template_content(&request.task)?;
        let (cron, zone) = read_timing(&request.cron, &request.timezone)?;
        let id = ScheduleId::new_v7();
        let mut record = ScheduleRecord {
            schedule_id: id,
            name: request.name,
            cron,
            zone,
            task: state.seal_template(id, &request.task),
            active: request.active,
            next_run_at: None,
            last_run_at: None,
            last_error: None,
            created_by: caller.email.clone(),
            created_by_key: Some(caller.key_name.clone()),
            created_at: self.now(),
        };
        record.rearm(record.created_at);
        work.accounts
            .push(WriteOp::UpsertSchedule(Box::new(record.clone())));
        state.schedules.insert(id, record.clone());
        Ok(record)
    }

    fn patch_schedule(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        id: ScheduleId,
        patch: PatchSchedule,
    ) -> Result<ScheduleRecord, EngineError> {
        state.require_admin(caller)?;
        let mut record = state.schedule(id)?.clone();
        if let Some(template) = &patch.task {
            state.check_template_content(template)?;
            record.task = state.seal_template(id, template);
        }
        let retimed = patch.cron.is_some() || patch.timezone.is_some();
        let cron = patch
            .cron
            .as_deref()
            .unwrap_or(record.cron.text())
            .to_owned();
        let zone = patch
            .timezone
            .as_deref()
            .unwrap_or(record.zone.name())
            .to_owned();
        (record.cron, record.zone) = read_timing(&cron, &zone)?;
        let resumed = patch.active == Some(true) && !record.active;
        if let Some(active) = patch.active {
            record.active = active;
        }
        if retimed || resumed || !record.active {
            // A schedule resumed does not fire the ticks it missed while
            // paused: it goes on from now.
            record.rearm(self.now());
        }
        work.accounts
            .push(WriteOp::UpsertSchedule(Box::new(record.clone())));
        state.schedules.insert(id, record.clone());
        Ok(record)
    }

    /// Fires every schedule whose tick is due: its task, and its new
    /// standing, in one batch each. A tick whose task cannot be created
    /// (a tag no longer in the vocabulary, the quota spent, its creator
    /// gone) is skipped: the schedule records why and moves on.
    pub(super) async fn fire_schedules(&self, state: &mut OrgState) -> Result<(), EngineError> {
        let now = self.now();
        let due: Vec<(ScheduleId, i64)> = state
            .schedules
            .values()
            .filter_map(|s| s.due_tick(now).map(|tick| (s.schedule_id, tick)))
            .collect();
        for (id, tick) in due {
            let slot = self.deps.writers.reserve_waiting(state.org).await?;
            let mut work = Work::default();
            let error = match self.create_tick_task(state, &mut work, id, tick).await {
                Ok(()) => None,
                Err(e) => {
                    work.discard_changes();
                    let why = e.body().error;
                    tracing::warn!(org_id = %state.org, caller = %Principal::Schedule(id), tick,
                        error = %why, "a schedule's tick made no task");
                    Some(why)
                }
            };
            let Some(record) = state.schedules.get_mut(&id) else {
                continue;
            };
            record.fired(tick, now, error);
            work.accounts
                .push(WriteOp::UpsertSchedule(Box::new(record.clone())));
            // The batch commits in order with everything else of the org;
            // nobody waits for it.
            drop(slot.submit(work.into_batch(state)));
        }
        Ok(())
    }

    /// The task of one tick, created as its schedule's creator would
    /// create it, with the tick's derived id.
    async fn create_tick_task(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        id: ScheduleId,
        tick: i64,
    ) -> Result<(), EngineError> {
        let schedule = state.schedule(id)?;
        let template = open_template(&state.entry.cipher, schedule)?;
        let mut item = read_template(&template)?;
        let task_id = tick_task_id(id, tick);
        if state.open.contains(task_id) {
            return Ok(());
        }
        item.task_id = Some(task_id);
        let creator = state.members.get(&schedule.created_by).ok_or_else(|| {
            EngineError::Conflict("the schedule's creator is no longer a member".into())
        })?;
        let caller = Caller {
            org_id: state.org,
            principal: Principal::Schedule(id),
            key_name: schedule
                .created_by_key
                .clone()
                .unwrap_or_else(|| creator.email.clone()),
            email: creator.email.clone(),
            role: creator.role,
        };
        let request = CreateTasks { tasks: vec![item] };
        let origin = Some(Scheduled {
            schedule_id: id,
            scheduled_for: tick,
        });
        match self
            .create_tasks(state, work, &caller, request, origin)
            .await
        {
            // Fired before: that task is the tick's.
            Ok(_) | Err(EngineError::TaskIdExists(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
