//! The schedule routes (CONTRACT §9): the plan gate, then one message to
//! the org's actor, which owns the org's schedules and fires their ticks;
//! the answer's template is opened here, off the actor's turn.

use super::Engine;
use crate::api::{CreateSchedule, PatchSchedule, ScheduleList, ScheduleView, Timestamp, SCHEDULES};
use crate::crypto::OrgCipher;
use crate::domain::account::Caller;
use crate::domain::schedule::ScheduleRecord;
use crate::domain::ScheduleId;
use crate::error::EngineError;
use crate::org::{open_template, OrgMsg, Reply, ScheduleMsg};

pub(super) fn view(cipher: &OrgCipher, s: &ScheduleRecord) -> Result<ScheduleView, EngineError> {
    Ok(ScheduleView {
        schedule_id: s.schedule_id,
        name: s.name.clone(),
        cron: s.cron.text().to_owned(),
        timezone: s.zone.name().to_owned(),
        task: open_template(cipher, s)?,
        active: s.active,
        next_run_at: s.next_run_at.filter(|_| s.active).map(Timestamp),
        last_run_at: s.last_run_at.map(Timestamp),
        last_error: s.last_error.clone(),
        created_by: s.created_by.clone(),
        created_at: Timestamp(s.created_at),
    })
}

/// A schedule id from a path: one that does not parse names no schedule.
fn schedule_id(text: &str) -> Result<ScheduleId, EngineError> {
    text.parse()
        .map_err(|_| EngineError::NotFound("schedule not found".into()))
}

impl Engine {
    async fn schedule_request<T: Send + 'static>(
        &self,
        caller: &Caller,
        message: impl Fn(Reply<T>) -> ScheduleMsg,
    ) -> Result<T, EngineError> {
        self.require_paid_plan(caller, SCHEDULES).await?;
        self.request(caller.org_id, |reply| OrgMsg::Schedule(message(reply)))
            .await
    }

    async fn schedule_view(
        &self,
        caller: &Caller,
        s: &ScheduleRecord,
    ) -> Result<ScheduleView, EngineError> {
        let entry = self.inner.directory.get(caller.org_id).await?;
        view(&entry.cipher, s)
    }

    pub async fn list_schedules(&self, caller: &Caller) -> Result<ScheduleList, EngineError> {
        let schedules = self
            .schedule_request(caller, |reply| ScheduleMsg::List {
                caller: caller.clone(),
                reply,
            })
            .await?;
        let entry = self.inner.directory.get(caller.org_id).await?;
        Ok(ScheduleList {
            schedules: schedules
                .iter()
                .map(|s| view(&entry.cipher, s))
                .collect::<Result<_, _>>()?,
        })
    }

    pub async fn get_schedule(
        &self,
        caller: &Caller,
        schedule: &str,
    ) -> Result<ScheduleView, EngineError> {
        let schedule = schedule_id(schedule)?;
        let s = self
            .schedule_request(caller, |reply| ScheduleMsg::Get {
                caller: caller.clone(),
                schedule,
                reply,
            })
            .await?;
        self.schedule_view(caller, &s).await
    }

    pub async fn create_schedule(
        &self,
        caller: &Caller,
        request: CreateSchedule,
    ) -> Result<ScheduleView, EngineError> {
        let s = self
            .schedule_request(caller, |reply| ScheduleMsg::Create {
                caller: caller.clone(),
                request: request.clone(),
                reply,
            })
            .await?;
        self.schedule_view(caller, &s).await
    }

    pub async fn update_schedule(
        &self,
        caller: &Caller,
        schedule: &str,
        patch: PatchSchedule,
    ) -> Result<ScheduleView, EngineError> {
        let schedule = schedule_id(schedule)?;
        let s = self
            .schedule_request(caller, |reply| ScheduleMsg::Patch {
                caller: caller.clone(),
                schedule,
                patch: patch.clone(),
                reply,
            })
            .await?;
        self.schedule_view(caller, &s).await
    }

    pub async fn delete_schedule(
        &self,
        caller: &Caller,
        schedule: &str,
    ) -> Result<(), EngineError> {
        let schedule = schedule_id(schedule)?;
        self.schedule_request(caller, |reply| ScheduleMsg::Delete {
            caller: caller.clone(),
            schedule,
            reply,
        })
        .await
    }
}
