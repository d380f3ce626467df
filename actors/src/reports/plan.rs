//! The planner's pure parts: the prompt that turns a goal into a task graph
//! grounded on the org's own history, and the reading of the model's answer
//! into drafted tasks.
//!
//! The answer is untrusted. What could not be created as one `POST /tasks`
//! call (a missing title, a blocker naming no task of the plan, a cycle)
//! makes the whole plan unusable, since mending it would mean guessing what
//! the model meant; what can be mended without guessing (tags outside the
//! vocabulary, priorities out of range, too many tasks) is mended.

use std::collections::HashMap;
use std::ops::RangeInclusive;

use serde_json::{Map, Value};

use super::wording::{clip, one_line};
use crate::api::{DraftTask, Grounding, DEFAULT_PRIORITY};
use crate::llm::ChatMessage;

/// The priorities `POST /tasks` accepts, 1 the most urgent.
pub const PRIORITIES: RangeInclusive<i64> = 1..=5;

/// The model's answer held no plan that could be created.
#[derive(Debug, thiserror::Error)]
#[error("no usable plan: {0}")]
pub struct NoUsablePlan(pub String);

/// Asks the model for at most `max_tasks` tasks achieving `goal`, as JSON,
/// told what the org did before and which tags it uses.
pub fn plan_prompt(
    goal: &str,
    context: Option<&str>,
    grounding: &Grounding,
    vocabulary: &[String],
    max_tasks: u8,
) -> Vec<ChatMessage> {
    let (low, high) = (PRIORITIES.start(), PRIORITIES.end());
    let system = format!(
        "You are a planner: you turn a goal into a small graph of tasks for a team of people \
         and AI agents.\n\
         Answer ONLY with JSON, no prose, of this form:\n\
         {{\"tasks\": [{{\"ref\": \"short-name\", \"title\": \"...\", \"description\": \"...\", \
         \"blocked_by\": [\"ref:other-name\"], \"suggested_tags\": [\"tag\"], \
         \"priority\": {DEFAULT_PRIORITY}}}]}}\n\
         Rules:\n\
         - At most {max_tasks} tasks.\n\
         - `ref` is a short name, unique in the plan.\n\
         - `blocked_by` lists `ref:<ref>` of the other tasks of the plan that must be done \
         first. No task blocks itself, and the blockers form no cycle.\n\
         - `suggested_tags` holds only tags of the vocabulary given; leave it empty when none \
         fits.\n\
         - `priority` is an integer from {low} (most urgent) to {high}; {DEFAULT_PRIORITY} is \
         usual.\n\
         - A title is a short imperative; a description says what done looks like.\n\
         - Use the org's history where it helps: its similar tasks, how long its work takes, \
         what fails, its runbook."
    );
    let mut user = format!("Goal: {goal}\n");
    if let Some(context) = context.filter(|c| !c.trim().is_empty()) {
        user.push_str(&format!("\nContext:\n{context}\n"));
    }
    user.push_str("\nThe org's history:\nSimilar past tasks:");
    if grounding.similar_tasks.is_empty() {
        user.push_str(" none");
    }
    for task in &grounding.similar_tasks {
        user.push_str(&format!(
            "\n- {} ({}, similarity {:.2})",
            clip(&one_line(&task.title), 200),
            task.status.as_str(),
            task.score
        ));
    }
    match grounding.cycle_time_days {
        Some(days) => user.push_str(&format!("\nMedian cycle time: {days:.1} days")),
        None => user.push_str("\nMedian cycle time: unknown"),
    }
    let top_failure = grounding.top_failure_tag.as_deref().unwrap_or("none");
    user.push_str(&format!("\nTag with the most failures: {top_failure}"));
    let runbook = grounding
        .runbook
        .as_ref()
        .map_or("none", |r| r.topic.as_str());
    user.push_str(&format!("\nBest matching runbook: {runbook}"));
    if vocabulary.is_empty() {
        user.push_str("\n\nTag vocabulary: none (leave suggested_tags empty)");
    } else {
        user.push_str(&format!("\n\nTag vocabulary: {}", vocabulary.join(", ")));
    }
    vec![ChatMessage::system(system), ChatMessage::user(user)]
}

/// The JSON in a model's answer: the answer itself when it is a bare
/// object, else the inside of its first fenced code block (with or without
/// a language), else the answer, which then fails to parse.
pub fn unfence(answer: &str) -> &str {
    let answer = answer.trim();
    if answer.starts_with('{') {
        return answer;
    }
    let Some(open) = answer.find("```") else {
        return answer;
    };
    let after = &answer[open + 3..];
    let Some(newline) = after.find('\n') else {
        return answer;
    };
    let inside = &after[newline + 1..];
    // The closing fence starts a line; a JSON string cannot hold a raw
    // newline, so nothing inside the object is taken for it.
    let close = inside
        .match_indices("```")
        .map(|(i, _)| i)
        .find(|&i| {
            inside[..i]
                .rsplit('\n')
                .next()
                .unwrap_or("")
                .trim()
                .is_empty()
        })
        .unwrap_or(inside.len());
    inside[..close].trim()
}

/// Reads the drafted tasks from a model's answer to [`plan_prompt`]: a JSON
/// object (bare or in the first fenced block) with a non-empty `tasks`
/// array. Tags outside `vocabulary` are dropped, priorities clamped into
/// [`PRIORITIES`] (absent: the default); past `max_tasks`, the tasks are
/// dropped with the blockers naming them.
pub fn parse_plan(
    answer: &str,
    max_tasks: u8,
    vocabulary: &[String],
) -> Result<Vec<DraftTask>, NoUsablePlan> {
    let bad = |reason: String| NoUsablePlan(reason);
    let value: Value = serde_json::from_str(unfence(answer))
        .map_err(|e| bad(format!("the answer is not JSON: {e}")))?;
    let object = value
        .as_object()
        .ok_or_else(|| bad("the answer is not a JSON object".into()))?;
    let items = object
        .get("tasks")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("the answer has no `tasks` array".into()))?;
    if items.is_empty() {
        return Err(bad("the plan has no tasks".into()));
    }

    let mut drafts = Vec::with_capacity(items.len());
    let mut index: HashMap<String, usize> = HashMap::new();
    for (i, item) in items.iter().enumerate() {
        let item = item
            .as_object()
            .ok_or_else(|| bad(format!("tasks[{i}] is not an object")))?;
        let draft = draft(item, vocabulary).map_err(|e| bad(format!("tasks[{i}].{e}")))?;
        if index.insert(draft.task_ref.clone(), i).is_some() {
            return Err(bad(format!(
                "tasks[{i}].ref `{}` appears twice",
                draft.task_ref
            )));
        }
        drafts.push(draft);
    }

    let mut edges: Vec<Vec<usize>> = Vec::with_capacity(drafts.len());
    for (i, draft) in drafts.iter().enumerate() {
        let mut targets = Vec::with_capacity(draft.blocked_by.len());
        for blocker in &draft.blocked_by {
            let name = blocker.strip_prefix("ref:").ok_or_else(|| {
                bad(format!(
                    "tasks[{i}].blocked_by: `{blocker}` is not `ref:<ref>`"
                ))
            })?;
            let &target = index.get(name).ok_or_else(|| {
                bad(format!(
                    "tasks[{i}].blocked_by: `{blocker}` names no task of the plan"
                ))
            })?;
            if target == i {
                return Err(bad(format!("tasks[{i}] blocks itself")));
            }
            targets.push(target);
        }
        edges.push(targets);
    }
    if has_cycle(&edges) {
        return Err(bad("the blockers form a cycle".into()));
    }

    let keep = usize::from(max_tasks.max(1));
    if drafts.len() > keep {
        drafts.truncate(keep);
        for (draft, targets) in drafts.iter_mut().zip(&edges) {
            let mut kept = targets.iter().map(|&t| t < keep);
            draft.blocked_by.retain(|_| kept.next().unwrap_or(false));
        }
    }
    Ok(drafts)
}

/// One task of the plan, its blockers not yet checked against the others.
/// The error names the field.
fn draft(item: &Map<String, Value>, vocabulary: &[String]) -> Result<DraftTask, String> {
    // A null reads as an absent field.
    let field = |name: &str| item.get(name).filter(|v| !v.is_null());
    let task_ref = field("ref")
        .and_then(Value::as_str)
        .filter(|r| !r.trim().is_empty())
        .ok_or("ref must be a non-empty string")?
        .to_owned();
    let title = field("title")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or("title must be a non-empty string")?
        .to_owned();
    let description = match field("description") {
        None => String::new(),
        Some(v) => v
            .as_str()
            .ok_or("description must be a string")?
            .trim()
            .to_owned(),
    };
    let blocked_by =
        strings(field("blocked_by")).ok_or("blocked_by must be an array of strings")?;
    let mut suggested_tags: Vec<String> = Vec::new();
    for tag in
        strings(field("suggested_tags")).ok_or("suggested_tags must be an array of strings")?
    {
        if vocabulary.contains(&tag) && !suggested_tags.contains(&tag) {
            suggested_tags.push(tag);
        }
    }
    let priority = match field("priority") {
        None => i64::from(DEFAULT_PRIORITY),
        Some(v) if v.is_i64() => v.as_i64().unwrap_or_default(),
        Some(v) if v.is_u64() => *PRIORITIES.end(),
        Some(_) => return Err("priority must be an integer".into()),
    }
    .clamp(*PRIORITIES.start(), *PRIORITIES.end());
    Ok(DraftTask {
        task_ref,
        title,
        description,
        blocked_by: dedup(blocked_by),
        suggested_tags,
        priority,
    })
}

/// An array of strings; absent is empty, anything else `None`.
fn strings(value: Option<&Value>) -> Option<Vec<String>> {
    let Some(value) = value else {
        return Some(Vec::new());
    };
    value
        .as_array()?
        .iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect()
}

fn dedup(list: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for s in list {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// Whether the edges (from a task to the tasks blocking it) have a cycle:
/// a topological sort that cannot take every task.
fn has_cycle(edges: &[Vec<usize>]) -> bool {
    let mut blocking = vec![0usize; edges.len()];
    for targets in edges {
        for &t in targets {
            blocking[t] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..edges.len()).filter(|&i| blocking[i] == 0).collect();
    let mut taken = 0;
    while let Some(i) = ready.pop() {
        taken += 1;
        for &t in &edges[i] {
            blocking[t] -= 1;
            if blocking[t] == 0 {
                ready.push(t);
            }
        }
    }
    taken < edges.len()
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use uuid::Uuid;

    use super::*;
    use crate::api::{CreateTasks, Decode, GroundingRunbook, GroundingTask};
    use crate::domain::{TaskId, TaskStatus};

    fn vocabulary() -> Vec<String> {
        vec!["ops".into(), "docs".into()]
    }

    fn parse(answer: &str) -> Result<Vec<DraftTask>, NoUsablePlan> {
        parse_plan(answer, 8, &vocabulary())
    }

    fn reason(answer: &str) -> String {
        parse(answer).unwrap_err().0
    }

    fn drafted(task_ref: &str, title: &str, blocked_by: &[&str]) -> DraftTask {
        DraftTask {
            task_ref: task_ref.into(),
            title: title.into(),
            description: String::new(),
            blocked_by: blocked_by.iter().map(|b| b.to_string()).collect(),
            suggested_tags: Vec::new(),
            priority: i64::from(DEFAULT_PRIORITY),
        }
    }

    const TWO: &str = r#"{"tasks": [
        {"ref": "a", "title": "Write it", "description": "A draft", "priority": 2},
        {"ref": "b", "title": "Review it", "blocked_by": ["ref:a"]}
    ]}"#;

    fn two() -> Vec<DraftTask> {
        let mut a = drafted("a", "Write it", &[]);
        a.description = "A draft".into();
        a.priority = 2;
        vec![a, drafted("b", "Review it", &["ref:a"])]
    }

    #[test]
    fn bare_json_is_read() {
        assert_eq!(parse(&format!("\n  {TWO}\n")).unwrap(), two());
    }

    #[test]
    fn fenced_json_is_read_with_or_without_a_language() {
        assert_eq!(parse(&format!("```json\n{TWO}\n```")).unwrap(), two());
        assert_eq!(parse(&format!("```\n{TWO}\n```")).unwrap(), two());
        let chatty = format!("Here is the plan:\n\n```json\n{TWO}\n```\n\nGood luck!");
        assert_eq!(parse(&chatty).unwrap(), two());
    }

    #[test]
    fn anything_but_a_plan_is_no_usable_plan() {
        assert!(reason("I cannot help with that.").contains("not JSON"));
        assert!(reason("```json\n{\"tasks\": [\n```").contains("not JSON"));
        assert_eq!(reason("[1, 2]"), "the answer is not a JSON object");
        assert_eq!(
            reason(r#"{"steps": []}"#),
            "the answer has no `tasks` array"
        );
        assert_eq!(reason(r#"{"tasks": []}"#), "the plan has no tasks");
        assert_eq!(reason(r#"{"tasks": [3]}"#), "tasks[0] is not an object");
        assert_eq!(
            reason(r#"{"tasks": [{"ref": "a", "title": "t"}, {"ref": "b"}]}"#),
            "tasks[1].title must be a non-empty string"
        );
        assert_eq!(
            reason(r#"{"tasks": [{"ref": "a", "title": " "}]}"#),
            "tasks[0].title must be a non-empty string"
        );
        assert_eq!(
            reason(r#"{"tasks": [{"title": "t"}]}"#),
            "tasks[0].ref must be a non-empty string"
        );
        assert_eq!(
            reason(r#"{"tasks": [{"ref": "a", "title": "t", "description": 1}]}"#),
            "tasks[0].description must be a string"
        );
        assert_eq!(
            reason(r#"{"tasks": [{"ref": "a", "title": "t", "blocked_by": "ref:b"}]}"#),
            "tasks[0].blocked_by must be an array of strings"
        );
        assert_eq!(
            reason(r#"{"tasks": [{"ref": "a", "title": "t", "suggested_tags": [1]}]}"#),
            "tasks[0].suggested_tags must be an array of strings"
        );
        assert_eq!(
            reason(r#"{"tasks": [{"ref": "a", "title": "t", "priority": "high"}]}"#),
            "tasks[0].priority must be an integer"
        );
        assert_eq!(
            reason(r#"{"tasks": [{"ref": "a", "title": "t", "priority": 2.5}]}"#),
            "tasks[0].priority must be an integer"
        );
    }

    #[test]
    fn refs_are_unique_and_blockers_name_other_tasks() {
        assert_eq!(
            reason(r#"{"tasks": [{"ref": "a", "title": "t"}, {"ref": "a", "title": "u"}]}"#),
            "tasks[1].ref `a` appears twice"
        );
        assert_eq!(
            reason(r#"{"tasks": [{"ref": "a", "title": "t", "blocked_by": ["ref:zz"]}]}"#),
            "tasks[0].blocked_by: `ref:zz` names no task of the plan"
        );
        assert_eq!(
            reason(r#"{"tasks": [{"ref": "a", "title": "t", "blocked_by": ["ref:a"]}]}"#),
            "tasks[0] blocks itself"
        );
        assert_eq!(
            reason(
                r#"{"tasks": [{"ref": "a", "title": "t"}, {"ref": "b", "title": "u", "blocked_by": ["a"]}]}"#
            ),
            "tasks[1].blocked_by: `a` is not `ref:<ref>`"
        );
    }

    #[test]
    fn a_cycle_is_no_usable_plan() {
        let cycle = r#"{"tasks": [
            {"ref": "a", "title": "A", "blocked_by": ["ref:c"]},
            {"ref": "b", "title": "B", "blocked_by": ["ref:a"]},
            {"ref": "c", "title": "C", "blocked_by": ["ref:b"]},
            {"ref": "d", "title": "D"}
        ]}"#;
        assert_eq!(reason(cycle), "the blockers form a cycle");
        let diamond = r#"{"tasks": [
            {"ref": "a", "title": "A"},
            {"ref": "b", "title": "B", "blocked_by": ["ref:a"]},
            {"ref": "c", "title": "C", "blocked_by": ["ref:a"]},
            {"ref": "d", "title": "D", "blocked_by": ["ref:b", "ref:c", "ref:b"]}
        ]}"#;
        let plan = parse(diamond).unwrap();
        assert_eq!(plan[3].blocked_by, vec!["ref:b", "ref:c"]);
    }

    #[test]
    fn tasks_past_the_limit_are_dropped_with_the_blockers_naming_them() {
        let plan = r#"{"tasks": [
            {"ref": "a", "title": "A", "blocked_by": ["ref:c"]},
            {"ref": "b", "title": "B", "blocked_by": ["ref:a", "ref:d"]},
            {"ref": "c", "title": "C"},
            {"ref": "d", "title": "D"}
        ]}"#;
        assert_eq!(
            parse_plan(plan, 2, &[]).unwrap(),
            vec![drafted("a", "A", &[]), drafted("b", "B", &["ref:a"])]
        );
        assert_eq!(parse_plan(plan, 4, &[]).unwrap().len(), 4);
    }

    #[test]
    fn tags_are_kept_only_from_the_vocabulary() {
        let plan = r#"{"tasks": [{"ref": "a", "title": "A",
            "suggested_tags": ["ops", "made-up", "docs", "ops", "Ops"]}]}"#;
        assert_eq!(parse(plan).unwrap()[0].suggested_tags, vec!["ops", "docs"]);
        assert_eq!(
            parse_plan(plan, 8, &[]).unwrap()[0].suggested_tags,
            Vec::<String>::new()
        );
    }

    #[test]
    fn priorities_default_and_clamp() {
        let plan = r#"{"tasks": [
            {"ref": "a", "title": "A"},
            {"ref": "b", "title": "B", "priority": null},
            {"ref": "c", "title": "C", "priority": 0},
            {"ref": "d", "title": "D", "priority": 9},
            {"ref": "e", "title": "E", "priority": -4},
            {"ref": "f", "title": "F", "priority": 18446744073709551615},
            {"ref": "g", "title": "G", "priority": 1}
        ]}"#;
        let priorities: Vec<i64> = parse(plan).unwrap().iter().map(|d| d.priority).collect();
        assert_eq!(priorities, vec![3, 3, 1, 5, 1, 5, 1]);
    }

    #[test]
    fn the_priority_range_is_the_one_create_accepts() {
        let create = |p: i64| {
            CreateTasks::decode(&json!({"tasks": [{"title": "t", "priority": p}]})).is_ok()
        };
        let (low, high) = (*PRIORITIES.start(), *PRIORITIES.end());
        assert!(create(low) && create(high));
        assert!(!create(low - 1) && !create(high + 1));
        assert!(PRIORITIES.contains(&i64::from(DEFAULT_PRIORITY)));
    }

    #[test]
    fn the_prompt_carries_the_goal_grounding_and_rules() {
        let grounding = Grounding {
            similar_tasks: vec![GroundingTask {
                task_id: TaskId(Uuid::from_u128(1)),
                title: "Migrate the\nbilling database".into(),
                status: TaskStatus::Completed,
                score: 0.8251,
            }],
            cycle_time_days: Some(2.46),
            top_failure_tag: Some("db".into()),
            runbook: Some(GroundingRunbook {
                runbook_id: "r1".into(),
                topic: "Database migrations".into(),
                score: 0.7,
            }),
        };
        let messages = plan_prompt(
            "Migrate search to Postgres",
            Some("We run Postgres 16."),
            &grounding,
            &vocabulary(),
            6,
        );
        assert_eq!(messages[0].role, "system");
        for rule in [
            "You are a planner",
            "ONLY with JSON",
            "At most 6 tasks.",
            "`ref:<ref>`",
            "no cycle",
            "from 1 (most urgent) to 5",
        ] {
            assert!(messages[0].content.contains(rule), "{rule}");
        }
        assert_eq!(messages[1].role, "user");
        assert_eq!(
            messages[1].content,
            "Goal: Migrate search to Postgres\n\
             \n\
             Context:\n\
             We run Postgres 16.\n\
             \n\
             The org's history:\n\
             Similar past tasks:\n\
             - Migrate the billing database (completed, similarity 0.83)\n\
             Median cycle time: 2.5 days\n\
             Tag with the most failures: db\n\
             Best matching runbook: Database migrations\n\
             \n\
             Tag vocabulary: ops, docs"
        );
        let bare = plan_prompt("Ship it", None, &Grounding::default(), &[], 8);
        assert_eq!(
            bare[1].content,
            "Goal: Ship it\n\
             \n\
             The org's history:\n\
             Similar past tasks: none\n\
             Median cycle time: unknown\n\
             Tag with the most failures: none\n\
             Best matching runbook: none\n\
             \n\
             Tag vocabulary: none (leave suggested_tags empty)"
        );
    }

    #[test]
    fn unfence_takes_the_first_fenced_block() {
        assert_eq!(unfence("  {\"a\": 1}  "), "{\"a\": 1}");
        assert_eq!(
            unfence("x\n```json\n{\"a\": \"```\"}\n```\n```\n{}\n```"),
            "{\"a\": \"```\"}"
        );
        assert_eq!(unfence("no json here"), "no json here");
        assert_eq!(unfence("```json\n{\"a\": 1}"), "{\"a\": 1}");
    }
}
