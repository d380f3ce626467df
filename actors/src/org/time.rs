//! Time inside the org actor: one timer for the earliest moment something
//! becomes due (a waiting task's `run_at`, a schedule's next tick), never
//! one per item and never a poll of the store. When it fires the actor
//! releases the waiting tasks that are due into the pending queue, where
//! a waiting claim gets them at once, and fires the schedules whose tick
//! came.

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
    /// What the time timer does: waiting tasks due by now are claimable,
    /// and the schedules whose tick came fire.
    pub(super) async fn time_passed(&self, state: &mut OrgState) -> Result<(), EngineError> {
        state.time_timer_at = None;
        state.open.release_due(self.now());
        self.fire_schedules(state).await
    }

    /// The earliest moment the time timer must fire.
    fn next_due(&self, state: &OrgState) -> Option<i64> {
        match (state.open.next_run_at(), state.next_tick()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Arms the time timer for the earliest due moment, unless one that
    /// fires no later is armed already.
    pub(super) fn arm_time_timer(&self, myself: &ActorRef<OrgMsg>, state: &mut OrgState) {
        let Some(next) = self.next_due(state) else {
            return;
        };
        if state.time_timer_at.is_some_and(|at| at <= next) {
            return;
        }
        let wait_ms = (next - self.now()).max(0) as u64 + 1;
        myself.send_after(Duration::from_millis(wait_ms), || OrgMsg::TimeTick);
        state.time_timer_at = Some(next);
    }

    /// Arms the single lease timer for the earliest expiry, unless one that
    /// fires no later is already armed.
    pub(super) fn arm_lease_timer(&self, myself: &ActorRef<OrgMsg>, state: &mut OrgState) {
        let Some(next) = state.open.next_lease_deadline() else {
            return;
        };
        if state.lease_timer_at.is_some_and(|at| at <= next) {
            return;
        }
        let wait_ms = (next - self.now()).max(0) as u64 + 1;
        myself.send_after(Duration::from_millis(wait_ms), || OrgMsg::LeaseTick);
        state.lease_timer_at = Some(next);
    }
}
