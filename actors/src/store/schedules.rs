//! Schedules in the store: what an org's actor loads at start. Written only
//! by that actor (`WriteOp::UpsertSchedule`, `WriteOp::DeleteSchedule`,
//! among the account statements of a commit), a tick's `last_run_at` in
//! the same commit as the tick's task.

use super::{Result, Store, StoreError};
use crate::domain::schedule::{CronSpec, ScheduleRecord, Zone};
use crate::domain::OrgId;
use sqlx::FromRow;

#[derive(FromRow)]
struct ScheduleRow {
    schedule_id: String,
    name: String,
    cron: String,
    timezone: String,
    task: Vec<u8>,
    active: i64,
    next_run_at: Option<i64>,
    last_run_at: Option<i64>,
    last_error: Option<String>,
    created_by: String,
    created_by_key: Option<String>,
    created_at: i64,
}

impl TryFrom<ScheduleRow> for ScheduleRecord {
    type Error = StoreError;

    fn try_from(r: ScheduleRow) -> Result<Self> {
        let corrupt =
            |what: String| StoreError::Corrupt(format!("schedule {}: {what}", r.schedule_id));
        Ok(ScheduleRecord {
            schedule_id: r
                .schedule_id
                .parse()
                .map_err(|()| corrupt("its id is not a UUID".into()))?,
            cron: CronSpec::parse(&r.cron).map_err(corrupt)?,
            zone: Zone::parse(&r.timezone).map_err(corrupt)?,
            name: r.name,
            task: r.task,
            active: r.active != 0,
            next_run_at: r.next_run_at,
            last_run_at: r.last_run_at,
            last_error: r.last_error,
            created_by: r.created_by,
            created_by_key: r.created_by_key,
            created_at: r.created_at,
        })
    }
}

impl Store {
    /// The org's schedules, oldest first.
    pub async fn org_schedules(&self, org: OrgId) -> Result<Vec<ScheduleRecord>> {
        let rows: Vec<ScheduleRow> = self
            .org_rows(
                "SELECT schedule_id, name, cron, timezone, task, active, next_run_at, \
                 last_run_at, last_error, created_by, created_by_key, created_at FROM schedules \
                 WHERE org_id = $1 ORDER BY created_at, schedule_id",
                org,
            )
            .await?;
        super::records(rows)
    }
}
