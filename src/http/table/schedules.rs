//! Recurring work: an org's schedules (paid plans).

use taskq_actors::api::*;
use taskq_actors::Caller;

use super::super::operation::Operation;
use super::super::AppState;

type S = AppState;
type C = Caller;
const SCHEDULE: Option<&str> = Some(SCHEDULES);

pub(super) fn operations() -> Vec<Operation> {
    vec![
        // ---- schedules
        Operation::get("/schedules")
            .doc("list_schedules", "schedules", "The org's schedules (paid plans)")
            .tool("List the org's schedules: name, cron pattern and time zone, the task each tick creates, whether active, the next and last run and the last error (admins and owners, paid plans).")
            .read_only()
            .reads(SCHEDULE)
            .answer::<ScheduleList>(200, "Every schedule")
            .member(|s: S, c: C, (): (), _: NoArguments| async move { s.engine.list_schedules(&c).await }),
        Operation::post("/schedules")
            .doc("create_schedule", "schedules", "Create a recurring task on a cron schedule")
            .tool("Create a schedule: at each tick of a five-field cron pattern (minute hour day-of-month month day-of-week) in an IANA time zone (default UTC), one task is created from `task` (a create_tasks item without task_id, ref or blocked_by). Ticks missed while the server was down make one task. Admins and owners, paid plans.")
            .writes(SCHEDULE)
            .body()
            .answer::<ScheduleView>(201, "The schedule and its next run")
            .errors(&[409])
            .member(|s: S, c: C, (): (), r: CreateSchedule| async move { s.engine.create_schedule(&c, r).await }),
        Operation::get("/schedules/{schedule_id}")
            .doc("get_schedule", "schedules", "One schedule")
            .tool("One schedule by id, with its next and last run and the last error (admins and owners, paid plans).")
            .read_only()
            .reads(SCHEDULE)
            .answer::<ScheduleView>(200, "The schedule")
            .member(|s: S, c: C, id: String, _: NoArguments| async move { s.engine.get_schedule(&c, &id).await }),
        Operation::patch("/schedules/{schedule_id}")
            .doc("update_schedule", "schedules", "Change a schedule's pattern, zone, task or whether it is active")
            .tool("Change any of a schedule's cron, timezone, task and active; a schedule resumed goes on from now, without the ticks it missed while paused (admins and owners, paid plans).")
            .writes(SCHEDULE)
            .body()
            .answer::<ScheduleView>(200, "The schedule as it now is")
            .member(|s: S, c: C, id: String, r: PatchSchedule| async move { s.engine.update_schedule(&c, &id, r).await }),
        Operation::delete("/schedules/{schedule_id}")
            .doc("delete_schedule", "schedules", "Remove a schedule (the tasks it made stay)")
            .tool("Remove a schedule; the tasks it already created stay (admins and owners, paid plans).")
            .writes(SCHEDULE)
            .empty(204, "The schedule is gone")
            .member(|s: S, c: C, id: String, _: NoArguments| async move { s.engine.delete_schedule(&c, &id).await }),
    ]
}
