//! The board's own stream: what its open pages need to stay current, and
//! no more. Every page of an org on the org's full event stream received
//! every event and fetched itself again in bursts; here each org with a
//! board open has one feed, which takes the tasks the org's commits
//! changed (`changes`, gathered by the writer in place) and, at most once
//! a [`WINDOW_MS`], renders one `changed` notice: the org's change mark,
//! the changed tasks' ids (up to `changes::MAX_IDS`) and the open tasks per
//! status as the org's actor last published them. The notice is rendered
//! once and shared by every board of the org (an `Arc<str>` in a `watch`
//! channel), so a slow board holds up nobody and, when it reads again,
//! gets the latest notice only. An org without a board open has no feed;
//! a feed ends with its last board.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use super::changes::Window;
use super::hub::EventHub;
use super::stream::KEEP_ALIVE_MS;
use crate::clock::Clock;
use crate::domain::open::StatusCounts;
use crate::domain::{OrgId, TaskId};

/// At most one notice per org in this long.
pub const WINDOW_MS: u64 = 500;

/// The hub hears of a commit before the org's actor publishes what it
/// changed (its mark and counts): a notice whose mark has not moved since
/// the last waits this long, up to [`SETTLE_TRIES`] times, for the actor.
const SETTLE_STEP: Duration = Duration::from_millis(5);
const SETTLE_TRIES: u32 = 20;

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
    mark: String,
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

/// The notice of a window's changes: its data as compact JSON, on one
/// line.
fn notice(window: Window, mark: String, c: StatusCounts) -> Arc<str> {
    let notice = Notice {
        mark,
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
pub fn missed(mark: String, counts: StatusCounts) -> Arc<str> {
    let unnamed = Window {
        tasks: Vec::new(),
        more: true,
    };
    notice(unnamed, mark, counts)
}

/// The org's change mark and open tasks per status, read from memory.
pub type OrgState = Arc<dyn Fn(OrgId) -> (String, StatusCounts) + Send + Sync>;

/// A notice as its feed sent it: its mark, read when it was sent (after
/// every commit it names), and its data.
#[derive(Debug, Clone)]
pub struct Sent {
    pub mark: Arc<str>,
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

    /// The org's notices from now on, starting its feed if it has none.
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
        tokio::spawn(feed(
            Arc::clone(self),
            org,
            Arc::clone(hub),
            Arc::clone(state),
            sender,
        ));
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
    pub fn noticed(&self, org: OrgId) -> Option<Arc<str>> {
        let feeds = self.feeds();
        let sent = feeds.get(&org)?.borrow();
        sent.as_ref().map(|s| Arc::clone(&s.mark))
    }

    /// Orgs with a feed running.
    pub fn open(&self) -> usize {
        self.feeds().len()
    }
}

/// One org's feed: sends the org's changes as a notice, at most one a
/// [`WINDOW_MS`], until no board reads it or the changes end.
async fn feed(
    feeds: Arc<BoardFeeds>,
    org: OrgId,
    hub: Arc<EventHub>,
    state: OrgState,
    notices: Notices,
) {
    let changes = hub.watch_changes(org);
    let mut last_sent: Option<Instant> = None;
    let mut last_mark = state(org).0;
    loop {
        if changes.has_ended() {
            feeds.retire(org, &notices, true);
            break;
        }
        if changes.is_empty() {
            // A change gathered after this look wakes it all the same.
            tokio::select! {
                biased;
                () = notices.closed() => {
                    if feeds.retire(org, &notices, false) {
                        break;
                    }
                }
                () = changes.woken() => {}
            }
            continue;
        }
        let at = due(last_sent, Instant::now());
        let Some((mark, counts)) = settled(&state, org, &last_mark, at, &notices).await else {
            if feeds.retire(org, &notices, false) {
                break;
            }
            continue;
        };
        notices.send_replace(Some(Sent {
            mark: mark.as_str().into(),
            data: notice(changes.take(), mark.clone(), counts),
        }));
        last_mark = mark;
        last_sent = Some(Instant::now());
    }
    hub.unwatch_changes(org, &changes);
}

/// The org's mark and counts for a notice due `at`: read once the org's
/// actor has published what the changes did (its mark moved since
/// `last_mark`), or after [`SETTLE_TRIES`]; `None` if the last board went
/// meanwhile.
async fn settled(
    state: &OrgState,
    org: OrgId,
    last_mark: &str,
    mut at: Instant,
    notices: &Notices,
) -> Option<(String, StatusCounts)> {
    let mut settling = 0;
    loop {
        tokio::select! {
            biased;
            () = notices.closed() => return None,
            () = tokio::time::sleep_until(at) => {}
        }
        let (mark, counts) = state(org);
        if mark != last_mark || settling == SETTLE_TRIES {
            return Some((mark, counts));
        }
        settling += 1;
        at = Instant::now() + SETTLE_STEP;
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
    clock: Arc<dyn Clock>,
    clock_moves: watch::Receiver<u64>,
    sent_at: i64,
    keep_alive: Pin<Box<Sleep>>,
}

impl BoardStream {
    pub fn new(
        notices: watch::Receiver<Option<Sent>>,
        first: Option<Arc<str>>,
        hub: &EventHub,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let sent_at = clock.now_ms();
        Self {
            notices,
            first,
            clock,
            clock_moves: hub.clock_moves(),
            sent_at,
            keep_alive: Box::pin(tokio::time::sleep(in_ms(KEEP_ALIVE_MS))),
        }
    }

    /// What to send next; `None` when the stream ends (its org's feed
    /// ended: the org moved or the server is stopping).
    pub async fn next(&mut self) -> Option<BoardItem> {
        if let Some(first) = self.first.take() {
            self.sent_at = self.clock.now_ms();
            return Some(BoardItem::Changed(first));
        }
        loop {
            if self.clock.now_ms() - self.sent_at >= KEEP_ALIVE_MS {
                self.sent_at = self.clock.now_ms();
                return Some(BoardItem::KeepAlive);
            }
            tokio::select! {
                changed = self.notices.changed() => {
                    changed.ok()?;
                    let notice = self.notices.borrow_and_update().clone();
                    if let Some(notice) = notice {
                        self.sent_at = self.clock.now_ms();
                        return Some(BoardItem::Changed(notice.data));
                    }
                }
                () = self.keep_alive.as_mut() => {
                    let quiet = self.clock.now_ms() - self.sent_at;
                    let due = Instant::now() + in_ms(KEEP_ALIVE_MS - quiet);
                    self.keep_alive.as_mut().reset(due);
                }
                moved = self.clock_moves.changed() => moved.ok()?,
            }
        }
    }
}

fn in_ms(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::super::changes::MAX_IDS;
    use super::*;

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
        let data = notice(window, "m.1".into(), counts);
        let v: serde_json::Value = serde_json::from_str(&data).unwrap();
        assert_eq!(v["tasks"].as_array().unwrap().len(), MAX_IDS);
        assert_eq!(v["tasks"][0], first.to_string());
        assert_eq!(
            (v["more"].clone(), v["mark"].clone()),
            (true.into(), "m.1".into())
        );
        assert_eq!(
            v["counts"],
            serde_json::json!({"pending": 3, "paused": 0, "in_progress": 2, "feedback": 0, "blocked": 0})
        );
        let v: serde_json::Value = serde_json::from_str(&missed("m.2".into(), counts)).unwrap();
        assert_eq!(
            (v["more"].clone(), v["tasks"].clone()),
            (true.into(), serde_json::json!([]))
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

    /// Commits of `task` published until aborted: the feed watches the
    /// org's changes once it has started, and a board on a quiet org
    /// waits as long as it must.
    fn publishing(hub: &Arc<EventHub>, org: OrgId, task: TaskId) -> tokio::task::JoinHandle<()> {
        let events = vec![super::super::created(task)];
        let batch =
            crate::store::WriteBatch::new(org, vec![crate::store::WriteOp::InsertEvents(events)]);
        let hub = Arc::clone(hub);
        tokio::spawn(async move {
            loop {
                hub.publish(&[&batch], 1);
                tokio::task::yield_now().await;
            }
        })
    }

    /// A hub, its board feeds, an org's state that never moves from `m`,
    /// and the org.
    fn feeds() -> (Arc<EventHub>, Arc<BoardFeeds>, OrgState, OrgId) {
        let state: OrgState = Arc::new(|_| ("m".to_owned(), StatusCounts::default()));
        (Arc::default(), Arc::default(), state, OrgId::new_v7())
    }

    #[tokio::test]
    async fn one_feed_per_org_while_boards_read_it() {
        let (hub, feeds, state, org) = feeds();
        let mut one = feeds.subscribe(org, &hub, &state);
        let mut two = feeds.subscribe(org, &hub, &state);
        assert_eq!(feeds.open(), 1);
        let task = TaskId::new_v7();
        let publish = publishing(&hub, org, task);
        one.changed().await.unwrap();
        two.changed().await.unwrap();
        publish.abort();
        let (a, b) = (one.borrow().clone().unwrap(), two.borrow().clone().unwrap());
        assert!(Arc::ptr_eq(&a.data, &b.data), "rendered once for both");
        assert!(a.data.contains(&task.to_string()));
        assert_eq!(feeds.noticed(org).as_deref(), Some("m"));
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
    async fn a_feed_ends_with_its_org_cut_off_and_its_boards_streams_with_it() {
        let (hub, feeds, state, org) = feeds();
        let mut board = feeds.subscribe(org, &hub, &state);
        let publish = publishing(&hub, org, TaskId::new_v7());
        board.changed().await.unwrap();
        publish.abort();
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
}
