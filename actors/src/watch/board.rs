//! The board's own stream: what its open pages need to stay current, and
//! no more. Every page of an org on the org's full event stream received
//! every event and fetched itself again in bursts; here each org with a
//! board open has one feed, a single subscriber of the org's live events
//! (`hub`), which gathers the tasks that changed and, at most once a
//! [`WINDOW_MS`], renders one `changed` notice: the org's change mark, the
//! changed tasks' ids (up to [`MAX_IDS`]) and the open tasks per status as
//! the org's actor last published them. The notice is rendered once and
//! shared by every board of the org (an `Arc<str>` in a `watch` channel),
//! so a slow board holds up nobody and, when it reads again, gets the
//! latest notice only. An org without a board open has no feed; a feed
//! ends with its last board.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use super::hub::{EventHub, LiveEnd};
use super::stream::KEEP_ALIVE_MS;
use crate::clock::Clock;
use crate::domain::open::StatusCounts;
use crate::domain::{OrgId, TaskId};

/// At most one notice per org in this long.
pub const WINDOW_MS: u64 = 500;

/// Changed tasks a notice names at most; beyond, it says there were more.
pub const MAX_IDS: usize = 100;

/// The hub hears of a commit before the org's actor publishes what it
/// changed (its mark and counts): a notice whose mark has not moved since
/// the last waits this long, up to [`SETTLE_TRIES`] times, for the actor.
const SETTLE_STEP: Duration = Duration::from_millis(5);
const SETTLE_TRIES: u32 = 20;

/// The tasks changed since the last notice.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Window {
    tasks: Vec<TaskId>,
    /// More changed than are named, or changes went unseen.
    more: bool,
    /// Anything changed at all.
    changed: bool,
}

impl Window {
    /// A change of `task`: named once, up to [`MAX_IDS`].
    pub fn add(&mut self, task: TaskId) {
        self.changed = true;
        if self.tasks.contains(&task) {
            return;
        }
        if self.tasks.len() < MAX_IDS {
            self.tasks.push(task);
        } else {
            self.more = true;
        }
    }

    /// Changes happened that the window cannot name.
    pub fn lost(&mut self) {
        self.changed = true;
        self.more = true;
    }

    pub fn is_empty(&self) -> bool {
        !self.changed
    }

    /// When a window holding changes may be sent: at once after a quiet
    /// spell, else one [`WINDOW_MS`] after the last notice.
    pub fn due(last_sent: Option<Instant>, now: Instant) -> Instant {
        match last_sent {
            Some(at) => (at + Duration::from_millis(WINDOW_MS)).max(now),
            None => now,
        }
    }

    /// The notice's data, and an empty window in its place.
    pub fn take(&mut self, mark: String, counts: StatusCounts) -> Arc<str> {
        let window = std::mem::take(self);
        notice(mark, window.tasks, window.more, counts)
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

/// A notice's data as compact JSON, on one line.
pub fn notice(mark: String, tasks: Vec<TaskId>, more: bool, c: StatusCounts) -> Arc<str> {
    let notice = Notice {
        mark,
        tasks,
        more,
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
    notice(mark, Vec::new(), true, counts)
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

/// One org's feed: gathers its live events into windows and sends each
/// as a notice, until no board reads it or the live events end.
async fn feed(
    feeds: Arc<BoardFeeds>,
    org: OrgId,
    hub: Arc<EventHub>,
    state: OrgState,
    notices: Notices,
) {
    let mut live = hub.subscribe_edits(org);
    let mut window = Window::default();
    let mut last_sent: Option<Instant> = None;
    let mut last_mark = state(org).0;
    let (mut settling, mut held_until) = (0, None::<Instant>);
    let mut ended = false;
    loop {
        let due = (!window.is_empty()).then(|| {
            Window::due(last_sent, Instant::now()).max(held_until.unwrap_or(Instant::now()))
        });
        tokio::select! {
            biased;
            () = notices.closed() => {
                if feeds.retire(org, &notices, false) {
                    break;
                }
            }
            received = live.recv() => match received {
                Ok(entry) => {
                    entry.events.iter().for_each(|e| window.add(e.task));
                    entry.edited.iter().for_each(|task| window.add(*task));
                }
                Err(LiveEnd::Behind) => {
                    window.lost();
                    drop(live);
                    live = hub.subscribe_edits(org);
                }
                Err(LiveEnd::Closed) => {
                    ended = true;
                    break;
                }
            },
            () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                let (mark, counts) = state(org);
                if mark == last_mark && settling < SETTLE_TRIES {
                    settling += 1;
                    held_until = Some(Instant::now() + SETTLE_STEP);
                    continue;
                }
                (settling, held_until) = (0, None);
                last_mark.clone_from(&mark);
                let sent = Sent { mark: mark.as_str().into(), data: window.take(mark, counts) };
                notices.send_replace(Some(sent));
                last_sent = Some(Instant::now());
            }
        }
    }
    if ended {
        feeds.retire(org, &notices, true);
    }
    drop(live);
    hub.unsubscribed(org);
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
    use super::*;

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
        let data = window.take("m.1".into(), StatusCounts::default());
        assert!(window.is_empty());
        let v: serde_json::Value = serde_json::from_str(&data).unwrap();
        assert_eq!(v["tasks"].as_array().unwrap().len(), MAX_IDS);
        assert_eq!(v["tasks"][0], first.to_string());
        assert_eq!(
            (v["more"].clone(), v["mark"].clone()),
            (true.into(), "m.1".into())
        );
    }

    #[test]
    fn unseen_changes_are_more() {
        let mut window = Window::default();
        window.lost();
        assert!(!window.is_empty());
        let counts = StatusCounts {
            pending: 3,
            in_progress: 2,
            ..StatusCounts::default()
        };
        let v: serde_json::Value = serde_json::from_str(&window.take("m".into(), counts)).unwrap();
        assert_eq!(v["more"], true);
        assert_eq!(v["tasks"], serde_json::json!([]));
        assert_eq!(
            v["counts"],
            serde_json::json!({"pending": 3, "paused": 0, "in_progress": 2, "feedback": 0, "blocked": 0})
        );
    }

    #[test]
    fn a_window_is_sent_at_once_after_quiet_and_else_a_window_after_the_last() {
        let now = Instant::now();
        assert_eq!(Window::due(None, now), now);
        let long_ago = now - Duration::from_secs(5);
        assert_eq!(Window::due(Some(long_ago), now), now);
        let just = now - Duration::from_millis(100);
        assert_eq!(
            Window::due(Some(just), now),
            just + Duration::from_millis(WINDOW_MS)
        );
    }

    #[tokio::test]
    async fn one_feed_per_org_while_boards_read_it() {
        let hub = Arc::new(EventHub::default());
        let feeds = Arc::new(BoardFeeds::default());
        let state: OrgState = Arc::new(|_| ("m".to_owned(), StatusCounts::default()));
        let org = OrgId::new_v7();
        let mut one = feeds.subscribe(org, &hub, &state);
        let mut two = feeds.subscribe(org, &hub, &state);
        assert_eq!(feeds.open(), 1);
        let task = TaskId::new_v7();
        // The feed subscribes to the hub when it starts: publish until it
        // has (a board on a quiet org waits as long as it must).
        let batch = crate::store::WriteBatch::new(
            org,
            vec![crate::store::WriteOp::InsertEvents(vec![
                crate::domain::StoredEvent {
                    task_id: task,
                    from_status: None,
                    to_status: crate::domain::TaskStatus::Pending,
                    agent_id: "bot".into(),
                    at: 1,
                    note: None,
                    lease_expired: false,
                },
            ])],
        );
        let publish = {
            let hub = Arc::clone(&hub);
            tokio::spawn(async move {
                loop {
                    hub.publish(&[&batch], 1);
                    tokio::task::yield_now().await;
                }
            })
        };
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
}
