//! The tasks an org's commits changed, gathered for its boards.
//!
//! A board needs to know which tasks changed, at most once a
//! `board::WINDOW_MS`, not every event: so the writer adds each commit's
//! tasks to the org's [`Changes`] in place, and the org's board feed is
//! woken only when they stop being empty, then takes them all at once
//! when its notice is due. A commit then costs the writer a lock and a
//! few comparisons per task, with no entry built, sent or woken for, and
//! an org changing thousands of times a second wakes its feed a few times
//! a second. What is gathered is bounded ([`MAX_IDS`] ids, then only
//! "more"), however long the feed waits. Each commit of an org's actor
//! carries the org's change mark and open counts as of its message, and
//! the window keeps the last: a notice tells the state its last commit
//! left, without waiting for the actor to publish it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::domain::mark::MarkedCounts;
use crate::domain::TaskId;
use crate::store::{WriteBatch, WriteOp};

/// Changed tasks a notice names at most; beyond, it says there were more.
pub const MAX_IDS: usize = 100;

/// The tasks changed since the last notice.
#[derive(Debug, Default)]
pub struct Window {
    pub tasks: Vec<TaskId>,
    /// More changed than are named.
    pub more: bool,
    /// The org's mark and open counts as of the last commit gathered
    /// that carried them.
    pub marked: Option<MarkedCounts>,
}

impl Window {
    /// A change of `task`: named once, up to [`MAX_IDS`].
    pub fn add(&mut self, task: TaskId) {
        if self.more || self.tasks.contains(&task) {
            return;
        }
        if self.tasks.len() < MAX_IDS {
            self.tasks.push(task);
        } else {
            self.more = true;
        }
    }

    /// The tasks a commit's writes change: those it records an event of,
    /// and those it edits or removes without one.
    fn add_writes(&mut self, ops: &[WriteOp]) {
        for op in ops {
            match op {
                WriteOp::InsertEvents(events) => events.iter().for_each(|e| self.add(e.task_id)),
                WriteOp::UpdateHeader { header, .. } => self.add(header.task_id),
                WriteOp::SetContent { task_id, .. } => self.add(*task_id),
                WriteOp::PruneTasks { task_ids, .. } => task_ids.iter().for_each(|t| self.add(*t)),
                _ => {}
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty() && !self.more
    }
}

/// One org's changed tasks, shared by the writer that adds to them and the
/// board feed that takes them.
#[derive(Debug, Default)]
pub struct Changes {
    window: Mutex<Window>,
    /// Woken when the window stops being empty, and when the changes end.
    wake: Notify,
    ended: AtomicBool,
}

impl Changes {
    fn window(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds the tasks a committed batch changed, and the mark it carries.
    pub fn gather(&self, batch: &WriteBatch) {
        let mut window = self.window();
        let was_empty = window.is_empty();
        window.add_writes(&batch.ops);
        if batch.marked.is_some() {
            window.marked = batch.marked;
        }
        let woke = was_empty && !window.is_empty();
        drop(window);
        if woke {
            self.wake.notify_one();
        }
    }

    /// What changed since the last take, and an empty window in its place.
    pub fn take(&self) -> Window {
        std::mem::take(&mut *self.window())
    }

    pub fn is_empty(&self) -> bool {
        self.window().is_empty()
    }

    /// No more changes will be gathered: the org's commit failed, it moved
    /// away, or the server is stopping.
    pub fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    pub fn has_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// Waits until something was gathered into an empty window, or the
    /// changes ended (either may have happened before the call: a wake is
    /// kept until it is waited for). It may return with the window empty
    /// again, if it was taken since.
    pub async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Changes that have already ended (for a server that stops).
    pub fn ended() -> Arc<Self> {
        let changes = Self::default();
        changes.ended.store(true, Ordering::SeqCst);
        Arc::new(changes)
    }
}

#[cfg(test)]
mod tests {
    use super::super::creation;
    use super::*;
    use crate::domain::OrgId;

    fn created(task: TaskId) -> WriteOp {
        WriteOp::InsertEvents(vec![super::super::created(task)])
    }

    #[test]
    fn a_window_names_each_task_once_up_to_the_cap() {
        let mut window = Window::default();
        assert!(window.is_empty());
        let first = TaskId::new_v7();
        window.add(first);
        window.add(first);
        for _ in 1..MAX_IDS {
            window.add(TaskId::new_v7());
        }
        assert!(!window.more);
        window.add(first);
        assert!(!window.more, "a task named already is no more");
        window.add(TaskId::new_v7());
        assert!(window.more);
        assert_eq!(window.tasks.len(), MAX_IDS);
        assert_eq!(window.tasks[0], first);
    }

    #[test]
    fn a_commit_names_the_tasks_it_moved_edited_or_removed() {
        let (moved, removed) = (TaskId::new_v7(), TaskId::new_v7());
        let edited = TaskId::new_v7();
        let mut window = Window::default();
        window.add_writes(&[
            WriteOp::DeleteTag("t".into()),
            created(moved),
            WriteOp::SetContent {
                task_id: edited,
                field: crate::domain::ContentField::Title,
                value: None,
            },
            WriteOp::PruneTasks {
                task_ids: vec![removed, moved],
                cutoff: 0,
            },
        ]);
        assert_eq!(window.tasks, [moved, edited, removed]);
        let mut quiet = Window::default();
        quiet.add_writes(&[WriteOp::DeleteTag("t".into())]);
        assert!(quiet.is_empty(), "no task changed");
    }

    #[tokio::test]
    async fn the_feed_is_woken_when_changes_arrive_and_when_they_end() {
        let changes = Changes::default();
        let (org, task) = (OrgId::new_v7(), TaskId::new_v7());
        changes.gather(&creation(org, task, 1));
        changes.gather(&creation(org, TaskId::new_v7(), 2));
        // The wake was kept for a feed that was not waiting yet.
        changes.woken().await;
        let window = changes.take();
        assert_eq!(window.tasks.len(), 2);
        assert!(changes.is_empty());
        changes.gather(&creation(org, task, 3));
        changes.woken().await;
        assert_eq!(changes.take().tasks, [task]);
        changes.end();
        changes.woken().await;
        assert!(changes.has_ended());
        assert!(Changes::ended().has_ended());
    }

    #[test]
    fn a_window_tells_the_mark_its_last_commit_carried() {
        let changes = Changes::default();
        let (org, task) = (OrgId::new_v7(), TaskId::new_v7());
        changes.gather(&creation(org, task, 4));
        changes.gather(&creation(org, task, 5));
        // A write no actor made (it carries no mark) leaves the last one.
        changes.gather(&WriteBatch::new(org, vec![created(TaskId::new_v7())]));
        let window = changes.take();
        assert_eq!(window.marked, creation(org, task, 5).marked);
        assert_eq!(window.tasks.len(), 2);
        assert_eq!(changes.take().marked, None, "taken with its window");
    }
}
