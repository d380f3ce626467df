//! The retention sweep's removals. The actor waits for each removal's
//! commit before its next turn: a turn that reads a task from the store
//! (to reopen it, or to name it as a parent or blocker) then never finds
//! one whose removal is still on its way to the store.

use super::{OrgActor, OrgState, Outcome, Reply};
use crate::domain::TaskId;
use crate::store::{StoreError, WriteOp};

impl OrgActor {
    pub(super) async fn prune(
        &self,
        state: &mut OrgState,
        task_ids: Vec<TaskId>,
        cutoff: i64,
        reply: Reply<usize>,
    ) {
        // An open task is never removed, whatever the sweep read.
        let task_ids: Vec<TaskId> = task_ids
            .into_iter()
            .filter(|id| !state.open.contains(*id))
            .collect();
        let count = task_ids.len();
        let result = match self.begin(state, None) {
            Err(e) => Err(e),
            Ok((slot, mut work)) => {
                work.accounts.push(WriteOp::PruneTasks { task_ids, cutoff });
                match slot.submit(work.into_batch(state)).await {
                    Ok(Ok(())) => Ok(count),
                    Ok(Err(e)) => Err(e.into()),
                    Err(_) => Err(StoreError::WriterGone.into()),
                }
            }
        };
        let _ = reply.send(Outcome {
            result,
            commit: None,
        });
    }
}
