//! The retention sweep's removals. A removal is a write like any other:
//! the actor goes on with its next turn while the removal commits, and
//! the sweep waits for the commit. A turn that reads a task from the store
//! (to reopen it, or to name it as a parent or blocker) reads after the
//! org's queued writes have committed (`load`), so it never finds a task
//! whose removal is on its way; the claims in between are not held up.
//!
//! The sweep reads which tasks name others once, before its pages; a task
//! written after that read may name an eligible one. While the sweep runs,
//! every task written passes its parent and blockers to `SweepPins`
//! (`Work::into_batch`), and a page never removes a pinned task.

use super::{OrgActor, OrgState, Outcome, Reply};
use crate::domain::retention::SweepPins;
use crate::domain::TaskId;
use crate::store::WriteOp;

impl OrgActor {
    pub(super) fn prune(
        &self,
        state: &mut OrgState,
        task_ids: Vec<TaskId>,
        cutoff: i64,
        reply: Reply<usize>,
    ) {
        let Some(pins) = &state.sweep_pins else {
            // This actor started after the sweep began: it does not know
            // what was named since. The next sweep removes them.
            let _ = reply.send(Outcome {
                result: Ok(0),
                commit: None,
            });
            return;
        };
        // An open task is never removed, whatever the sweep read, nor one a
        // task written since it read names.
        let task_ids: Vec<TaskId> = task_ids
            .into_iter()
            .filter(|id| !state.open.contains(*id) && !pins.is_pinned(*id))
            .collect();
        let count = task_ids.len();
        let outcome = match self.begin(state, None) {
            Err(e) => Outcome {
                result: Err(e),
                commit: None,
            },
            Ok((slot, mut work)) => {
                work.accounts.push(WriteOp::PruneTasks { task_ids, cutoff });
                Outcome {
                    result: Ok(count),
                    commit: Some(slot.submit(work.into_batch(state))),
                }
            }
        };
        let _ = reply.send(outcome);
    }
}

impl OrgActor {
    pub(super) async fn sweep_begins(&self, state: &mut OrgState, reply: Reply<()>) {
        state.sweep_pins = Some(SweepPins::default());
        let result = self.deps.writers.barrier(state.org).await;
        let _ = reply.send(Outcome {
            result: result.map_err(Into::into),
            commit: None,
        });
    }
}
