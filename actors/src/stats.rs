//! What the engine counts for its operator: each org's open tasks and
//! leases as its actor last published them, the writers' commits, and the
//! requests refused by a limit.
//!
//! Each piece has one writer. An org's snapshot is written only by its
//! actor (after every message, and skipped when its open tasks did not
//! change), so it stays true while the actor is stopped for idleness: every
//! change of the org passes through the actor. Writer figures are written by
//! the writer tasks once per commit; refusals by the engine once per refused
//! request. Readers (`Engine::operator_stats`) copy them; nothing here
//! reads the store.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use dashmap::DashMap;

use crate::domain::open::{OpenTasks, StatusCounts};
use crate::domain::OrgId;

/// How many of an org's earliest lease expiries a snapshot carries. Leases
/// expiring within a window are counted from these, exactly up to this many.
pub const EXPIRY_SAMPLE: usize = 64;

/// One org's open tasks, as its actor last published them.
#[derive(Debug, Clone, Default)]
pub struct OrgSnapshot {
    pub counts: StatusCounts,
    pub leases: usize,
    /// The earliest lease expiries (ms), at most `EXPIRY_SAMPLE`, earliest
    /// first.
    pub earliest_expiries: Vec<i64>,
    /// Claims waiting for a task (long polls).
    pub waiting_claims: usize,
    /// Waits for tasks to finish (`POST /tasks/wait`).
    pub task_waits: usize,
    /// Whether something of the org must happen at a time (a lease to
    /// expire, a waiting task to release, a schedule to tick).
    pub needs_timer: bool,
    /// `OpenTasks::version` when taken.
    version: u64,
}

impl OrgSnapshot {
    /// Leases expiring at or before `deadline_ms`, and whether that is exact
    /// (false: at least that many, the sample ran out).
    pub fn leases_expiring_by(&self, deadline_ms: i64) -> (usize, bool) {
        let n = self
            .earliest_expiries
            .iter()
            .take_while(|at| **at <= deadline_ms)
            .count();
        let exact = n < self.earliest_expiries.len() || self.leases == n;
        (n, exact)
    }
}

/// Every published org snapshot; written by the org actors.
#[derive(Debug, Default)]
pub struct OrgSnapshots {
    by_org: DashMap<OrgId, OrgSnapshot>,
}

impl OrgSnapshots {
    /// Records `open` as the org's state, unless nothing changed since the
    /// last time. Reuses the snapshot's buffer: no allocation once it is big
    /// enough.
    pub fn publish(
        &self,
        org: OrgId,
        open: &OpenTasks,
        (waiting_claims, task_waits): (usize, usize),
        needs_timer: bool,
    ) {
        if self.by_org.get(&org).is_some_and(|s| {
            s.version == open.version()
                && s.waiting_claims == waiting_claims
                && s.task_waits == task_waits
                && s.needs_timer == needs_timer
        }) {
            return;
        }
        let mut snapshot = self.by_org.entry(org).or_default();
        snapshot.waiting_claims = waiting_claims;
        snapshot.task_waits = task_waits;
        snapshot.needs_timer = needs_timer;
        snapshot.version = open.version();
        snapshot.counts = open.counts();
        snapshot.leases = open.lease_count();
        snapshot.earliest_expiries.clear();
        snapshot
            .earliest_expiries
            .extend(open.lease_expiries().take(EXPIRY_SAMPLE));
    }

    /// Whether the org needs an actor running for something due at a time,
    /// as its actor last published.
    pub fn needs_timer(&self, org: OrgId) -> bool {
        self.by_org.get(&org).is_some_and(|s| s.needs_timer)
    }

    /// Claims waiting for a task, over all orgs.
    pub fn waiting_claims(&self) -> usize {
        self.by_org.iter().map(|e| e.value().waiting_claims).sum()
    }

    /// Waits for tasks to finish, over all orgs.
    pub fn task_waits(&self) -> usize {
        self.by_org.iter().map(|e| e.value().task_waits).sum()
    }

    /// The org's open-task version as its actor last published it (the
    /// board's change mark).
    pub fn version(&self, org: OrgId) -> Option<u64> {
        self.by_org.get(&org).map(|s| s.version)
    }

    /// The org's open tasks per status.
    pub fn counts(&self, org: OrgId) -> Option<StatusCounts> {
        self.by_org.get(&org).map(|s| s.counts)
    }

    /// Pending tasks per org.
    pub fn queue_depths(&self) -> Vec<(OrgId, usize)> {
        self.by_org
            .iter()
            .map(|e| (*e.key(), e.value().counts.pending))
            .collect()
    }

    /// A copy of every snapshot.
    pub fn all(&self) -> Vec<(OrgId, OrgSnapshot)> {
        self.by_org
            .iter()
            .map(|e| (*e.key(), e.value().clone()))
            .collect()
    }
}

/// How many recent commits the writer figures are taken over.
pub const COMMIT_WINDOW: usize = 256;

/// One group commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitSample {
    pub batches: u32,
    /// Write operations (rows) in those batches.
    pub rows: u32,
    pub micros: u64,
}

/// What the writers committed since the server started, all lanes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterTotals {
    pub commits: u64,
    pub batches: u64,
    pub rows: u64,
    /// Transactions that failed.
    pub failed: u64,
    /// Time spent in the committed transactions.
    pub commit_micros: u64,
}

/// The writers' commits: totals, and the most recent ones.
#[derive(Debug, Default)]
pub struct WriterStats {
    commits: AtomicU64,
    batches: AtomicU64,
    rows: AtomicU64,
    failed: AtomicU64,
    commit_micros: AtomicU64,
    recent: Mutex<VecDeque<CommitSample>>,
}

impl WriterStats {
    /// Records one transaction of `batches` batches carrying `rows` rows
    /// that took `elapsed`, committed or not. Once per commit.
    pub fn record(&self, batches: usize, rows: usize, elapsed: Duration, committed: bool) {
        let sample = CommitSample {
            batches: u32::try_from(batches).unwrap_or(u32::MAX),
            rows: u32::try_from(rows).unwrap_or(u32::MAX),
            micros: u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
        };
        if committed {
            self.commits.fetch_add(1, Ordering::Relaxed);
            self.batches.fetch_add(batches as u64, Ordering::Relaxed);
            self.rows.fetch_add(rows as u64, Ordering::Relaxed);
            self.commit_micros
                .fetch_add(sample.micros, Ordering::Relaxed);
        } else {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() == COMMIT_WINDOW {
            recent.pop_front();
        }
        recent.push_back(sample);
    }

    /// What was committed so far, and the failed transactions.
    pub fn totals(&self) -> WriterTotals {
        WriterTotals {
            commits: self.commits.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            rows: self.rows.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            commit_micros: self.commit_micros.load(Ordering::Relaxed),
        }
    }

    /// The most recent commits, oldest first.
    pub fn recent(&self) -> Vec<CommitSample> {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.iter().copied().collect()
    }
}

/// Requests refused by one of an org's limits (answered 429).
#[derive(Debug, Default)]
pub struct Refusals {
    total: AtomicU64,
    by_org: DashMap<OrgId, AtomicU64>,
}

impl Refusals {
    pub fn count(&self, org: OrgId) {
        self.total.fetch_add(1, Ordering::Relaxed);
        self.by_org
            .entry(org)
            .or_default()
            .fetch_add(1, Ordering::Relaxed);
    }

    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    pub fn of(&self, org: OrgId) -> u64 {
        self.by_org
            .get(&org)
            .map_or(0, |n| n.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{lease, TaskHeader, TaskId, TaskStatus};

    fn leased(now: i64, seconds: u32) -> TaskHeader {
        TaskHeader {
            task_id: TaskId::new_v7(),
            status: TaskStatus::InProgress,
            priority: 3,
            created_at: now,
            updated_at: now,
            assignee: None,
            tags: Vec::new(),
            blocked_by: Vec::new(),
            parent: None,
            lease: Some(lease::grant(now, seconds)),
            attempts: 0,
            max_attempts: lease::DEFAULT_MAX_ATTEMPTS,
            run_at: None,
            retry: None,
            retries: 0,
            scheduled: None,
        }
    }

    #[test]
    fn snapshots_count_leases_in_a_window() {
        let snapshots = OrgSnapshots::default();
        let org = OrgId::new_v7();
        let mut open = OpenTasks::default();
        open.put(leased(0, 30));
        open.put(leased(0, 300));
        snapshots.publish(org, &open, (0, 0), false);
        let (_, s) = snapshots.all().pop().unwrap();
        assert_eq!((s.counts.in_progress, s.leases), (2, 2));
        assert_eq!(s.leases_expiring_by(60_000), (1, true));
        assert_eq!(s.leases_expiring_by(600_000), (2, true));
        for _ in 0..EXPIRY_SAMPLE {
            open.put(leased(0, 10));
        }
        snapshots.publish(org, &open, (0, 0), false);
        let (_, s) = snapshots.all().pop().unwrap();
        assert_eq!(s.leases_expiring_by(60_000), (EXPIRY_SAMPLE, false));
        assert_eq!(snapshots.queue_depths(), [(org, 0)]);
    }

    #[test]
    fn the_commit_window_keeps_the_latest() {
        let stats = WriterStats::default();
        for i in 0..(COMMIT_WINDOW + 10) {
            stats.record(i, 2 * i, Duration::from_micros(i as u64), true);
        }
        let recent = stats.recent();
        assert_eq!(recent.len(), COMMIT_WINDOW);
        assert_eq!(recent[0].batches, 10);
        assert_eq!(stats.totals().commits, (COMMIT_WINDOW + 10) as u64);
    }

    #[test]
    fn totals_count_committed_transactions_only() {
        let stats = WriterStats::default();
        stats.record(3, 7, Duration::from_micros(250), true);
        stats.record(2, 4, Duration::from_micros(100), true);
        stats.record(5, 9, Duration::from_micros(900), false);
        assert_eq!(
            stats.totals(),
            WriterTotals {
                commits: 2,
                batches: 5,
                rows: 11,
                failed: 1,
                commit_micros: 350,
            }
        );
    }
}
