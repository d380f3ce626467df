//! Insights: an org's flow over the last thirty days, computed from task
//! histories alone, so the same histories always give the same report.
//!
//! Every figure is defined here precisely, because the README quotes these
//! definitions and an operator reading a report must be able to check it:
//!
//! - A task's cycle time runs from its first move to `in_progress` (or its
//!   creation, if it never was in progress) to its completion.
//! - A task is stuck when it has been in progress, since it last moved
//!   there, for longer than three times the org's median cycle time (at
//!   least an hour; a day while nothing completed in the window).
//! - A task returns to pending when a lease expires or a claim is given
//!   back; an open task that did so twice or more is churning.
//! - Work is credited to the agent that last moved the task to
//!   `in_progress`, not to whoever closed it: a task failed by `system`
//!   after its last lease expired belongs to that lease's holder.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use crate::api::{
    AgentStats, CycleTimes, FailureRate, Insights, Signal, Throughput, Timestamp, SIGNAL_TOP,
};
use crate::domain::history::TaskHistory;
use crate::domain::{TaskId, TaskStatus};

const HOUR_MS: i64 = 60 * 60 * 1000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// The window covers `[now - WINDOW_DAYS days, now]`.
pub const WINDOW_DAYS: u32 = 30;
/// A task is stuck past this many median cycle times.
pub const STUCK_FACTOR: i64 = 3;
/// The stuck threshold is never shorter than an hour.
pub const STUCK_FLOOR_MS: i64 = HOUR_MS;
/// The stuck threshold while no task completed in the window.
pub const STUCK_DEFAULT_MS: i64 = 24 * HOUR_MS;
/// An open task churns once it returned to pending this many times.
pub const CHURN_RETURNS: u32 = 2;
/// The most tags the failure rates list.
pub const FAILURE_RATES_TOP: usize = 20;
/// The most agents the report lists.
pub const AGENTS_TOP: usize = 50;

/// The agent of the engine's own moves; it is never credited with work.
const SYSTEM: &str = "system";

/// The first instant of the window ending at `now`.
pub fn window_start(now: i64) -> i64 {
    now - i64::from(WINDOW_DAYS) * DAY_MS
}

fn in_window(at: i64, now: i64) -> bool {
    window_start(now) <= at && at <= now
}

/// When the task finished, if it did in the window with one of `statuses`.
fn finished_in_window(task: &TaskHistory, statuses: &[TaskStatus], now: i64) -> Option<i64> {
    if !statuses.contains(&task.status) {
        return None;
    }
    task.finished_at().filter(|at| in_window(*at, now))
}

/// The cycle time of a completed task: from its first move to
/// `in_progress` (its creation, if it never was in progress) to its
/// completion. `None` for a task that is not completed.
pub fn cycle_ms(task: &TaskHistory) -> Option<i64> {
    if task.status != TaskStatus::Completed {
        return None;
    }
    let done = task.finished_at()?;
    let started = task
        .events
        .iter()
        .find(|e| e.to == TaskStatus::InProgress)
        .map_or(task.created_at, |e| e.at);
    Some(done - started)
}

/// The cycle times of the tasks completed in the window, shortest first.
fn window_cycles(tasks: &[TaskHistory], now: i64) -> Vec<i64> {
    let mut cycles: Vec<i64> = tasks
        .iter()
        .filter(|t| finished_in_window(t, &[TaskStatus::Completed], now).is_some())
        .filter_map(cycle_ms)
        .collect();
    cycles.sort_unstable();
    cycles
}

/// The nearest-rank `pct`th percentile of `sorted` (ascending): the value
/// at index `ceil(pct / 100 × n) - 1`.
fn nearest_rank(sorted: &[i64], pct: usize) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (pct * sorted.len()).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

fn round_to(x: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (x * scale).round() / scale
}

/// Milliseconds as hours, to two decimals.
fn hours(ms: f64) -> f64 {
    round_to(ms / HOUR_MS as f64, 2)
}

/// The median cycle time of the tasks completed in the window.
pub fn median_cycle_ms(tasks: &[TaskHistory], now: i64) -> Option<i64> {
    nearest_rank(&window_cycles(tasks, now), 50)
}

/// How long a task may stay in progress before it counts as stuck:
/// `max(3 × median, 1 hour)`, or a day when there is no median.
pub fn stuck_threshold_ms(median: Option<i64>) -> i64 {
    match median {
        Some(m) => m.saturating_mul(STUCK_FACTOR).max(STUCK_FLOOR_MS),
        None => STUCK_DEFAULT_MS,
    }
}

/// The first `SIGNAL_TOP` of `ids` (already in order), and how many there are.
fn signal(mut ids: Vec<TaskId>) -> Signal {
    let count = ids.len() as u64;
    ids.truncate(SIGNAL_TOP);
    Signal {
        task_ids: ids,
        count,
    }
}

/// The tasks in progress for longer than `threshold_ms` since they last
/// moved there (since their last update, if no move shows), longest first.
pub fn stuck(tasks: &[TaskHistory], now: i64, threshold_ms: i64) -> Signal {
    let mut found: Vec<(i64, TaskId)> = tasks
        .iter()
        .filter(|t| t.status == TaskStatus::InProgress)
        .filter_map(|t| {
            let since = t
                .events
                .iter()
                .rev()
                .find(|e| e.to == TaskStatus::InProgress)
                .map_or(t.updated_at, |e| e.at);
            let stuck_for = now - since;
            (stuck_for > threshold_ms).then_some((stuck_for, t.task_id))
        })
        .collect();
    found.sort_unstable_by_key(|&(stuck_for, id)| (Reverse(stuck_for), id));
    signal(found.into_iter().map(|(_, id)| id).collect())
}

/// How many times the task went from `in_progress` back to `pending`: a
/// lease that expired, a claim given back.
pub fn returns(task: &TaskHistory) -> u32 {
    let n = task
        .events
        .iter()
        .filter(|e| e.from == Some(TaskStatus::InProgress) && e.to == TaskStatus::Pending)
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The open tasks with at least `CHURN_RETURNS` returns: most returns
/// first, then the oldest.
pub fn churning(tasks: &[TaskHistory]) -> Signal {
    let mut found: Vec<(u32, i64, TaskId)> = tasks
        .iter()
        .filter(|t| !t.status.is_terminal())
        .map(|t| (returns(t), t.created_at, t.task_id))
        .filter(|&(n, _, _)| n >= CHURN_RETURNS)
        .collect();
    found.sort_unstable_by_key(|&(n, created_at, id)| (Reverse(n), created_at, id));
    signal(found.into_iter().map(|(_, _, id)| id).collect())
}

/// The tasks completed and failed in the window.
pub fn throughput(tasks: &[TaskHistory], now: i64) -> Throughput {
    let count = |status| {
        tasks
            .iter()
            .filter(|t| finished_in_window(t, &[status], now).is_some())
            .count() as u64
    };
    let completed = count(TaskStatus::Completed);
    Throughput {
        completed,
        failed: count(TaskStatus::Failed),
        per_day: round_to(completed as f64 / f64::from(WINDOW_DAYS), 2),
    }
}

/// The cycle times of the tasks completed in the window, in hours.
pub fn cycle_times(tasks: &[TaskHistory], now: i64) -> CycleTimes {
    let cycles = window_cycles(tasks, now);
    let mean = (!cycles.is_empty())
        .then(|| cycles.iter().map(|&c| c as f64).sum::<f64>() / cycles.len() as f64);
    CycleTimes {
        count: cycles.len() as u64,
        p50_hours: nearest_rank(&cycles, 50).map(|ms| hours(ms as f64)),
        p90_hours: nearest_rank(&cycles, 90).map(|ms| hours(ms as f64)),
        mean_hours: mean.map(hours),
    }
}

/// Per tag, how many of the tasks completed or failed in the window failed
/// (canceled tasks do not count). Only tags with a failure, worst first:
/// by rate, then by failures, then by name.
pub fn failure_rates(tasks: &[TaskHistory], now: i64) -> Vec<FailureRate> {
    let mut by_tag: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let finished = [TaskStatus::Completed, TaskStatus::Failed];
    for task in tasks
        .iter()
        .filter(|t| finished_in_window(t, &finished, now).is_some())
    {
        let failed = u64::from(task.status == TaskStatus::Failed);
        let tags: BTreeSet<&str> = task.tags.iter().map(String::as_str).collect();
        for tag in tags {
            let (f, total) = by_tag.entry(tag).or_default();
            *f += failed;
            *total += 1;
        }
    }
    let mut rates: Vec<(&str, u64, u64)> = by_tag
        .into_iter()
        .filter(|&(_, (failed, _))| failed >= 1)
        .map(|(tag, (failed, total))| (tag, failed, total))
        .collect();
    // Rates compared as exact fractions: a/b > c/d when a·d > c·b.
    rates.sort_unstable_by(|&(tag_a, fa, ta), &(tag_b, fb, tb)| {
        (fb * ta)
            .cmp(&(fa * tb))
            .then(fb.cmp(&fa))
            .then(tag_a.cmp(tag_b))
    });
    rates.truncate(FAILURE_RATES_TOP);
    rates
        .into_iter()
        .map(|(tag, failed, total)| FailureRate {
            tag: tag.to_owned(),
            failed,
            total,
            rate: round_to(failed as f64 / total as f64, 3),
        })
        .collect()
}

/// Who worked a finished task: the agent that last moved it to
/// `in_progress` before it finished, else the one that finished it.
fn worker(task: &TaskHistory) -> Option<&str> {
    let end = task
        .events
        .iter()
        .rposition(|e| e.to == task.status)
        .unwrap_or(task.events.len());
    task.events[..end]
        .iter()
        .rev()
        .find(|e| e.to == TaskStatus::InProgress)
        .or_else(|| task.events.get(end))
        .map(|e| e.agent.as_str())
}

#[derive(Default)]
struct Tally {
    claimed: u64,
    completed: u64,
    failed: u64,
    cycles: Vec<i64>,
}

/// What each agent (but `system`) did in the window: the claims it made
/// (moves from `pending` to `in_progress`) and the tasks it worked that
/// finished. Busiest first: by tasks finished, then claims, then name.
pub fn agents(tasks: &[TaskHistory], now: i64) -> Vec<AgentStats> {
    let mut by_agent: BTreeMap<&str, Tally> = BTreeMap::new();
    let finished = [TaskStatus::Completed, TaskStatus::Failed];
    for task in tasks {
        for e in &task.events {
            if e.from == Some(TaskStatus::Pending)
                && e.to == TaskStatus::InProgress
                && in_window(e.at, now)
                && e.agent != SYSTEM
            {
                by_agent.entry(&e.agent).or_default().claimed += 1;
            }
        }
        if finished_in_window(task, &finished, now).is_none() {
            continue;
        }
        let Some(agent) = worker(task).filter(|a| *a != SYSTEM) else {
            continue;
        };
        let tally = by_agent.entry(agent).or_default();
        if task.status == TaskStatus::Completed {
            tally.completed += 1;
            tally.cycles.extend(cycle_ms(task));
        } else {
            tally.failed += 1;
        }
    }
    let mut stats: Vec<AgentStats> = by_agent
        .into_iter()
        .map(|(agent, mut tally)| {
            tally.cycles.sort_unstable();
            AgentStats {
                agent_id: agent.to_owned(),
                claimed: tally.claimed,
                completed: tally.completed,
                failed: tally.failed,
                median_cycle_hours: nearest_rank(&tally.cycles, 50).map(|ms| hours(ms as f64)),
            }
        })
        .collect();
    stats.sort_by(|a, b| {
        (b.completed + b.failed)
            .cmp(&(a.completed + a.failed))
            .then(b.claimed.cmp(&a.claimed))
            .then(a.agent_id.cmp(&b.agent_id))
    });
    stats.truncate(AGENTS_TOP);
    stats
}

/// The insights report for the window ending at `now`. Failure clusters
/// are computed separately, so they are left out.
pub fn insights(tasks: &[TaskHistory], now: i64) -> Insights {
    let threshold = stuck_threshold_ms(median_cycle_ms(tasks, now));
    Insights {
        available: true,
        computed_at: Timestamp(now),
        window_days: WINDOW_DAYS,
        stuck: stuck(tasks, now, threshold),
        churning: churning(tasks),
        throughput: throughput(tasks, now),
        cycle_times: cycle_times(tasks, now),
        failure_rates: failure_rates(tasks, now),
        agents: agents(tasks, now),
        failure_clusters: None,
    }
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;
    use crate::domain::history::StateChange;
    use crate::domain::TaskStatus::*;

    const H: i64 = HOUR_MS;
    const NOW: i64 = 20_000 * DAY_MS;

    fn id(n: u128) -> TaskId {
        TaskId(Uuid::from_u128(n))
    }

    /// A pending task created by `alice` at `created_at`.
    fn task(n: u128, created_at: i64) -> TaskHistory {
        TaskHistory {
            task_id: id(n),
            status: Pending,
            tags: Vec::new(),
            assignee: None,
            created_at,
            updated_at: created_at,
            events: vec![StateChange {
                from: None,
                to: Pending,
                agent: "alice".into(),
                at: created_at,
            }],
        }
    }

    trait Moves {
        fn to(self, to: TaskStatus, agent: &str, at: i64) -> Self;
        fn tagged(self, tags: &[&str]) -> Self;
    }

    impl Moves for TaskHistory {
        fn to(mut self, to: TaskStatus, agent: &str, at: i64) -> Self {
            self.events.push(StateChange {
                from: Some(self.status),
                to,
                agent: agent.into(),
                at,
            });
            self.status = to;
            self.updated_at = at;
            self
        }

        fn tagged(mut self, tags: &[&str]) -> Self {
            self.tags = tags.iter().map(|t| (*t).to_owned()).collect();
            self
        }
    }

    /// Created at `claimed_at - 1h`, claimed by `agent`, finished as
    /// `status` by the same agent at `done_at`.
    fn finished(n: u128, status: TaskStatus, claimed_at: i64, done_at: i64) -> TaskHistory {
        task(n, claimed_at - H)
            .to(InProgress, "bot", claimed_at)
            .to(status, "bot", done_at)
    }

    #[test]
    fn nearest_rank_takes_the_value_at_the_ceiling_rank() {
        assert_eq!(nearest_rank(&[], 50), None);
        assert_eq!(nearest_rank(&[7], 50), Some(7));
        assert_eq!(nearest_rank(&[7], 90), Some(7));
        assert_eq!(nearest_rank(&[1, 2, 3, 4], 50), Some(2));
        assert_eq!(nearest_rank(&[1, 2, 3, 4], 90), Some(4));
        let ten: Vec<i64> = (1..=10).collect();
        assert_eq!(nearest_rank(&ten, 90), Some(9));
        assert_eq!(nearest_rank(&ten, 50), Some(5));
    }

    #[test]
    fn cycle_times_run_from_the_first_claim_or_the_creation() {
        let tasks = vec![
            finished(1, Completed, NOW - 10 * H, NOW - 10 * H + 100 * 60_000),
            finished(2, Completed, NOW - 5 * H, NOW - 3 * H),
            // Claimed, given back, claimed again: the first claim counts.
            task(3, NOW - 20 * H)
                .to(InProgress, "bot", NOW - 8 * H)
                .to(Pending, "bot", NOW - 7 * H)
                .to(InProgress, "bot", NOW - 6 * H)
                .to(Completed, "bot", NOW - 5 * H),
            // Never in progress: from its creation.
            task(4, NOW - 4 * H).to(Completed, "carol@example.com", NOW),
            finished(5, Completed, NOW - 12 * H, NOW - 2 * H),
            // Not completed, or not in the window.
            finished(6, Failed, NOW - 50 * H, NOW - H),
            finished(7, Completed, NOW - 40 * DAY_MS, NOW - 31 * DAY_MS),
            task(8, NOW - 90 * H).to(InProgress, "bot", NOW - 80 * H),
        ];
        assert_eq!(cycle_ms(&tasks[2]), Some(3 * H));
        assert_eq!(cycle_ms(&tasks[3]), Some(4 * H));
        assert_eq!(cycle_ms(&tasks[5]), None);
        // 100 minutes, 2h, 3h, 4h, 10h.
        assert_eq!(
            cycle_times(&tasks, NOW),
            CycleTimes {
                count: 5,
                p50_hours: Some(3.0),
                p90_hours: Some(10.0),
                mean_hours: Some(4.13),
            }
        );
        assert_eq!(median_cycle_ms(&tasks, NOW), Some(3 * H));
        assert_eq!(cycle_times(&[], NOW), CycleTimes::default());
        assert_eq!(median_cycle_ms(&[], NOW), None);
    }

    #[test]
    fn the_stuck_threshold_is_three_medians_with_a_floor_and_a_default() {
        assert_eq!(stuck_threshold_ms(None), 24 * H);
        assert_eq!(stuck_threshold_ms(Some(10 * 60_000)), H);
        assert_eq!(stuck_threshold_ms(Some(20 * 60_000)), H);
        assert_eq!(stuck_threshold_ms(Some(2 * H)), 6 * H);
        assert_eq!(stuck_threshold_ms(Some(0)), H);
    }

    #[test]
    fn stuck_tasks_are_in_progress_past_the_threshold_longest_first() {
        let mut no_move = task(7, NOW - 30 * H);
        no_move.status = InProgress;
        no_move.updated_at = NOW - 7 * H;
        let tasks = vec![
            task(1, NOW - 20 * H).to(InProgress, "bot", NOW - 10 * H),
            task(2, NOW - 20 * H).to(InProgress, "bot", NOW - 8 * H),
            task(3, NOW - 20 * H).to(InProgress, "bot", NOW - 8 * H),
            // Exactly at the threshold: not past it.
            task(4, NOW - 20 * H).to(InProgress, "bot", NOW - 6 * H),
            // Its last claim is recent.
            task(5, NOW - 30 * H)
                .to(InProgress, "bot", NOW - 20 * H)
                .to(Pending, SYSTEM, NOW - 10 * H)
                .to(InProgress, "bot", NOW - 2 * H),
            // Waiting, not in progress.
            task(6, NOW - 30 * H),
            // No move to in progress recorded: since its last update.
            no_move,
            finished(8, Failed, NOW - 30 * H, NOW - 29 * H),
        ];
        let s = stuck(&tasks, NOW, 6 * H);
        assert_eq!(s.task_ids, vec![id(1), id(2), id(3), id(7)]);
        assert_eq!(s.count, 4);
    }

    #[test]
    fn a_signal_lists_the_top_twenty_and_counts_them_all() {
        let tasks: Vec<_> = (1..=25)
            .map(|n| task(n, NOW - 100 * H).to(InProgress, "bot", NOW - 30 * H - n as i64))
            .collect();
        let s = stuck(&tasks, NOW, 24 * H);
        assert_eq!(s.count, 25);
        assert_eq!(s.task_ids, (6..=25).rev().map(id).collect::<Vec<_>>());
    }

    /// A task claimed and returned to pending `n` times, left as `status`.
    fn returned(n: u128, created_at: i64, times: u32, status: TaskStatus) -> TaskHistory {
        let mut t = task(n, created_at);
        for i in 0..i64::from(times) {
            t = t.to(InProgress, "bot", created_at + 2 * i + 1).to(
                Pending,
                SYSTEM,
                created_at + 2 * i + 2,
            );
        }
        if status != Pending {
            t = t.to(InProgress, "bot", NOW - H).to(status, "bot", NOW);
        }
        t
    }

    #[test]
    fn churning_needs_two_returns_and_an_open_task() {
        let paused_twice = task(6, NOW - 50 * H)
            .to(InProgress, "bot", NOW - 40 * H)
            .to(Paused, "bob", NOW - 39 * H)
            .to(Pending, "bob", NOW - 38 * H)
            .to(InProgress, "bot", NOW - 37 * H)
            .to(Paused, "bob", NOW - 36 * H)
            .to(Pending, "bob", NOW - 35 * H);
        let tasks = vec![
            returned(1, NOW - 90 * H, 1, Pending),
            returned(2, NOW - 20 * H, 2, Pending),
            returned(3, NOW - 99 * H, 3, Completed),
            returned(4, NOW - 10 * H, 3, Pending).to(InProgress, "bot", NOW - H),
            returned(5, NOW - 30 * H, 2, Pending),
            paused_twice,
            returned(7, NOW - 20 * H, 2, Failed),
        ];
        assert_eq!(returns(&tasks[0]), 1);
        assert_eq!(returns(&tasks[2]), 3);
        assert_eq!(returns(&tasks[5]), 0);
        let s = churning(&tasks);
        assert_eq!(s.task_ids, vec![id(4), id(5), id(2)]);
        assert_eq!(s.count, 3);
    }

    #[test]
    fn throughput_and_failure_rates_count_what_finished_in_the_window() {
        let day = |n: i64| NOW - n * DAY_MS;
        let tasks = vec![
            finished(1, Failed, day(3), day(2)).tagged(&["deploy", "flaky"]),
            finished(2, Failed, day(3), day(2)).tagged(&["deploy"]),
            finished(3, Completed, day(3), day(2)).tagged(&["deploy"]),
            finished(4, Completed, day(3), day(2)).tagged(&["deploy", "deploy"]),
            finished(5, Failed, day(3), day(2)).tagged(&["flaky"]),
            finished(6, Completed, day(3), day(2)).tagged(&["flaky"]),
            finished(7, Failed, day(3), day(2)).tagged(&["db"]),
            finished(8, Completed, day(3), day(2)).tagged(&["db"]),
            finished(9, Failed, day(3), day(2)).tagged(&["auth"]),
            finished(10, Completed, day(3), day(2)).tagged(&["auth", "docs"]),
            finished(11, Failed, day(3), day(2)).tagged(&["ui"]),
            finished(12, Completed, day(3), day(2)).tagged(&["ui"]),
            finished(13, Completed, day(3), day(2)).tagged(&["ui"]),
            // Canceled, finished before the window, still open: left out.
            finished(14, Canceled, day(3), day(2)).tagged(&["deploy"]),
            finished(15, Failed, day(40), day(31)).tagged(&["deploy"]),
            task(16, day(3)).tagged(&["deploy"]),
        ];
        assert_eq!(
            throughput(&tasks, NOW),
            Throughput {
                completed: 7,
                failed: 6,
                per_day: 0.23,
            }
        );
        let rate = |tag: &str, failed, total, rate| FailureRate {
            tag: tag.into(),
            failed,
            total,
            rate,
        };
        assert_eq!(
            failure_rates(&tasks, NOW),
            vec![
                rate("flaky", 2, 3, 0.667),
                rate("deploy", 2, 4, 0.5),
                rate("auth", 1, 2, 0.5),
                rate("db", 1, 2, 0.5),
                rate("ui", 1, 3, 0.333),
            ]
        );
    }

    #[test]
    fn failure_rates_list_at_most_twenty_tags() {
        let tasks: Vec<_> = (0..25u128)
            .map(|n| {
                finished(n, Failed, NOW - 2 * H, NOW - H).tagged(&[format!("t{n:02}").as_str()])
            })
            .collect();
        let rates = failure_rates(&tasks, NOW);
        assert_eq!(rates.len(), 20);
        assert_eq!(rates[0].tag, "t00");
        assert_eq!(rates[19].tag, "t19");
    }

    #[test]
    fn the_window_holds_both_its_edges() {
        let start = window_start(NOW);
        assert_eq!(start, NOW - 30 * DAY_MS);
        let tasks = vec![
            finished(1, Completed, start - 2 * H, start),
            finished(2, Completed, start - 2 * H, start - 1),
            finished(3, Completed, NOW - 2 * H, NOW),
            finished(4, Failed, start - 2 * H, start).tagged(&["x"]),
            finished(5, Failed, start - 2 * H, start - 1).tagged(&["x"]),
        ];
        assert_eq!(
            throughput(&tasks, NOW),
            Throughput {
                completed: 2,
                failed: 1,
                per_day: 0.07,
            }
        );
        assert_eq!(cycle_times(&tasks, NOW).count, 2);
        assert_eq!(failure_rates(&tasks, NOW)[0].total, 1);
        // A claim at the window's start counts; one just before does not.
        let claims = vec![
            task(6, start - H).to(InProgress, "bot-a", start),
            task(7, start - H).to(InProgress, "bot-a", start - 1),
        ];
        assert_eq!(agents(&claims, NOW)[0].claimed, 1);
    }

    #[test]
    fn agents_are_credited_with_their_claims_and_the_work_they_finished() {
        let tasks = vec![
            task(1, NOW - 10 * H)
                .to(InProgress, "bot-a", NOW - 9 * H)
                .to(Completed, "bot-a", NOW - 7 * H),
            // Its leases expired twice; `system` failed it, after bot-b's.
            task(2, NOW - 20 * H)
                .to(InProgress, "bot-a", NOW - 10 * H)
                .to(Pending, SYSTEM, NOW - 9 * H)
                .to(InProgress, "bot-b", NOW - 5 * H)
                .to(Failed, SYSTEM, NOW - 4 * H),
            // Never in progress: whoever finished it did the work.
            task(3, NOW - 90 * 60_000).to(Completed, "carol@example.com", NOW),
            task(4, NOW - 10 * H)
                .to(InProgress, "bot-b", NOW - 8 * H)
                .to(Completed, "bot-b", NOW - 4 * H),
            // Claimed before the window, completed in it.
            task(5, NOW - 32 * DAY_MS)
                .to(InProgress, "bot-b", NOW - 31 * DAY_MS)
                .to(Completed, "bot-b", NOW - DAY_MS),
            task(6, NOW - 10 * H).to(InProgress, "bot-c", NOW - 9 * H),
            // Back from feedback: a move to in progress, not a claim.
            task(7, NOW - 10 * H)
                .to(InProgress, "bot-c", NOW - 6 * H)
                .to(Feedback, "bot-c", NOW - 5 * H)
                .to(InProgress, "alice", NOW - 4 * H)
                .to(Completed, "alice", NOW - 3 * H),
            task(8, NOW - 10 * H).to(Blocked, SYSTEM, NOW - 9 * H).to(
                Canceled,
                SYSTEM,
                NOW - 8 * H,
            ),
            // Unblocked by `system` and completed by it: credited to nobody.
            task(9, NOW - 10 * H).to(Completed, SYSTEM, NOW - 8 * H),
        ];
        let stats = |agent: &str, claimed, completed, failed, median| AgentStats {
            agent_id: agent.into(),
            claimed,
            completed,
            failed,
            median_cycle_hours: median,
        };
        assert_eq!(
            agents(&tasks, NOW),
            vec![
                stats("bot-b", 2, 2, 1, Some(4.0)),
                stats("bot-a", 2, 1, 0, Some(2.0)),
                stats("alice", 0, 1, 0, Some(3.0)),
                stats("carol@example.com", 0, 1, 0, Some(1.5)),
                stats("bot-c", 2, 0, 0, None),
            ]
        );
    }

    #[test]
    fn insights_use_the_median_for_the_stuck_threshold() {
        let tasks = vec![
            finished(1, Completed, NOW - 5 * H, NOW - 4 * H).tagged(&["ops"]),
            finished(2, Failed, NOW - 5 * H, NOW - 4 * H).tagged(&["ops"]),
            // Three medians are three hours: four hours in progress is stuck.
            task(3, NOW - 5 * H).to(InProgress, "bot", NOW - 4 * H),
        ];
        let report = insights(&tasks, NOW);
        assert!(report.available);
        assert_eq!(report.computed_at, Timestamp(NOW));
        assert_eq!(report.window_days, 30);
        assert_eq!(
            report.stuck,
            Signal {
                task_ids: vec![id(3)],
                count: 1,
            }
        );
        assert_eq!(report.churning, Signal::default());
        assert_eq!(report.throughput.completed, 1);
        assert_eq!(report.cycle_times.p50_hours, Some(1.0));
        assert_eq!(report.failure_rates[0].rate, 0.5);
        assert_eq!(report.agents[0].claimed, 3);
        assert_eq!(report.failure_clusters, None);
        // Without the completed task there is no median: a day's threshold.
        assert_eq!(insights(&tasks[1..], NOW).stuck.count, 0);
    }
}
