//! The org's deletion, as its actor carries it out: the shredding commit
//! (its data key, keys, schedules, webhooks and sessions), then no more
//! turns. The actor asks to stop; a message that reaches it meanwhile is
//! dropped unanswered, and its sender, looking for a successor, finds no
//! org. Waiting claims are answered now, as at a shutdown.

use ractor::ActorRef;

use super::{OrgActor, OrgEvent, OrgMsg, OrgState, Outcome, Reply};
use crate::store::{StoreError, WriteOp};

impl OrgActor {
    pub(super) async fn delete(
        &self,
        myself: &ActorRef<OrgMsg>,
        state: &mut OrgState,
        reply: Reply<()>,
    ) {
        let result = match self.begin(state, None) {
            Err(e) => Err(e),
            Ok((slot, mut work)) => {
                work.accounts.push(WriteOp::ShredOrg { at: self.now() });
                match slot.submit(work.into_batch(state)).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(e.into()),
                    Err(_) => Err(StoreError::WriterGone.into()),
                }
            }
        };
        if result.is_ok() {
            self.release_waiters(state);
            state.deleted = true;
            state.retiring = true;
            (self.events)(OrgEvent::Idle {
                org: state.org,
                actor: myself.get_id(),
            });
        }
        let _ = reply.send(Outcome {
            result,
            commit: None,
        });
    }
}
