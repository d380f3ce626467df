//! Time inside the org actor: one timer for the earliest moment something
//! becomes due (a lease's expiry, a waiting task's `run_at`, a schedule's
//! next tick), never one per item and never a poll of the store. When it
//! fires the actor expires the leases that are due, releases the waiting
//! tasks that are due into the pending queue, where a waiting claim gets
//! them at once, and fires the schedules whose tick came. What becomes due
//! later gets its moment here, beside the others.

use std::time::Duration;

use ractor::ActorRef;

use super::{OrgActor, OrgMsg, OrgState};
use crate::error::EngineError;

impl OrgState {
    /// Whether something of the org must happen at a time even if nobody
    /// asks: a lease to expire, a waiting task to release. Such an actor is
    /// not stopped when idle, and is started again when its server starts.
    pub(super) fn needs_timer(&self) -> bool {
        self.open.has_leases() || self.open.waiting_len() > 0 || self.has_active_schedules()
    }
}

impl OrgActor {
    /// What the timer does when it fires: leases due by now expire, waiting
    /// tasks due by now are claimable, and the schedules whose tick came
    /// fire.
    pub(super) async fn time_passed(&self, state: &mut OrgState) -> Result<(), EngineError> {
        state.timer_at = None;
        self.expire_leases(state).await?;
        state.open.release_due(self.now());
        self.fire_schedules(state).await
    }

    /// Arms the timer for the earliest due moment, unless one that fires no
    /// later is armed already.
    pub(super) fn arm_timer(&self, myself: &ActorRef<OrgMsg>, state: &mut OrgState) {
        let due = [
            state.open.next_lease_deadline(),
            state.open.next_run_at(),
            state.next_tick(),
        ];
        let Some(next) = due.into_iter().flatten().min() else {
            return;
        };
        if state.timer_at.is_some_and(|at| at <= next) {
            return;
        }
        let wait_ms = (next - self.now()).max(0) as u64 + 1;
        myself.send_after(Duration::from_millis(wait_ms), || OrgMsg::TimeTick);
        state.timer_at = Some(next);
    }
}
