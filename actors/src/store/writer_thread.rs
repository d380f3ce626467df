//! The SQLite writer's thread, favoured by the scheduler.
//!
//! Every request waits for a group commit, and a lane's commits run one at
//! a time on one thread (sqlx runs each SQLite connection on a thread of its
//! own). Under `taskq bench` the request threads held both cores in the
//! moments a commit was due: the commit's thread was runnable but waiting
//! for a core 27% of the time (`/proc/<pid>/task/<tid>/schedstat`), and
//! every request behind the commit waited with it. With a lower nice value
//! it takes a core as soon as it has work. Lowering a thread's nice value
//! takes `CAP_SYS_NICE` (or an `RLIMIT_NICE` that allows it); without it the
//! writer keeps the default and one warning says so.

/// The name of the writer connection's thread, by which it is found.
pub(super) const NAME: &str = "taskq-writer";

/// Gives the writer's threads the nice value `nice` (0 leaves them be).
pub(super) fn renice(nice: i32) {
    if nice == 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    if let Err(e) = renice_named(NAME, nice) {
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            tracing::warn!(
                error = %e,
                nice,
                "the SQLite writer's thread keeps the default priority; \
                 grant CAP_SYS_NICE (or set TASKQ_SQLITE_WRITER_NICE=0)"
            );
        });
    }
}

/// Sets the nice value of every thread of this process named `name`.
#[cfg(target_os = "linux")]
fn renice_named(name: &str, nice: i32) -> std::io::Result<()> {
    use rustix::process::{setpriority_process, Pid};
    for entry in std::fs::read_dir("/proc/self/task")? {
        let task = entry?.path();
        // A thread that ended meanwhile has no name left to match.
        let Ok(comm) = std::fs::read_to_string(task.join("comm")) else {
            continue;
        };
        if comm.trim_end() != name {
            continue;
        }
        let tid = task
            .file_name()
            .and_then(|t| t.to_str())
            .and_then(|t| t.parse().ok())
            .and_then(Pid::from_raw);
        if let Some(tid) = tid {
            match setpriority_process(Some(tid), nice) {
                Ok(()) | Err(rustix::io::Errno::SRCH) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::sync::mpsc;

    /// The nice value of this process's thread `tid`, from `/proc`.
    fn nice_of(tid: &str) -> i32 {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        // The fields after the name, which is in parentheses: the nice
        // value is the 19th field of the line, the 17th after the name.
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        after_name.split(' ').nth(16).unwrap().parse().unwrap()
    }

    #[test]
    fn renices_the_threads_of_its_name_and_no_other() {
        let (tid_tx, tid_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let named = std::thread::Builder::new()
            .name("taskq-nice-test".to_owned())
            .spawn(move || {
                tid_tx
                    .send(rustix::thread::gettid().as_raw_nonzero().get())
                    .unwrap();
                done_rx.recv().unwrap();
            })
            .unwrap();
        let tid = tid_rx.recv().unwrap().to_string();
        let own = rustix::thread::gettid().as_raw_nonzero().get().to_string();
        let own_before = nice_of(&own);
        // Raising a nice value needs no privilege, so the test runs anywhere.
        super::renice_named("taskq-nice-test", 7).unwrap();
        assert_eq!(nice_of(&tid), 7);
        assert_eq!(nice_of(&own), own_before);
        done_tx.send(()).unwrap();
        named.join().unwrap();
    }
}
