//! The reports' own low-priority runtime: one OS thread, at the lowest
//! priority the OS gives an unprivileged thread (`SCHED_IDLE` on Linux,
//! else the lowest niceness), running a current-thread tokio runtime. Everything a report computation
//! does runs there: its store reads (through a pool of its own, whose
//! SQLite connection threads inherit the priority), decryption, the
//! figures and the clustering. So a recompute of many orgs takes whatever
//! CPU the claims leave, not the other way round.

use std::future::Future;

use crate::error::EngineError;

pub struct Background {
    handle: tokio::runtime::Handle,
}

impl Background {
    pub fn start() -> Result<Self, EngineError> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("taskq-reports".into())
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
            .map_err(|e| EngineError::Internal(format!("the reports thread: {e}")))?;
        let handle = rx
            .recv()
            .map_err(|_| EngineError::Internal("the reports thread did not start".into()))?
            .map_err(|e| EngineError::Internal(format!("the reports runtime: {e}")))?;
        Ok(Self { handle })
    }

    /// Runs `work` on the reports thread and waits for its result.
    pub async fn run<F>(&self, work: F) -> Result<F::Output, EngineError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle
            .spawn(work)
            .await
            .map_err(|_| EngineError::Internal("a report computation failed".into()))
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
        tracing::debug!(error = ?e, "the reports thread keeps its priority");
    }
}
