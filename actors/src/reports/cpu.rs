//! One low-priority thread for the reports' CPU work (clustering, figures),
//! so a recompute of many orgs yields both cores to claims: the thread runs
//! at the lowest priority the OS gives an unprivileged thread (niceness 19
//! on Linux), and only ever one job at a time.

use std::sync::mpsc;

use crate::error::EngineError;

type Job = Box<dyn FnOnce() + Send>;

pub struct Background {
    jobs: mpsc::Sender<Job>,
}

impl Background {
    pub fn start() -> Self {
        let (jobs, inbox) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("taskq-reports".into())
            .spawn(move || {
                use thread_priority::{set_current_thread_priority, ThreadPriority};
                if let Err(e) = set_current_thread_priority(ThreadPriority::Min) {
                    tracing::debug!(error = ?e, "the reports thread keeps its priority");
                }
                while let Ok(job) = inbox.recv() {
                    // A job that panics drops its answer; the thread goes on.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            })
            .expect("the reports thread starts");
        Self { jobs }
    }

    /// Runs `f` on the reports thread and waits for its result.
    pub async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, EngineError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        let failed = || EngineError::Internal("a report computation failed".into());
        self.jobs.send(job).map_err(|_| failed())?;
        rx.await.map_err(|_| failed())
    }
}
