//! Low-priority runtimes for work that must never take CPU from claims:
//! one OS thread each, at the lowest priority the OS gives an
//! unprivileged thread (`SCHED_IDLE` on Linux, else the lowest niceness),
//! running a current-thread tokio runtime.
//!
//! The reports run on one: their store reads (through a pool of their
//! own, whose SQLite connection threads inherit the priority), decryption,
//! the figures and the clustering. The webhook delivery worker runs on
//! another: its outbox reads, signatures and HTTP. So a recompute of many
//! orgs, or a backlog of deliveries, takes whatever CPU the claims leave,
//! not the other way round. Neither writes from there: what they write
//! goes through the group-commit writer, at its own priority, so a
//! starved thread never holds a lock a claim waits for.

use std::future::Future;

use crate::error::EngineError;

pub struct Background {
    handle: tokio::runtime::Handle,
}

impl Background {
    /// Starts the thread `name`.
    pub fn start(name: &str) -> Result<Self, EngineError> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                lower_priority();
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = tx.send(Ok(runtime.handle().clone()));
                runtime.block_on(std::future::pending::<()>());
            })
            .map_err(|e| EngineError::Internal(format!("the thread {name}: {e}")))?;
        let handle = rx
            .recv()
            .map_err(|_| EngineError::Internal(format!("the thread {name} did not start")))?
            .map_err(|e| EngineError::Internal(format!("the runtime of {name}: {e}")))?;
        Ok(Self { handle })
    }

    /// Starts `work` on the thread, to run until it ends or is aborted.
    pub fn spawn<F>(&self, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(work)
    }

    /// Runs `work` on the thread and waits for its result.
    pub async fn run<F>(&self, work: F) -> Result<F::Output, EngineError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle
            .spawn(work)
            .await
            .map_err(|_| EngineError::Internal("a background computation failed".into()))
    }
}

/// On Linux, `SCHED_IDLE`: the thread runs only when a core would
/// otherwise be idle, and threads it starts (its pool's SQLite connection
/// threads) inherit that. Elsewhere, or if refused, the lowest niceness.
fn lower_priority() {
    use thread_priority::{set_current_thread_priority, ThreadPriority};
    #[cfg(target_os = "linux")]
    {
        use thread_priority::unix::{
            set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy,
            ThreadSchedulePolicy,
        };
        let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        if set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle).is_ok() {
            return;
        }
    }
    if let Err(e) = set_current_thread_priority(ThreadPriority::Min) {
        tracing::debug!(error = ?e, "a background thread keeps its priority");
    }
}
