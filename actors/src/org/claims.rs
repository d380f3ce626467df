//! Claims and leases inside the org actor: a claim takes the next
//! claimable tasks in claim order with their kept content (and starts a
//! read ahead when the content cache runs low); a lease that runs out
//! returns its task to `pending`, or fails it on its last attempt.

use super::content::Refill;
use super::tasks::SYSTEM_AGENT;
use super::work::Work;
use super::{ClaimTicket, Claimed, OrgActor, OrgMsg, OrgState};
use crate::api::{ClaimRequest, Text};
use crate::domain::account::Caller;
use crate::domain::lease;
use crate::domain::TaskStatus;
use crate::error::EngineError;

impl OrgActor {
    fn claim_next(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        request: &ClaimRequest,
    ) -> Option<Claimed> {
        let allowed = state.effective_tags(&caller.email);
        let mut h = state
            .open
            .next_claimable(&request.tags, |h| {
                h.tags
                    .iter()
                    .all(|t| allowed.contains(t) || !state.is_strict(t))
            })?
            .clone();
        let now = self.now();
        h.assignee = Some(caller.key_name.clone());
        work.transition(
            state,
            &mut h,
            TaskStatus::InProgress,
            &caller.key_name,
            None,
            now,
        );
        let lease = lease::grant(now, request.lease_seconds);
        h.lease = Some(lease);
        let header = h.clone();
        work.put(state, h);
        let content = state.content.take(header.task_id);
        let ticket = ClaimTicket::new(state.myself.clone(), header.task_id, lease.lease_id);
        Some(Claimed {
            header,
            lease,
            content,
            ticket,
        })
    }

    /// Claims up to `request.limit()` tasks in this turn, each with its own
    /// lease, in claim order.
    pub(super) fn claim_up_to(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        request: &ClaimRequest,
    ) -> Vec<Claimed> {
        state.open.release_due(self.now());
        let mut claimed = Vec::with_capacity(request.limit());
        while claimed.len() < request.limit() {
            match self.claim_next(state, work, caller, request) {
                Some(c) => claimed.push(c),
                None => break,
            }
        }
        if let Some(refill) = state.content.refill_due(state.open.pending_ids()) {
            self.read_content(state, refill);
        }
        claimed
    }

    /// Reads the content of pending tasks for the content cache, off the
    /// claim path, once the writes queued so far are committed (see
    /// `content`), and hands it to this actor in claim order.
    fn read_content(&self, state: &OrgState, refill: Refill) {
        let (org, actor) = (state.org, state.myself.clone());
        let (writers, store) = (self.deps.writers.clone(), self.deps.store.clone());
        let Refill { wanted, permit } = refill;
        tokio::spawn(async move {
            let read = match writers.barrier(org).await {
                Ok(()) => store.tasks(org, &wanted).await,
                Err(e) => Err(e),
            };
            let read = read.unwrap_or_else(|e| {
                tracing::debug!(%org, error = %e, "reading ahead of claims failed");
                Vec::new()
            });
            // A stopped actor's cache went with it.
            let _ = actor.cast(OrgMsg::ContentRead(read));
            drop(permit);
        });
    }

    /// Returns every task whose lease ran out to `pending`, or fails it
    /// (and cascades to its dependents) when that was its last attempt. It
    /// waits for room in the writer's queue rather than drop an expiry.
    pub(super) async fn expire_leases(&self, state: &mut OrgState) -> Result<(), EngineError> {
        let now = self.now();
        if state.open.next_lease_deadline().is_none_or(|at| at > now) {
            return Ok(());
        }
        let slot = self.deps.writers.reserve_waiting(state.org).await?;
        let mut work = Work::default();
        let mut exhausted = Vec::new();
        for id in state.open.pop_expired_leases(now) {
            let Some(mut h) = state.open.get(id).cloned() else {
                continue;
            };
            let Some(expired) = h.lease.filter(|l| l.expires_at <= now) else {
                // Renewed since it was queued: index it again as it is.
                state.open.put(h);
                continue;
            };
            let counts = lease::expiry_counts(&expired, state.refused.take(id, &expired));
            let (to, note) = match lease::expire(h.attempts, h.max_attempts, counts) {
                lease::Expiry::Requeue { attempts } => {
                    h.attempts = attempts;
                    h.assignee = None;
                    let note = if counts {
                        "lease expired"
                    } else {
                        "lease expired while the org's write limit refused its renewals"
                    };
                    (TaskStatus::Pending, note)
                }
                lease::Expiry::Exhausted { attempts } => {
                    h.attempts = attempts;
                    exhausted.push(id);
                    (TaskStatus::Failed, "max attempts reached")
                }
            };
            work.transition(
                state,
                &mut h,
                to,
                SYSTEM_AGENT,
                Some(&Text::Plain(note.into())),
                now,
            );
            work.lease_expired();
            work.put(state, h);
        }
        for id in &exhausted {
            if let Err(e) = self
                .after_finish(state, &mut work, *id, TaskStatus::Failed, now)
                .await
            {
                // Memory has moved on; the store has not: start over from it.
                state.needs_reload = true;
                return Err(e);
            }
        }
        if !work.changed.is_empty() {
            tracing::info!(
                org_id = %state.org,
                count = work.changed.len(),
                failed = exhausted.len(),
                "leases expired"
            );
            // Nobody waits for this commit; a failure is logged by the writer
            // and restarts the actor from the store.
            drop(slot.submit(work.into_batch(state)));
        }
        Ok(())
    }
}
