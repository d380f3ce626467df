//! The insights' figures and rules, on histories built by hand.

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
        retries: 0,
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
    fn retried(self, retries: u8) -> Self;
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

    fn retried(mut self, retries: u8) -> Self {
        self.retries = retries;
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
            mean_hours: Some(4.1333),
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
        finished(9, Failed, day(3), day(2))
            .tagged(&["auth"])
            .retried(3),
        finished(10, Completed, day(3), day(2)).tagged(&["auth", "docs"]),
        finished(11, Failed, day(3), day(2)).tagged(&["ui"]),
        finished(12, Completed, day(3), day(2)).tagged(&["ui"]),
        finished(13, Completed, day(3), day(2)).tagged(&["ui"]),
        // Canceled, finished before the window, still open: left out.
        finished(14, Canceled, day(3), day(2)).tagged(&["deploy"]),
        // Retried, but before the window.
        finished(15, Failed, day(40), day(31))
            .tagged(&["deploy"])
            .retried(1),
        task(16, day(3)).tagged(&["deploy"]),
    ];
    assert_eq!(
        throughput(&tasks, NOW, WINDOW_DAYS),
        Throughput {
            completed: 7,
            failed: 6,
            retried: 1,
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
        .map(|n| finished(n, Failed, NOW - 2 * H, NOW - H).tagged(&[format!("t{n:02}").as_str()]))
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
        throughput(&tasks, NOW, WINDOW_DAYS),
        Throughput {
            completed: 2,
            failed: 1,
            retried: 0,
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
        task(8, NOW - 10 * H)
            .to(Blocked, SYSTEM, NOW - 9 * H)
            .to(Canceled, SYSTEM, NOW - 8 * H),
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
    let report = insights(&tasks, NOW, NOW - 40 * DAY_MS);
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
    assert_eq!(insights(&tasks[1..], NOW, 0).stuck.count, 0);
}

#[test]
fn a_young_orgs_window_is_the_days_it_has_existed() {
    assert_eq!(window_days(NOW - 3 * H, NOW), 1);
    assert_eq!(window_days(NOW, NOW), 1);
    assert_eq!(window_days(NOW + H, NOW), 1, "a clock behind the store's");
    assert_eq!(window_days(NOW - DAY_MS, NOW), 1);
    assert_eq!(window_days(NOW - DAY_MS - 1, NOW), 2);
    assert_eq!(window_days(NOW - 30 * DAY_MS, NOW), 30);
    assert_eq!(window_days(NOW - 400 * DAY_MS, NOW), WINDOW_DAYS);
    assert_eq!(window_days(i64::MIN / 2, NOW), WINDOW_DAYS);
}

#[test]
fn a_young_orgs_completions_are_averaged_over_its_days_not_thirty() {
    // Created 30 hours ago: its second day. Seven completed.
    let created = NOW - 30 * H;
    let tasks: Vec<_> = (0..7u128)
        .map(|n| finished(n, Completed, created + H, NOW - H))
        .collect();
    let report = insights(&tasks, NOW, created);
    assert_eq!(report.window_days, 2);
    assert_eq!(report.throughput.completed, 7);
    assert_eq!(report.throughput.per_day, 3.5);
    // An org older than the window: thirty days, as before.
    let report = insights(&tasks, NOW, NOW - 90 * DAY_MS);
    assert_eq!(report.window_days, 30);
    assert_eq!(report.throughput.per_day, 0.23);
}

#[test]
fn cycles_of_seconds_keep_their_seconds() {
    // Twenty seconds: 0.0056 hours, not 0.0.
    let tasks = vec![finished(1, Completed, NOW - 20_000, NOW)];
    let cycles = cycle_times(&tasks, NOW);
    assert_eq!(cycles.p50_hours, Some(0.0056));
    assert_eq!(cycles.mean_hours, Some(0.0056));
}
