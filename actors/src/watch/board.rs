//! The board's own stream: what its open pages need to stay current, and
//! no more. Every page of an org on the org's full event stream received
//! every event and fetched itself again in bursts; here each org with a
//! board open has one feed, which takes the tasks the org's commits
//! changed (`changes`, gathered by the writer in place) and, at most once
//! a [`WINDOW_MS`], renders one `changed` notice: the changed tasks' ids
//! (up to `changes::MAX_IDS`), and the org's change mark and open tasks per
//! status as the last of those commits carried them from the org's actor
//! (so the feed never waits for the actor to publish them, and a notice
//! never tells a change that is not committed yet). The notice is rendered
//! once and shared by every board of the org (an `Arc<str>` in a `watch`
//! channel), so a slow board holds up nobody and, when it reads again,
//! gets the latest notice only. An org without a board open has no feed;
//! a feed ends with its last board.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::changes::{Changes, Window};
use super::hub::EventHub;
use super::keep_alive::KeepAlive;
use crate::clock::Clock;
use crate::domain::mark::{ChangeMark, MarkedCounts};
use crate::domain::{OrgId, TaskId};

/// At most one notice per org in this long.
pub const WINDOW_MS: u64 = 500;

/// When changes may be sent: at once after a quiet spell, else one
/// [`WINDOW_MS`] after the last notice.
fn due(last_sent: Option<Instant>, now: Instant) -> Instant {
    match last_sent {
        Some(at) => (at + Duration::from_millis(WINDOW_MS)).max(now),
        None => now,
    }
}

#[derive(Serialize)]
struct Notice {
    mark: ChangeMark,
    tasks: Vec<TaskId>,
    more: bool,
    counts: Counts,
}

#[derive(Serialize)]
struct Counts {
    pending: usize,
    paused: usize,
    in_progress: usize,
    feedback: usize,
    blocked: usize,
}

/// The notice of a window's changes, telling the org's mark and open
/// counts `at`: its data as compact JSON, on one line.
fn notice(window: Window, at: MarkedCounts) -> Arc<str> {
    let c = at.counts;
    let notice = Notice {
        mark: at.mark,
        tasks: window.tasks,
        more: window.more,
        counts: Counts {
            pending: c.pending,
            paused: c.paused,
            in_progress: c.in_progress,
            feedback: c.feedback,
            blocked: c.blocked,
        },
    };
    // Plain data always serializes.
    serde_json::to_string(&notice).unwrap_or_default().into()
}

/// The notice of a page made before changes it did not see: which, it
/// cannot say.
pub fn missed(now: MarkedCounts) -> Arc<str> {
    let unnamed = Window {
        more: true,
        ..Window::default()
    };
    notice(unnamed, now)
}

/// The org's change mark and open tasks per status as its actor last
/// published them, read from memory: what a notice tells of changes no
/// actor's commit marked.
pub type OrgState = Arc<dyn Fn(OrgId) -> MarkedCounts + Send + Sync>;

/// A notice as its feed sent it: its mark, that of the last commit it
/// names (every change it names committed before it was sent), and its
/// data.
#[derive(Debug, Clone)]
pub struct Sent {
    pub mark: ChangeMark,
    pub data: Arc<str>,
}

type Notices = Arc<watch::Sender<Option<Sent>>>;

/// The feeds of the orgs that have a board open.
#[derive(Default)]
pub struct BoardFeeds {
    feeds: Mutex<HashMap<OrgId, Notices>>,
}

impl BoardFeeds {
    fn feeds(&self) -> std::sync::MutexGuard<'_, HashMap<OrgId, Notices>> {
        self.feeds.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The org's notices from now on, starting its feed if it has none:
    /// every commit after this call is in one.
    pub fn subscribe(
        self: &Arc<Self>,
        org: OrgId,
        hub: &Arc<EventHub>,
        state: &OrgState,
    ) -> watch::Receiver<Option<Sent>> {
        let mut feeds = self.feeds();
        if let Some(notices) = feeds.get(&org) {
            return notices.subscribe();
        }
        let (sender, receiver) = watch::channel(None);
        let sender = Arc::new(sender);
        feeds.insert(org, Arc::clone(&sender));
        // Gathered from here, not from when the feed first runs.
        let changes = hub.watch_changes(org);
        let feed = Feed {
            feeds: Arc::clone(self),
            org,
            hub: Arc::clone(hub),
            changes,
            state: Arc::clone(state),
            notices: sender,
        };
        tokio::spawn(feed.run());
        receiver
    }

    /// The feed ends if no board reads it: `true` when it is gone.
    fn retire(&self, org: OrgId, notices: &Notices, ended: bool) -> bool {
        let mut feeds = self.feeds();
        if !ended && notices.receiver_count() > 0 {
            return false;
        }
        if feeds.get(&org).is_some_and(|n| Arc::ptr_eq(n, notices)) {
            feeds.remove(&org);
        }
        true
    }

    /// The mark of the org's last notice, while its feed runs: every
    /// change of the org that a notice up to that mark named was committed
    /// before it was sent.
    pub fn noticed(&self, org: OrgId) -> Option<ChangeMark> {
        let feeds = self.feeds();
        let sent = feeds.get(&org)?.borrow();
        sent.as_ref().map(|s| s.mark)
    }

    /// Orgs with a feed running.
    pub fn open(&self) -> usize {
        self.feeds().len()
    }
}

/// One org's feed: what it takes the org's changes from and sends its
/// notices to.
struct Feed {
    feeds: Arc<BoardFeeds>,
    org: OrgId,
    hub: Arc<EventHub>,
    changes: Arc<Changes>,
    state: OrgState,
    notices: Notices,
}

impl Feed {
    /// Sends the org's changes as a notice, at most one a [`WINDOW_MS`],
    /// until no board reads it or the changes end.
    async fn run(self) {
        let changes = &self.changes;
        let mut last_sent: Option<Instant> = None;
        loop {
            if changes.has_ended() {
                self.feeds.retire(self.org, &self.notices, true);
                break;
            }
            let read = if changes.is_empty() {
                // A change gathered after this look wakes it all the same.
                self.while_read(changes.woken()).await
            } else {
                let at = due(last_sent, Instant::now());
                if at > Instant::now() {
                    self.while_read(tokio::time::sleep_until(at)).await
                } else {
                    self.send(changes.take());
                    last_sent = Some(Instant::now());
                    true
                }
            };
            if !read {
                break;
            }
        }
        self.hub.unwatch_changes(self.org, changes);
    }

    /// Waits for `what` while a board reads the notices: `false` when the
    /// last went first and the feed is retired.
    async fn while_read(&self, what: impl Future<Output = ()>) -> bool {
        tokio::select! {
            biased;
            () = self.notices.closed() => !self.feeds.retire(self.org, &self.notices, false),
            () = what => true,
        }
    }

    /// The notice of a window: the org's mark and counts as its last
    /// commit left them.
    fn send(&self, window: Window) {
        let at = window.marked.unwrap_or_else(|| (self.state)(self.org));
        self.notices.send_replace(Some(Sent {
            mark: at.mark,
            data: notice(window, at),
        }));
    }
}

/// What a board's stream sends next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoardItem {
    /// A `changed` notice's data.
    Changed(Arc<str>),
    /// A comment, so that the connection is seen to be alive.
    KeepAlive,
}

/// One open board's stream of its org's notices.
pub struct BoardStream {
    notices: watch::Receiver<Option<Sent>>,
    /// Sent first: the page was made before a change already noticed.
    first: Option<Arc<str>>,
    keep_alive: KeepAlive,
}

impl BoardStream {
    pub fn new(
        notices: watch::Receiver<Option<Sent>>,
        first: Option<Arc<str>>,
        hub: &EventHub,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            notices,
            first,
            keep_alive: KeepAlive::new(hub, clock),
        }
    }

    /// What to send next; `None` when the stream ends (its org's feed
    /// ended: the org moved or the server is stopping).
    pub async fn next(&mut self) -> Option<BoardItem> {
        if let Some(first) = self.first.take() {
            self.keep_alive.sent();
            return Some(BoardItem::Changed(first));
        }
        loop {
            tokio::select! {
                changed = self.notices.changed() => {
                    changed.ok()?;
                    let notice = self.notices.borrow_and_update().clone();
                    if let Some(notice) = notice {
                        self.keep_alive.sent();
                        return Some(BoardItem::Changed(notice.data));
                    }
                }
                due = self.keep_alive.due() => {
                    due?;
                    return Some(BoardItem::KeepAlive);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::changes::MAX_IDS;
    use super::super::creation;
    use super::*;
    use crate::domain::open::StatusCounts;
    use crate::store::{WriteBatch, WriteOp};

    const fn at(version: u64) -> ChangeMark {
        ChangeMark::At { actor: 7, version }
    }

    #[test]
    fn a_notice_names_the_windows_tasks_and_the_open_counts() {
        let mut window = Window::default();
        let first = TaskId::new_v7();
        for task in std::iter::once(first).chain((0..MAX_IDS).map(|_| TaskId::new_v7())) {
            window.add(task);
        }
        let counts = StatusCounts {
            pending: 3,
            in_progress: 2,
            ..StatusCounts::default()
        };
        let data = notice(
            window,
            MarkedCounts {
                mark: at(1),
                counts,
            },
        );
        let v: serde_json::Value = serde_json::from_str(&data).unwrap();
        assert_eq!(v["tasks"].as_array().unwrap().len(), MAX_IDS);
        assert_eq!(v["tasks"][0], first.to_string());
        assert_eq!(
            (v["more"].clone(), v["mark"].clone()),
            (true.into(), "7.1".into())
        );
        assert_eq!(
            v["counts"],
            serde_json::json!({"pending": 3, "paused": 0, "in_progress": 2, "feedback": 0, "blocked": 0})
        );
        let idle = MarkedCounts {
            mark: ChangeMark::Idle,
            counts,
        };
        let v: serde_json::Value = serde_json::from_str(&missed(idle)).unwrap();
        assert_eq!(
            (v["more"].clone(), v["tasks"].clone(), v["mark"].clone()),
            (true.into(), serde_json::json!([]), "idle".into())
        );
    }

    #[test]
    fn a_window_is_sent_at_once_after_quiet_and_else_a_window_after_the_last() {
        let now = Instant::now();
        assert_eq!(due(None, now), now);
        let long_ago = now - Duration::from_secs(5);
        assert_eq!(due(Some(long_ago), now), now);
        let just = now - Duration::from_millis(100);
        assert_eq!(
            due(Some(just), now),
            just + Duration::from_millis(WINDOW_MS)
        );
    }

    /// A hub, its board feeds, an org's published state that stays at
    /// `3.1` (its actor never publishes what the commits did), and the
    /// org.
    fn feeds() -> (Arc<EventHub>, Arc<BoardFeeds>, OrgState, OrgId) {
        let state: OrgState = Arc::new(|_| MarkedCounts {
            mark: ChangeMark::At {
                actor: 3,
                version: 1,
            },
            counts: StatusCounts::default(),
        });
        (Arc::default(), Arc::default(), state, OrgId::new_v7())
    }

    /// The board's next notice, within a few windows.
    async fn next_notice(board: &mut watch::Receiver<Option<Sent>>) -> Sent {
        let changed = tokio::time::timeout(Duration::from_secs(5), board.changed());
        changed.await.expect("a notice").expect("the feed runs");
        board.borrow_and_update().clone().expect("a notice")
    }

    #[tokio::test]
    async fn one_feed_per_org_while_boards_read_it() {
        let (hub, feeds, state, org) = feeds();
        let mut one = feeds.subscribe(org, &hub, &state);
        let mut two = feeds.subscribe(org, &hub, &state);
        assert_eq!(feeds.open(), 1);
        let task = TaskId::new_v7();
        hub.publish(&[&creation(org, task, 2)], 1);
        let (a, b) = (next_notice(&mut one).await, next_notice(&mut two).await);
        assert!(Arc::ptr_eq(&a.data, &b.data), "rendered once for both");
        assert!(a.data.contains(&task.to_string()));
        assert_eq!(feeds.noticed(org), Some(at(2)));
        drop((one, two));
        for _ in 0..1000 {
            if feeds.open() == 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(feeds.open(), 0, "the feed ends with its last board");
        assert_eq!(feeds.noticed(org), None);
    }

    #[tokio::test]
    async fn a_notice_tells_the_mark_and_counts_its_last_commit_left() {
        let (hub, feeds, state, org) = feeds();
        let mut board = feeds.subscribe(org, &hub, &state);
        let (a, b) = (TaskId::new_v7(), TaskId::new_v7());
        hub.publish(&[&creation(org, a, 4), &creation(org, b, 5)], 1);
        let sent = next_notice(&mut board).await;
        // Not the state the actor published (3.1), which lags the commit.
        assert_eq!(sent.mark, at(5));
        let v: serde_json::Value = serde_json::from_str(&sent.data).unwrap();
        assert_eq!(v["mark"], "7.5");
        assert_eq!(v["counts"]["pending"], 5);
        assert_eq!(v["tasks"], serde_json::json!([a, b]));
        // A commit no actor made (no mark) is told with the published
        // state.
        let unmarked = WriteBatch::new(
            org,
            vec![WriteOp::InsertEvents(vec![super::super::created(a)])],
        );
        hub.publish(&[&unmarked], 3);
        assert_eq!(next_notice(&mut board).await.mark, state(org).mark);
    }

    #[tokio::test]
    async fn a_commit_gathered_while_a_notice_goes_out_has_one_of_its_own() {
        let (hub, feeds, state, org) = feeds();
        let mut board = feeds.subscribe(org, &hub, &state);
        let (a, b, c) = (TaskId::new_v7(), TaskId::new_v7(), TaskId::new_v7());
        hub.publish(&[&creation(org, a, 1)], 1);
        let first = next_notice(&mut board).await;
        // The feed has just sent: the next commits land in its window.
        hub.publish(&[&creation(org, b, 2)], 2);
        hub.publish(&[&creation(org, c, 3)], 3);
        let second = next_notice(&mut board).await;
        assert_eq!((first.mark, second.mark), (at(1), at(3)));
        let v: serde_json::Value = serde_json::from_str(&second.data).unwrap();
        assert_eq!(v["tasks"], serde_json::json!([b, c]));
        // And one after the window, when the feed was waiting for changes.
        let quiet = tokio::time::timeout(Duration::from_millis(800), board.changed());
        assert!(quiet.await.is_err(), "nothing changed");
        hub.publish(&[&creation(org, a, 4)], 4);
        assert_eq!(next_notice(&mut board).await.mark, at(4));
    }

    #[tokio::test]
    async fn a_feed_ends_with_its_org_cut_off_and_its_boards_streams_with_it() {
        let (hub, feeds, state, org) = feeds();
        let mut board = feeds.subscribe(org, &hub, &state);
        hub.publish(&[&creation(org, TaskId::new_v7(), 1)], 1);
        next_notice(&mut board).await;
        hub.cut_off(org);
        // A notice of the last changes may come first; then they end.
        let ended = async { while board.changed().await.is_ok() {} };
        tokio::time::timeout(Duration::from_secs(10), ended)
            .await
            .expect("the notices end");
        assert_eq!(feeds.open(), 0);
        let _again = feeds.subscribe(org, &hub, &state);
        assert_eq!(feeds.open(), 1, "a board that comes back starts a feed");
    }

    async fn soon<T>(what: impl Future<Output = T>) -> Result<T, tokio::time::error::Elapsed> {
        tokio::time::timeout(Duration::from_secs(5), what).await
    }

    #[tokio::test]
    async fn a_board_stream_sends_notices_and_keeps_alive_on_the_engines_clock() {
        let (hub, feeds, state, org) = feeds();
        let clock = Arc::new(crate::clock::OffsetClock::default());
        let notices = feeds.subscribe(org, &hub, &state);
        let missed = missed(state(org));
        let mut stream = BoardStream::new(notices, Some(missed.clone()), &hub, clock.clone());
        assert_eq!(
            soon(stream.next()).await,
            Ok(Some(BoardItem::Changed(missed)))
        );
        hub.publish(&[&creation(org, TaskId::new_v7(), 1)], 1);
        let Ok(Some(BoardItem::Changed(data))) = soon(stream.next()).await else {
            panic!("a notice");
        };
        assert!(data.contains("7.1"));
        clock.advance(super::super::keep_alive::KEEP_ALIVE_MS);
        hub.clock_moved();
        assert_eq!(soon(stream.next()).await, Ok(Some(BoardItem::KeepAlive)));
    }
}
