//! A turn at an endpoint's log: the org's events after the endpoint's
//! cursor, those it takes split over a few streams (each task's in one
//! stream, in order), and what becomes of each once sent.
//!
//! The cursor moves through every event the turn read, whatever came of
//! them: an event that failed, that waits behind an earlier event of its
//! task still in an outbox row, or that a stream did not reach before its
//! hold ran out becomes an outbox row of its own, behind its task's
//! earlier rows. So one commit settles the turn, and nothing is lost or
//! sent out of order however it ended.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use super::ledger::Taken;
use super::send::{Delivered, Entry};
use super::Worker;
use crate::domain::webhooks::{EventSet, Subscription};
use crate::domain::{OrgId, WebhookId};
use crate::store::{AfterAttempt, DeliveryRecord, LoggedEvent, NewRow, Target, Turn};

/// The events a turn read: the entries the endpoint takes, in log order,
/// and the last event read (where the cursor goes).
#[derive(Debug)]
pub(super) struct LogTurn {
    pub from: i64,
    pub through: i64,
    pub entries: Vec<Entry>,
}

impl LogTurn {
    /// The turn over `events` (the log after `from`, in order) for an
    /// endpoint subscribed to `subscription`. An event it takes no type of
    /// is passed over.
    pub(super) fn new(from: i64, events: &[LoggedEvent], subscription: &Subscription) -> Self {
        let entries = events
            .iter()
            .filter_map(|event| entry_of(event, subscription))
            .collect();
        LogTurn {
            from,
            through: events.last().map_or(from, |e| e.event_id),
            entries,
        }
    }

    /// The indexes of the entries each of `streams` streams sends, in
    /// order; all of a task's in one.
    pub(super) fn lanes(&self, streams: usize) -> Vec<Vec<usize>> {
        let streams = streams.max(1);
        let mut lanes = vec![Vec::new(); streams];
        for (i, e) in self.entries.iter().enumerate() {
            lanes[lane_of(&e.task_key, streams)].push(i);
        }
        lanes.retain(|l| !l.is_empty());
        lanes
    }

    /// What the turn leaves: the cursor moved through it, and the rows of
    /// the entries that wait (each entry's fate by its index).
    pub(super) fn settled(&self, mut fates: Vec<(usize, NewRow)>) -> Turn {
        fates.sort_by_key(|(i, _)| *i);
        Turn::Log {
            from: self.from,
            through: self.through,
            rows: fates.into_iter().map(|(_, row)| row).collect(),
        }
    }
}

fn entry_of(event: &LoggedEvent, subscription: &Subscription) -> Option<Entry> {
    let mut made = EventSet::default();
    event.types().for_each(|t| made.insert(t));
    let types = subscription.takes(made);
    (!types.is_empty()).then(|| Entry::logged(event, types))
}

/// A turn at an endpoint's log as planned, and what it took.
pub(super) struct Planned {
    pub stream: Stream,
    pub turn: LogTurn,
    pub taken: Taken,
}

/// A turn's endpoint, and until when it may send (PostgreSQL).
pub(super) struct Stream {
    pub org: OrgId,
    pub webhook: WebhookId,
    pub target: Target,
    pub deadline: Option<i64>,
}

/// Which of `streams` streams a task's entries go to: all of them to one,
/// so they stay in order. Hashed without a per-process seed, so it is the
/// same on every node and every run.
fn lane_of(task_key: &str, streams: usize) -> usize {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    task_key.hash(&mut h);
    (h.finish() % streams as u64) as usize
}

/// What one stream of a turn did: each of its entries' place and the row
/// it becomes (those delivered become none), the attempts, and whether the
/// endpoint is to get nothing more.
#[derive(Default)]
pub(super) struct Lane {
    pub rows: Vec<(usize, NewRow)>,
    pub log: Vec<DeliveryRecord>,
    pub disable: bool,
}

/// Keeps the newest `kept` attempts of a turn: all the log shows.
pub(super) fn newest(mut log: Vec<DeliveryRecord>, kept: usize) -> Vec<DeliveryRecord> {
    if log.len() > kept {
        log.sort_by(|a, b| (b.at, &b.delivery_id).cmp(&(a.at, &a.delivery_id)));
        log.truncate(kept);
    }
    log
}

impl Worker {
    /// One stream of a turn: its entries one after another. An entry of a
    /// task with a row waiting (`waiting`), after one of its task that
    /// failed, or after the stream ran out of time (its deadline, on the
    /// engine's clock: a PostgreSQL hold) is not sent but becomes a row.
    pub(super) async fn deliver_lane(
        &self,
        stream: &Stream,
        turn: &LogTurn,
        lane: Vec<usize>,
        waiting: &HashSet<String>,
    ) -> Lane {
        let mut out = Lane::default();
        let mut failed: HashSet<&str> = HashSet::new();
        let mut stop = false;
        for index in lane {
            let entry = &turn.entries[index];
            let now = self.engine.now();
            stop |= stream.deadline.is_some_and(|d| now > d);
            if stop || waiting.contains(&entry.task_key) || failed.contains(entry.task_key.as_str())
            {
                out.rows.push((index, entry.clone().into_row(now)));
                continue;
            }
            let Delivered {
                after,
                log,
                disable,
            } = self
                .deliver(stream.org, stream.webhook, &stream.target, entry)
                .await;
            out.log.extend(log);
            stop |= disable;
            out.disable |= disable;
            if let AfterAttempt::Retry { sent, attempts, at } = after {
                failed.insert(&entry.task_key);
                let retried = Entry {
                    sent: usize::try_from(sent).unwrap_or(0),
                    attempts,
                    ..entry.clone()
                };
                out.rows.push((index, retried.into_row(at)));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::webhooks::{EventType, Transition};
    use crate::domain::{TaskId, TaskStatus};

    /// A task's id, the same for the same name.
    fn task_id(name: &str) -> TaskId {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        name.hash(&mut h);
        TaskId(uuid::Uuid::from_u64_pair(h.finish(), 0))
    }

    fn event(event_id: i64, task: &str, from: Option<&str>, to: &str) -> LoggedEvent {
        let status = |s: &str| TaskStatus::parse(s).unwrap();
        LoggedEvent {
            event_id,
            task_id: task_id(task),
            transition: Transition {
                from_status: from.map(status),
                to_status: status(to),
                agent_id: "bot".into(),
            },
            at: event_id,
            lease_expired: false,
        }
    }

    fn subscribed(names: &[&str]) -> Subscription {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        Subscription::parse(&names).unwrap()
    }

    #[test]
    fn a_turn_takes_the_types_the_endpoint_subscribed_to_and_passes_over_the_rest() {
        let events = [
            event(5, "a", None, "pending"),
            event(6, "a", Some("pending"), "in_progress"),
            event(7, "b", None, "pending"),
            event(9, "a", Some("in_progress"), "completed"),
        ];
        let turn = LogTurn::new(4, &events, &subscribed(&["task.completed", "task.claimed"]));
        assert_eq!((turn.from, turn.through), (4, 9));
        let taken: Vec<(&str, String)> = turn
            .entries
            .iter()
            .map(|e| (e.event_id.as_str(), e.types.text()))
            .collect();
        assert_eq!(
            taken,
            [
                ("evt_6", "task.claimed".to_owned()),
                ("evt_9", "task.completed".to_owned())
            ]
        );
        // Everything: a claim is two types, cause first.
        let all = LogTurn::new(4, &events, &subscribed(&["*"]));
        assert_eq!(all.entries.len(), 4);
        assert_eq!(
            all.entries[1].types.text(),
            "task.claimed task.status_changed"
        );
        // Nothing read: the cursor stays.
        assert_eq!(LogTurn::new(4, &[], &subscribed(&["*"])).through, 4);
    }

    #[test]
    fn a_lease_s_expiry_reads_as_one_from_the_log() {
        let expired = LoggedEvent {
            lease_expired: true,
            ..event(3, "a", Some("in_progress"), "pending")
        };
        let turn = LogTurn::new(0, &[expired], &subscribed(&["task.lease_expired"]));
        let types: Vec<EventType> = turn.entries[0].types.iter().collect();
        assert_eq!(types, [EventType::LeaseExpired]);
    }

    #[test]
    fn a_task_s_entries_all_go_to_one_stream_and_tasks_spread_over_them() {
        let events: Vec<LoggedEvent> = (0..64)
            .flat_map(|i| {
                let task = format!("task-{i}");
                [
                    event(2 * i, &task, None, "pending"),
                    event(2 * i + 1, &task, Some("pending"), "in_progress"),
                ]
            })
            .collect();
        let turn = LogTurn::new(-1, &events, &subscribed(&["*"]));
        let lanes = turn.lanes(8);
        assert!(
            lanes.len() > 4,
            "64 tasks over 8 streams used {}",
            lanes.len()
        );
        for lane in &lanes {
            // In order within a stream, and no task in two streams.
            assert!(lane.windows(2).all(|w| w[0] < w[1]));
            for i in lane {
                let task = &turn.entries[*i].task_key;
                assert!(lanes
                    .iter()
                    .filter(|other| !std::ptr::eq(*other, lane))
                    .all(|other| other.iter().all(|j| &turn.entries[*j].task_key != task)));
            }
        }
        assert_eq!(lanes.iter().map(Vec::len).sum::<usize>(), 128);
        assert_eq!(turn.lanes(1), [Vec::from_iter(0..128)]);
    }

    #[test]
    fn the_turn_settles_its_rows_in_the_log_s_order_and_moves_the_cursor_through_it() {
        let events = [
            event(10, "a", None, "pending"),
            event(11, "b", None, "pending"),
        ];
        let turn = LogTurn::new(9, &events, &subscribed(&["*"]));
        let row = |i: usize| (i, turn.entries[i].clone().into_row(0));
        let Turn::Log {
            from,
            through,
            rows,
        } = turn.settled(vec![row(1), row(0)])
        else {
            panic!("a log turn settles as one");
        };
        assert_eq!((from, through), (9, 11));
        let ids: Vec<&str> = rows.iter().map(|r| r.event_id.as_str()).collect();
        assert_eq!(ids, ["evt_10", "evt_11"]);
    }

    #[test]
    fn a_turn_keeps_its_newest_attempts() {
        let record = |at: i64| DeliveryRecord {
            delivery_id: format!("d{at:03}"),
            event_id: "evt".into(),
            event_type: "task.created".into(),
            attempt: 1,
            status_code: Some(200),
            error: None,
            response: None,
            at,
            next_attempt_at: None,
        };
        let kept = newest((0..150).map(record).collect(), 100);
        assert_eq!(kept.len(), 100);
        assert_eq!(kept.first().map(|r| r.at), Some(149));
        assert_eq!(kept.last().map(|r| r.at), Some(50));
        assert_eq!(newest(vec![record(1)], 100).len(), 1);
    }
}
