//! Standups: the figures of a period for an org or a team, a plain-text
//! body built from them, and the prompt that asks a language model to word
//! them better.
//!
//! The figures never come from the model: it only words them. When it
//! gives no answer the template body stands in, so a standup is always
//! written and always says the same numbers.

use std::collections::{BTreeMap, BTreeSet};

use super::insights;
use crate::api::{Delta, Headline};
use crate::domain::history::TaskHistory;
use crate::domain::period::Period;
use crate::domain::TaskStatus;
use crate::llm::ChatMessage;

/// The most titles per section of the template body.
pub const BODY_TITLES: usize = 10;
/// The most titles per section given to the model.
pub const PROMPT_TITLES: usize = 30;

/// Whose work a team standup covers: tasks carrying one of these tags or
/// assigned to one of these members.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TeamScope {
    pub tags: Vec<String>,
    pub emails: Vec<String>,
}

/// Whether `task` is the team's: it carries one of the team's tags, or its
/// assignee is one of the team's members (emails compared ignoring case).
pub fn in_team(task: &TaskHistory, team: &TeamScope) -> bool {
    task.tags.iter().any(|t| team.tags.contains(t))
        || task.assignee.as_deref().is_some_and(|assignee| {
            let assignee = assignee.to_lowercase();
            team.emails.iter().any(|e| e.to_lowercase() == assignee)
        })
}

/// The figures of `period` over `tasks` (already those of `scope`).
/// `previous` is the last report of the same scope and cadence, for the
/// deltas.
pub fn headline(
    tasks: &[TaskHistory],
    scope: &str,
    period: Period,
    now: i64,
    stuck_threshold_ms: i64,
    previous: Option<&Headline>,
) -> Headline {
    let (start, end) = period.bounds();
    let finished_in = |task: &&TaskHistory, status: TaskStatus| {
        task.status == status && task.finished_at().is_some_and(|at| start <= at && at < end)
    };
    let completed = tasks
        .iter()
        .filter(|t| finished_in(t, TaskStatus::Completed))
        .count() as u64;
    let failed: Vec<&TaskHistory> = tasks
        .iter()
        .filter(|t| finished_in(t, TaskStatus::Failed))
        .collect();
    let open_before = end.min(now);
    let open = tasks
        .iter()
        .filter(|t| !t.status.is_terminal() && t.created_at < open_before)
        .count() as u64;
    let stuck_count = insights::stuck(tasks, now, stuck_threshold_ms).count;
    let failed_count = failed.len() as u64;
    let delta = match previous {
        Some(p) => Delta {
            completed: Some(diff(completed, p.completed)),
            failed: Some(diff(failed_count, p.failed)),
            open: Some(diff(open, p.open)),
            stuck_count: Some(diff(stuck_count, p.stuck_count)),
        },
        None => Delta::default(),
    };
    Headline {
        period: period.to_string(),
        cadence: period.cadence(),
        scope: scope.to_owned(),
        completed,
        failed: failed_count,
        open,
        stuck_count,
        top_failure_tag: top_tag(&failed),
        delta,
    }
}

fn diff(this: u64, previous: u64) -> i64 {
    i64::try_from(this)
        .unwrap_or(i64::MAX)
        .saturating_sub(i64::try_from(previous).unwrap_or(i64::MAX))
}

/// The tag carried by the most of `tasks`, the first by name on a tie.
fn top_tag(tasks: &[&TaskHistory]) -> Option<String> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for task in tasks {
        let tags: BTreeSet<&str> = task.tags.iter().map(String::as_str).collect();
        for tag in tags {
            *counts.entry(tag).or_default() += 1;
        }
    }
    // `max_by_key` keeps the last of equal maxima; walking the names
    // backwards makes that the first by name.
    counts
        .into_iter()
        .rev()
        .max_by_key(|&(_, n)| n)
        .map(|(tag, _)| tag.to_owned())
}

/// A figure and, when there was a previous report, its change: `5 completed (+2)`.
fn figure(n: u64, what: &str, delta: Option<i64>) -> String {
    match delta {
        Some(d) => format!("{n} {what} ({d:+})"),
        None => format!("{n} {what}"),
    }
}

/// A title on one line, its runs of whitespace as single spaces.
fn one_line(title: &str) -> String {
    title.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `Heading:` and up to `max` titles, one per line; nothing without titles.
fn section(lines: &mut Vec<String>, heading: &str, titles: &[String], max: usize) {
    if titles.is_empty() {
        return;
    }
    lines.push(format!("{heading}:"));
    lines.extend(
        titles
            .iter()
            .take(max)
            .map(|t| format!("- {}", one_line(t))),
    );
    if titles.len() > max {
        lines.push(format!("- … and {} more", titles.len() - max));
    }
}

/// The headline's figures and the titles, as lines of plain text.
fn facts(h: &Headline, completed: &[String], failed: &[String], max: usize) -> Vec<String> {
    let d = &h.delta;
    let mut lines = vec![format!(
        "Standup for {}, {} ({}): {}, {}, {}, {}.",
        h.scope,
        h.period,
        h.cadence.as_str(),
        figure(h.completed, "completed", d.completed),
        figure(h.failed, "failed", d.failed),
        figure(h.open, "open", d.open),
        figure(h.stuck_count, "stuck", d.stuck_count),
    )];
    if let Some(tag) = &h.top_failure_tag {
        lines.push(format!("Most failures: {tag}."));
    }
    section(&mut lines, "Completed", completed, max);
    section(&mut lines, "Failed", failed, max);
    lines
}

/// A standup written without a language model: the figures (with their
/// changes since the previous report), the tag with the most failures,
/// and up to ten titles of the tasks completed and failed.
pub fn template_body(
    h: &Headline,
    completed_titles: &[String],
    failed_titles: &[String],
) -> String {
    facts(h, completed_titles, failed_titles, BODY_TITLES).join("\n")
}

/// The chat asking a language model to write the standup from the
/// headline and up to thirty titles of the tasks completed and failed.
pub fn standup_prompt(
    h: &Headline,
    completed_titles: &[String],
    failed_titles: &[String],
) -> Vec<ChatMessage> {
    let system = "You write a team's standup report from the facts you are given. \
        Write 3 to 6 sentences of plain text: no headings, no lists, no markdown. \
        Say what was completed, what failed and what is open or stuck, naming the \
        most telling tasks. Use only the facts given: do not invent tasks, people, \
        causes or numbers. A figure in parentheses is its change since the \
        previous report; \"Most failures\" names the tag carried by the most \
        failed tasks.";
    let user = format!(
        "Write the standup from these facts.\n\n{}",
        facts(h, completed_titles, failed_titles, PROMPT_TITLES).join("\n")
    );
    vec![ChatMessage::system(system), ChatMessage::user(user)]
}

#[cfg(test)]
mod tests {
    use chrono::NaiveDate;
    use uuid::Uuid;

    use super::*;
    use crate::api::Cadence;
    use crate::domain::history::StateChange;
    use crate::domain::TaskId;
    use crate::domain::TaskStatus::*;

    const H: i64 = 60 * 60 * 1000;

    fn at(s: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .timestamp_millis()
    }

    fn day(s: &str) -> Period {
        Period::Day(NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap())
    }

    /// A task created at `created_at`, then moved through `moves`.
    fn task(n: u128, tags: &[&str], created_at: i64, moves: &[(TaskStatus, i64)]) -> TaskHistory {
        let mut events = vec![StateChange {
            from: None,
            to: Pending,
            agent: "alice".into(),
            at: created_at,
        }];
        for &(to, at) in moves {
            events.push(StateChange {
                from: events.last().map(|e| e.to),
                to,
                agent: "bot".into(),
                at,
            });
        }
        let last = events.last().unwrap();
        TaskHistory {
            task_id: TaskId(Uuid::from_u128(n)),
            status: last.to,
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            assignee: None,
            created_at,
            updated_at: last.at,
            retries: 0,
            events,
        }
    }

    fn titles(names: &[&str]) -> Vec<String> {
        names.iter().map(|t| (*t).to_owned()).collect()
    }

    #[test]
    fn a_team_owns_tasks_by_tag_or_by_assignee() {
        let team = TeamScope {
            tags: titles(&["ops", "deploy"]),
            emails: titles(&["Dana@Example.com"]),
        };
        let mut t = task(1, &["ui", "deploy"], 0, &[]);
        assert!(in_team(&t, &team));
        t.tags = titles(&["ui", "Deploy"]);
        assert!(!in_team(&t, &team));
        t.assignee = Some("dana@example.COM".into());
        assert!(in_team(&t, &team));
        t.assignee = Some("dan@example.com".into());
        assert!(!in_team(&t, &team));
        assert!(!in_team(&t, &TeamScope::default()));
    }

    #[test]
    fn the_headline_counts_what_finished_in_the_period() {
        let period = day("2026-11-24");
        let (start, end) = period.bounds();
        let now = at("2026-11-26T12:00:00Z");
        let tasks = vec![
            task(
                1,
                &[],
                start - H,
                &[(InProgress, start - 1), (Completed, start)],
            ),
            task(2, &[], start - H, &[(Completed, end - 1)]),
            // Finished the next day, or the day before.
            task(3, &[], start - H, &[(Completed, end)]),
            task(4, &[], start - 2 * H, &[(Failed, start - 1)]),
            task(
                5,
                &["db"],
                start,
                &[(InProgress, start + H), (Failed, end - H)],
            ),
            // Open: created before the period ended.
            task(6, &[], start - H, &[]),
            task(7, &[], end - 1, &[(InProgress, end - 1)]),
            task(8, &[], end, &[]),
            task(9, &[], start, &[(Canceled, start + H)]),
        ];
        let h = headline(&tasks, "org", period, now, 24 * H, None);
        assert_eq!(
            h,
            Headline {
                period: "2026-11-24".into(),
                cadence: Cadence::Daily,
                scope: "org".into(),
                completed: 2,
                failed: 1,
                open: 2,
                stuck_count: 1,
                top_failure_tag: Some("db".into()),
                delta: Delta::default(),
            }
        );
        // While the period runs, open means created by now.
        let h = headline(&tasks, "org", period, start + H, 24 * H, None);
        assert_eq!(h.open, 1);
        assert_eq!(h.stuck_count, 0);
    }

    #[test]
    fn deltas_compare_with_the_previous_report() {
        let period = day("2026-11-24");
        let (start, _) = period.bounds();
        let tasks = vec![
            task(1, &[], start - H, &[(Completed, start + H)]),
            task(2, &[], start - H, &[(InProgress, start)]),
        ];
        let now = start + 2 * H;
        let first = headline(&tasks, "team:ops", period, now, H, None);
        assert_eq!(first.delta, Delta::default());
        let previous = Headline {
            completed: 3,
            failed: 2,
            open: 1,
            stuck_count: 1,
            ..first.clone()
        };
        let h = headline(&tasks, "team:ops", period, now, H, Some(&previous));
        assert_eq!((h.completed, h.failed, h.open, h.stuck_count), (1, 0, 1, 1));
        assert_eq!(
            h.delta,
            Delta {
                completed: Some(-2),
                failed: Some(-2),
                open: Some(0),
                stuck_count: Some(0),
            }
        );
        assert_eq!(h.scope, "team:ops");
    }

    #[test]
    fn the_top_failure_tag_is_the_most_failed_then_the_first_by_name() {
        let period = day("2026-11-24");
        let (start, end) = period.bounds();
        let failed = |n, tags: &[&str], at| task(n, tags, start - H, &[(Failed, at)]);
        let top =
            |tasks: &[TaskHistory]| headline(tasks, "org", period, end, H, None).top_failure_tag;
        let tasks = vec![
            failed(1, &["deploy", "db"], start + H),
            failed(2, &["db", "deploy", "db"], start + H),
            failed(3, &["ui"], start + H),
            // Outside the period, or completed: not counted.
            failed(4, &["ui"], start - 1),
            failed(5, &["ui"], end),
            task(6, &["ui"], start - H, &[(Completed, start + H)]),
        ];
        assert_eq!(top(&tasks), Some("db".into()));
        assert_eq!(top(&tasks[2..]), Some("ui".into()));
        assert_eq!(top(&tasks[3..]), None);
    }

    fn sample() -> Headline {
        Headline {
            period: "2026-11-24".into(),
            cadence: Cadence::Daily,
            scope: "org".into(),
            completed: 5,
            failed: 1,
            open: 12,
            stuck_count: 0,
            top_failure_tag: Some("deploy".into()),
            delta: Delta {
                completed: Some(2),
                failed: Some(-1),
                open: Some(3),
                stuck_count: None,
            },
        }
    }

    #[test]
    fn the_template_body_states_figures_and_titles() {
        assert_eq!(
            template_body(
                &sample(),
                &titles(&["Fix the login redirect"]),
                &titles(&["Rotate the TLS certificate"]),
            ),
            "Standup for org, 2026-11-24 (daily): 5 completed (+2), 1 failed (-1), \
             12 open (+3), 0 stuck.\n\
             Most failures: deploy.\n\
             Completed:\n\
             - Fix the login redirect\n\
             Failed:\n\
             - Rotate the TLS certificate"
        );
    }

    #[test]
    fn the_template_body_clips_long_lists_and_omits_empty_parts() {
        let h = Headline {
            cadence: Cadence::Weekly,
            period: "2026-W48".into(),
            scope: "team:ops".into(),
            completed: 12,
            failed: 0,
            stuck_count: 2,
            top_failure_tag: None,
            delta: Delta {
                stuck_count: Some(0),
                ..Delta::default()
            },
            ..sample()
        };
        let done: Vec<String> = (1..=12).map(|n| format!("Task {n}")).collect();
        let mut expected = String::from(
            "Standup for team:ops, 2026-W48 (weekly): 12 completed, 0 failed, 12 open, \
             2 stuck (+0).\nCompleted:\n",
        );
        for n in 1..=10 {
            expected.push_str(&format!("- Task {n}\n"));
        }
        expected.push_str("- … and 2 more");
        assert_eq!(template_body(&h, &done, &[]), expected);
        let no_titles = Headline {
            delta: Delta::default(),
            ..h
        };
        assert_eq!(
            template_body(&no_titles, &[], &titles(&["Split\nacross  lines"])),
            "Standup for team:ops, 2026-W48 (weekly): 12 completed, 0 failed, 12 open, \
             2 stuck.\nFailed:\n- Split across lines"
        );
    }

    #[test]
    fn the_prompt_gives_the_model_the_figures_and_thirty_titles() {
        let done: Vec<String> = (1..=35).map(|n| format!("Task {n}")).collect();
        let messages = standup_prompt(&sample(), &done, &titles(&["Rotate the TLS certificate"]));
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0].role, "system");
        assert!(messages[0].content.contains("3 to 6 sentences"));
        assert!(messages[0].content.contains("plain text"));
        assert_eq!(messages[1].role, "user");
        let user = &messages[1].content;
        assert!(user.contains("5 completed (+2), 1 failed (-1), 12 open (+3), 0 stuck."));
        assert!(user.contains("Most failures: deploy."));
        assert!(user.contains("- Task 30\n- … and 5 more\nFailed:\n- Rotate the TLS certificate"));
        assert!(!user.contains("Task 31"));
    }
}
