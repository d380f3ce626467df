//! One turn of the actor for a replying message: a writer slot taken, the
//! request admitted against the org's limits, the change applied, and the
//! rows submitted with the answer. Nothing is applied when the slot or the
//! admission is refused, so an overloaded writer or a spent limit leaves no
//! trace.

use crate::domain::usage::RequestKind;
use crate::error::EngineError;
use crate::writer::WriteSlot;

use super::work::Work;
use super::{OrgActor, OrgState, Outcome, Reply};

/// How a member's request counts against the org's limits.
#[derive(Debug, Clone, Copy)]
pub struct Admission {
    pub kind: RequestKind,
    /// Against the monthly request allowance (a batch create counts its items).
    pub requests: i64,
    /// Tasks it will create, against the monthly task quota.
    pub tasks: i64,
}

impl Admission {
    pub fn read() -> Self {
        Self {
            kind: RequestKind::Read,
            requests: 1,
            tasks: 0,
        }
    }

    pub fn write() -> Self {
        Self {
            kind: RequestKind::Write,
            requests: 1,
            tasks: 0,
        }
    }

    pub fn of(kind: RequestKind) -> Self {
        match kind {
            RequestKind::Read => Self::read(),
            RequestKind::Write => Self::write(),
        }
    }

    /// A create of `tasks` tasks.
    pub fn create(tasks: usize) -> Self {
        Self {
            kind: RequestKind::Write,
            requests: tasks as i64,
            tasks: tasks as i64,
        }
    }
}

impl OrgActor {
    /// Takes a writer slot, then admits a member's request, before anything
    /// changes: an overloaded writer or a spent limit leaves no trace.
    pub(super) fn begin(
        &self,
        state: &mut OrgState,
        admission: Option<Admission>,
    ) -> Result<(WriteSlot<'_>, Work), EngineError> {
        let slot = self.deps.writers.reserve(state.org)?;
        let mut work = Work::default();
        if let Some(a) = admission {
            work.save_usage = state.admit(a, self.now(), &self.deps.clock)?;
        }
        Ok((slot, work))
    }

    /// `begin`, for a message that answers later: a refusal is answered
    /// here, and `None` says there is nothing more to do.
    pub(super) fn begin_or_refuse<T>(
        &self,
        state: &mut OrgState,
        admission: Admission,
        reply: Reply<T>,
    ) -> Option<(WriteSlot<'_>, Work, Reply<T>)> {
        match self.begin(state, Some(admission)) {
            Ok((slot, work)) => Some((slot, work, reply)),
            Err(e) => {
                let _ = reply.send(Outcome {
                    result: Err(e),
                    commit: None,
                });
                None
            }
        }
    }

    /// Whether the server is stopping: nothing waits any more.
    pub(super) fn draining(&self) -> bool {
        self.deps
            .draining
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Submits what a message wrote (only its usage when it failed) and
    /// answers with the result and the commit.
    pub(super) fn finish<T>(
        &self,
        state: &mut OrgState,
        slot: WriteSlot<'_>,
        mut work: Work,
        result: Result<T, EngineError>,
        reply: Reply<T>,
    ) {
        if result.is_err() {
            work.discard_changes();
        }
        let commit = (!work.is_empty()).then(|| slot.submit(work.into_batch(state)));
        let _ = reply.send(Outcome { result, commit });
    }
}
