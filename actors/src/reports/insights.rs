//! Insights: an org's flow over the last thirty days, computed from task
//! histories alone, so the same histories always give the same report.
//! An org younger than that has no history before its creation: its window
//! is the days it has existed (`window_days`), and its daily figures are
//! averaged over those, not over thirty days of which most never were.
//!
//! Every figure is defined here precisely, because docs/guide/reports.md quotes these
//! definitions and an operator reading a report must be able to check it:
//!
//! - A task's cycle time runs from its first move to `in_progress` (or its
//!   creation, if it never was in progress) to its completion.
//! - A task is stuck when it has been in progress, since it last moved
//!   there, for longer than three times the org's median cycle time (at
//!   least an hour; a day while nothing completed in the window).
//! - A task returns to pending when a lease expires or a claim is given
//!   back; an open task that did so twice or more is churning.
//! - A task was retried when a failure sent it back to wait under its
//!   retry policy; `throughput.retried` counts those changed in the window.
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
pub const WINDOW_DAYS: u32 = crate::api::INSIGHTS_WINDOW_DAYS;
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

/// The days of the window ending at `now` that an org created at
/// `org_created_at` has existed: each day begun counts, at least 1 and at
/// most [`WINDOW_DAYS`].
pub fn window_days(org_created_at: i64, now: i64) -> u32 {
    let existed = (now - org_created_at).max(0);
    let begun = (existed + DAY_MS - 1) / DAY_MS;
    u32::try_from(begun).map_or(WINDOW_DAYS, |days| days.clamp(1, WINDOW_DAYS))
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

/// Milliseconds as hours, to four decimals (0.36 s), so that cycles of
/// seconds still read as what they were.
fn hours(ms: f64) -> f64 {
    round_to(ms / HOUR_MS as f64, 4)
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

/// The tasks completed and failed in the window, and those completed per
/// day of its `days` (see [`window_days`]).
pub fn throughput(tasks: &[TaskHistory], now: i64, days: u32) -> Throughput {
    let count = |status| {
        tasks
            .iter()
            .filter(|t| finished_in_window(t, &[status], now).is_some())
            .count() as u64
    };
    let completed = count(TaskStatus::Completed);
    let start = now - i64::from(WINDOW_DAYS) * DAY_MS;
    Throughput {
        completed,
        failed: count(TaskStatus::Failed),
        retried: tasks
            .iter()
            .filter(|t| t.retries > 0 && t.updated_at >= start)
            .count() as u64,
        per_day: round_to(completed as f64 / f64::from(days.max(1)), 2),
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

/// The insights report for the window ending at `now` of an org created
/// at `org_created_at`. Failure clusters are computed separately, so they
/// are left out.
pub fn insights(tasks: &[TaskHistory], now: i64, org_created_at: i64) -> Insights {
    let threshold = stuck_threshold_ms(median_cycle_ms(tasks, now));
    let days = window_days(org_created_at, now);
    Insights {
        available: true,
        computed_at: Timestamp(now),
        window_days: days,
        stuck: stuck(tasks, now, threshold),
        churning: churning(tasks),
        throughput: throughput(tasks, now, days),
        cycle_times: cycle_times(tasks, now),
        failure_rates: failure_rates(tasks, now),
        agents: agents(tasks, now),
        failure_clusters: None,
    }
}

#[cfg(test)]
mod tests;
