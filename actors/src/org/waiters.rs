//! Long-poll claims: a claim with `wait_seconds` that finds nothing waits
//! here, in the actor, until a matching task becomes pending or its time
//! runs out.
//!
//! Waiters are served first come, first served among those whose filter
//! matches: after every message that put a task into the pending queue, the
//! actor walks them in arrival order and claims for each in turn. Nothing
//! polls and nothing sleeps; a timer per waiter answers `null` at its
//! deadline.
//!
//! A waiter whose client went away has a closed reply port: it leaves
//! without claiming, when the engine says its caller is gone
//! (`ClaimantGone`) or the next time the actor looks. A claim whose answer
//! never reaches its claimant is undone by its ticket (`ClaimUndelivered`),
//! the task back to `pending`, so no task waits on a lease nobody holds.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ractor::ActorRef;

use super::tasks::SYSTEM_AGENT;
use super::work::Work;
use super::{Admission, Claimed, OrgActor, OrgMsg, OrgState, Outcome, Reply};
use crate::api::{ClaimRequest, Text};
use crate::domain::account::Caller;
use crate::domain::{TaskId, TaskStatus};
use crate::writer::Commit;

/// A claim waiting for a task.
pub(super) struct Waiter {
    caller: Caller,
    request: ClaimRequest,
    reply: Reply<Vec<Claimed>>,
    deadline: Instant,
    /// The commit of the claim's own usage, answered when nothing came.
    usage: Option<Commit>,
}

#[derive(Default)]
pub(super) struct Waiters {
    queue: VecDeque<Waiter>,
    /// The pending queue's version when the waiters last looked at it.
    seen_version: u64,
}

impl Waiters {
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Drops the waiters whose caller went away.
    pub fn drop_gone(&mut self) {
        self.queue.retain(|w| !w.reply.is_closed());
    }

    /// Queues a waiter behind the others, after dropping those whose
    /// caller went away.
    fn push(&mut self, waiter: Waiter) {
        self.drop_gone();
        self.queue.push_back(waiter);
    }

    /// Takes the waiters whose time ran out at `now` or whose caller went
    /// away; the others keep their order.
    fn take_due(&mut self, now: Instant) -> VecDeque<Waiter> {
        let (due, waiting) = self
            .queue
            .drain(..)
            .partition(|w| w.deadline <= now || w.reply.is_closed());
        self.queue = waiting;
        due
    }
}

impl Waiter {
    /// Answers `null`: nothing came in time, or the actor is stopping.
    fn answer_null(self) {
        let _ = self.reply.send(Outcome {
            result: Ok(Vec::new()),
            commit: self.usage,
        });
    }
}

impl OrgActor {
    /// A claim: served at once when a task matches, else (with
    /// `wait_seconds`) queued as a waiter.
    pub(super) fn claim_or_wait(
        &self,
        myself: &ActorRef<OrgMsg>,
        state: &mut OrgState,
        caller: Caller,
        request: ClaimRequest,
        reply: Reply<Vec<Claimed>>,
    ) {
        if reply.is_closed() {
            return;
        }
        let (slot, mut work) = match self.begin(state, Some(Admission::write())) {
            Ok(begun) => begun,
            Err(e) => {
                let _ = reply.send(Outcome {
                    result: Err(e),
                    commit: None,
                });
                return;
            }
        };
        let claimed = self.claim_up_to(state, &mut work, &caller, &request);
        let draining = self
            .deps
            .draining
            .load(std::sync::atomic::Ordering::Relaxed);
        if !claimed.is_empty() || request.wait_seconds == 0 || draining {
            self.finish(state, slot, work, Ok(claimed), reply);
            return;
        }
        let usage = (!work.is_empty()).then(|| slot.submit(work.into_batch(state)));
        let wait = Duration::from_secs(u64::from(request.wait_seconds));
        state.waiters.push(Waiter {
            caller,
            request,
            reply,
            deadline: Instant::now() + wait,
            usage,
        });
        state.waiters.seen_version = state.open.pending_version();
        myself.send_after(wait, || OrgMsg::WaitElapsed);
    }

    /// Claims for waiters, in arrival order, while tasks are pending and
    /// something entered the queue since they last looked.
    pub(super) async fn serve_waiters(&self, state: &mut OrgState) {
        let version = state.open.pending_version();
        if state.waiters.is_empty() || version == state.waiters.seen_version {
            return;
        }
        state.waiters.seen_version = version;
        let mut i = 0;
        while i < state.waiters.queue.len() && state.open.pending_len() > 0 {
            if state.waiters.queue[i].reply.is_closed() {
                state.waiters.queue.remove(i);
                continue;
            }
            // Taken before anything changes; a full queue leaves the waiters
            // for the next look.
            let Ok(slot) = self.deps.writers.reserve(state.org) else {
                state.waiters.seen_version = 0;
                return;
            };
            let mut work = Work::default();
            let w = &state.waiters.queue[i];
            let (caller, request) = (w.caller.clone(), w.request.clone());
            let claimed = self.claim_up_to(state, &mut work, &caller, &request);
            if claimed.is_empty() {
                i += 1;
                continue;
            }
            let waiter = state.waiters.queue.remove(i).expect("the waiter looked at");
            let commit = slot.submit(work.into_batch(state));
            let answer = Outcome {
                result: Ok(claimed),
                commit: Some(commit),
            };
            // Unanswered, the claim's tickets undo it.
            let _ = waiter.reply.send(answer);
        }
    }

    /// Undoes a claim nobody received: the task goes back to `pending`,
    /// unless its lease is no longer the one claimed.
    pub(super) async fn release(&self, state: &mut OrgState, id: TaskId, lease: uuid::Uuid) {
        let Some(mut h) = state.open.get(id).cloned() else {
            return;
        };
        if h.lease.map(|l| l.lease_id) != Some(lease) {
            return;
        }
        let Ok(slot) = self.deps.writers.reserve_waiting(state.org).await else {
            // The writer is gone: the engine is stopping and the lease
            // expires after the restart.
            return;
        };
        let mut work = Work::default();
        h.assignee = None;
        work.transition(
            state,
            &mut h,
            TaskStatus::Pending,
            SYSTEM_AGENT,
            Some(&Text::Plain("claimant went away".into())),
            self.now(),
        );
        work.put(state, h);
        tracing::info!(org_id = %state.org, task_id = %id, "claimant went away; task back to pending");
        drop(slot.submit(work.into_batch(state)));
    }

    /// Answers `null` to the waiters whose time ran out, and drops those
    /// whose client went away.
    pub(super) fn answer_elapsed_waiters(&self, state: &mut OrgState) {
        for w in state.waiters.take_due(Instant::now()) {
            w.answer_null();
        }
    }

    /// Answers `null` to every waiter: the actor or the server is stopping.
    pub(super) fn release_waiters(&self, state: &mut OrgState) {
        for w in state.waiters.queue.drain(..) {
            w.answer_null();
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::oneshot;

    use super::*;
    use crate::domain::account::Role;
    use crate::domain::{KeyId, OrgId};

    type Answer = oneshot::Receiver<Outcome<Vec<Claimed>>>;

    fn waiter(name: &str, deadline: Instant) -> (Waiter, Answer) {
        let (tx, rx) = oneshot::channel();
        let caller = Caller {
            org_id: OrgId::new_v7(),
            key_id: KeyId::new_v7(),
            key_name: name.to_owned(),
            email: format!("{name}@example.com"),
            role: Role::User,
        };
        let waiter = Waiter {
            caller,
            request: ClaimRequest::default(),
            reply: tx.into(),
            deadline,
            usage: None,
        };
        (waiter, rx)
    }

    fn names(waiters: &Waiters) -> Vec<&str> {
        waiters
            .queue
            .iter()
            .map(|w| w.caller.key_name.as_str())
            .collect()
    }

    fn answered_null(answer: &mut Answer) -> bool {
        matches!(answer.try_recv(), Ok(Outcome { result: Ok(tasks), .. }) if tasks.is_empty())
    }

    #[test]
    fn waiters_keep_arrival_order_and_the_gone_leave() {
        let later = Instant::now() + Duration::from_secs(30);
        let mut waiters = Waiters::default();
        let (a, _a) = waiter("a", later);
        let (b, b_answer) = waiter("b", later);
        let (c, _c) = waiter("c", later);
        waiters.push(a);
        waiters.push(b);
        drop(b_answer);
        waiters.push(c);
        // The gone one left when the next waiter came.
        assert_eq!(names(&waiters), ["a", "c"]);
        let (d, _d) = waiter("d", later);
        waiters.push(d);
        assert_eq!(names(&waiters), ["a", "c", "d"]);
        assert_eq!(waiters.len(), 3);
    }

    #[test]
    fn a_waiter_past_its_deadline_is_answered_null_and_the_rest_wait_in_order() {
        let now = Instant::now();
        let mut waiters = Waiters::default();
        let (a, mut a_answer) = waiter("a", now + Duration::from_secs(5));
        let (b, mut b_answer) = waiter("b", now + Duration::from_secs(1));
        let (c, mut c_answer) = waiter("c", now + Duration::from_secs(9));
        let (d, d_answer) = waiter("d", now + Duration::from_secs(9));
        for w in [a, b, c, d] {
            waiters.queue.push_back(w);
        }
        drop(d_answer);

        let due = waiters.take_due(now + Duration::from_secs(2));
        let due_names: Vec<&str> = due.iter().map(|w| w.caller.key_name.as_str()).collect();
        assert_eq!(due_names, ["b", "d"]);
        due.into_iter().for_each(Waiter::answer_null);
        assert!(answered_null(&mut b_answer));
        assert_eq!(names(&waiters), ["a", "c"]);
        assert!(a_answer.try_recv().is_err(), "a still waits");

        for w in waiters.take_due(now + Duration::from_secs(9)) {
            w.answer_null();
        }
        assert!(waiters.is_empty());
        assert!(answered_null(&mut a_answer));
        assert!(answered_null(&mut c_answer));
    }
}
