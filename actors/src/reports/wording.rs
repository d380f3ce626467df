//! A cluster's words: the label and the runbook the templates write when
//! no model answers, the prompts that ask the model for them, and the
//! reading of its answers. Pure.

use std::collections::HashMap;

use serde_json::Value;

use super::cluster::{newest_first, terms, Item};
use super::plan::unfence;
use crate::domain::TaskId;
use crate::llm::ChatMessage;

/// The most sources a template runbook lists.
pub const TEMPLATE_SOURCES: usize = 10;
/// The most characters of a source's text a template runbook quotes.
pub const TEMPLATE_EXCERPT_CHARS: usize = 200;
/// The most titles a label prompt shows the model.
pub const LABEL_TITLES: usize = 30;
/// The most sources a runbook prompt shows the model.
pub const PROMPT_SOURCES: usize = 15;
/// The most characters of each source text a runbook prompt shows.
pub const PROMPT_TEXT_CHARS: usize = 500;
pub const MAX_LABEL_CHARS: usize = 80;
pub const MAX_TOPIC_CHARS: usize = 120;

/// A completed task a runbook is distilled from.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub task_id: TaskId,
    pub title: String,
    pub description: Option<String>,
    /// The task's output, rendered as text.
    pub output: Option<String>,
}

/// A cluster's name when no model gives one: the words at least half its
/// members' titles share (at most four, in the order the newest titles
/// use them), else the newest title; then ` [tag]` for the tag most of
/// them carry, if at least half do.
pub fn template_label(items: &[Item], members: &[usize]) -> String {
    let mut members = members.to_vec();
    members.sort_by(|&a, &b| newest_first(items, a, b));
    let Some(&newest) = members.first() else {
        return String::new();
    };
    let half = |count: usize| count * 2 >= members.len();
    let words: Vec<Vec<String>> = members
        .iter()
        .map(|&m| {
            terms(&items[m].title, &[])
                .into_iter()
                .filter(|t| !t.starts_with("tag:"))
                .collect()
        })
        .collect();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for word in words.iter().flatten() {
        *counts.entry(word.as_str()).or_default() += 1;
    }
    let mut shared: Vec<&str> = Vec::new();
    for word in words.iter().flatten() {
        if shared.len() < 4 && half(counts[word.as_str()]) && !shared.contains(&word.as_str()) {
            shared.push(word);
        }
    }
    let mut label = if shared.is_empty() {
        clip(items[newest].title.trim(), 60).trim_end().to_owned()
    } else {
        shared.join(" ")
    };
    let mut tags: Vec<(&str, usize)> = Vec::new();
    for &m in &members {
        let mut seen: Vec<&str> = Vec::new();
        for tag in items[m].tags.iter().map(String::as_str) {
            if seen.contains(&tag) {
                continue;
            }
            seen.push(tag);
            match tags.iter().position(|(t, _)| *t == tag) {
                Some(i) => tags[i].1 += 1,
                None => tags.push((tag, 1)),
            }
        }
    }
    let mut top: Option<(&str, usize)> = None;
    for &(tag, count) in &tags {
        if top.is_none_or(|(_, c)| count > c) {
            top = Some((tag, count));
        }
    }
    if let Some((tag, count)) = top {
        if half(count) {
            label.push_str(&format!(" [{tag}]"));
        }
    }
    label
}

/// A runbook when no model writes one: `(topic, body)`, the body listing
/// what the newest sources (at most [`TEMPLATE_SOURCES`]) did, so it is
/// useful offline. The count it names is the number of sources given.
pub fn template_runbook(label: &str, sources: &[Source]) -> (String, String) {
    let count = sources.len();
    let plural = if count == 1 { "" } else { "s" };
    let mut body =
        format!("Distilled from {count} completed task{plural}.\n\nWhat was done before:");
    for (i, source) in sources.iter().take(TEMPLATE_SOURCES).enumerate() {
        body.push_str(&format!("\n{}. {}", i + 1, one_line(&source.title)));
        let text = [&source.output, &source.description]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .map(one_line)
            .find(|t| !t.is_empty());
        if let Some(text) = text {
            body.push_str(" — ");
            body.push_str(clip(&text, TEMPLATE_EXCERPT_CHARS).trim_end());
        }
    }
    (capitalise(label), body)
}

/// Asks the model to name what a failure cluster's tasks have in common.
pub fn label_prompt(titles: &[String]) -> Vec<ChatMessage> {
    let list: Vec<String> = titles
        .iter()
        .take(LABEL_TITLES)
        .map(|t| format!("- {}", clip(&one_line(t), 200)))
        .collect();
    vec![
        ChatMessage::system(
            "You name groups of failed tasks. Given the titles of tasks that failed in the same \
             way, answer with a label of at most 8 words naming the failure they have in \
             common. Answer in plain text with the label and nothing else: no quotes, no \
             explanation.",
        ),
        ChatMessage::user(format!("Titles of the failed tasks:\n{}", list.join("\n"))),
    ]
}

/// The label in a model's answer to [`label_prompt`]: its first non-empty
/// line without surrounding quotes, backticks or asterisks, clipped to
/// [`MAX_LABEL_CHARS`].
pub fn read_label(answer: &str) -> Option<String> {
    let line = answer.lines().map(str::trim).find(|l| !l.is_empty())?;
    let label = line
        .trim_matches(|c| matches!(c, '"' | '\'' | '`' | '*' | '“' | '”' | '‘' | '’'))
        .trim();
    let label = clip(label, MAX_LABEL_CHARS).trim_end().to_owned();
    (!label.is_empty()).then_some(label)
}

/// Asks the model to distil a runbook from a cluster's completed tasks (at
/// most [`PROMPT_SOURCES`], each text clipped to [`PROMPT_TEXT_CHARS`]).
pub fn runbook_prompt(label: &str, sources: &[Source]) -> Vec<ChatMessage> {
    let mut user = format!("Kind of work: {label}\n\nCompleted tasks:");
    for (i, source) in sources.iter().take(PROMPT_SOURCES).enumerate() {
        user.push_str(&format!(
            "\n\n{}. Title: {}",
            i + 1,
            clip(&source.title, PROMPT_TEXT_CHARS)
        ));
        for (name, text) in [
            ("Description", &source.description),
            ("Output", &source.output),
        ] {
            if let Some(text) = text.as_deref().filter(|t| !t.trim().is_empty()) {
                user.push_str(&format!(
                    "\n{name}: {}",
                    clip(text.trim(), PROMPT_TEXT_CHARS)
                ));
            }
        }
    }
    vec![
        ChatMessage::system(
            "You write runbooks: short procedures a person or an AI agent can follow. You are \
             given completed tasks that did the same kind of work. Answer ONLY with JSON of the \
             form {\"topic\": \"...\", \"body\": \"...\"}: `topic` names the kind of work in a \
             few words; `body` is a numbered, step-by-step procedure in plain text, drawn only \
             from what these tasks did. Do not invent steps.",
        ),
        ChatMessage::user(user),
    ]
}

/// The `(topic, body)` in a model's answer to [`runbook_prompt`], the JSON
/// bare or in a fenced block; the topic clipped to [`MAX_TOPIC_CHARS`].
pub fn read_runbook(answer: &str) -> Option<(String, String)> {
    let value: Value = serde_json::from_str(unfence(answer)).ok()?;
    let topic = value.get("topic")?.as_str()?.trim();
    let body = value.get("body")?.as_str()?.trim();
    if topic.is_empty() || body.is_empty() {
        return None;
    }
    let topic = clip(topic, MAX_TOPIC_CHARS).trim_end().to_owned();
    Some((topic, body.to_owned()))
}

pub(super) fn clip(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// The words of `s` on one line, single spaced.
pub(super) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn capitalise(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::cluster::tests::{id, item};
    use super::*;

    #[test]
    fn labels_name_shared_words_and_the_common_tag() {
        let items = vec![
            item(1, 10, "Deploy timeout on staging", &["ci", "ops"]),
            item(2, 20, "Deploy to production: timeout", &["ci"]),
            item(3, 30, "Staging deploy timeout, retried", &["ci"]),
        ];
        assert_eq!(
            template_label(&items, &[2, 1, 0]),
            "staging deploy timeout [ci]"
        );
        let items = vec![
            item(
                1,
                10,
                "A quite long title about nothing in particular at all, truly",
                &["x"],
            ),
            item(2, 20, "Something else entirely", &["y"]),
            item(3, 30, "Still other words", &[]),
        ];
        assert_eq!(template_label(&items, &[2, 1, 0]), "Still other words");
        assert_eq!(template_label(&items, &[0]), "quite long title nothing [x]");
        let wordless = vec![item(1, 10, &"ab ".repeat(40), &[])];
        assert_eq!(template_label(&wordless, &[0]), vec!["ab"; 20].join(" "));
    }

    #[test]
    fn template_runbooks_list_what_was_done() {
        let sources = vec![
            Source {
                task_id: id(1),
                title: "Rotate keys\nfor billing".into(),
                description: Some("ignored, there is output".into()),
                output: Some("Ran   rotate.sh;\nupdated the vault".into()),
            },
            Source {
                task_id: id(2),
                title: "Rotate keys for search".into(),
                description: Some("Use the runbook".into()),
                output: Some("  ".into()),
            },
            Source {
                task_id: id(3),
                title: "Rotate keys for mail".into(),
                description: None,
                output: Some("x".repeat(250)),
            },
            Source {
                task_id: id(4),
                title: "Rotate keys for ci".into(),
                description: None,
                output: None,
            },
        ];
        let (topic, body) = template_runbook("rotate keys [ops]", &sources);
        assert_eq!(topic, "Rotate keys [ops]");
        assert_eq!(
            body,
            format!(
                "Distilled from 4 completed tasks.\n\nWhat was done before:\n\
                 1. Rotate keys for billing — Ran rotate.sh; updated the vault\n\
                 2. Rotate keys for search — Use the runbook\n\
                 3. Rotate keys for mail — {}\n\
                 4. Rotate keys for ci",
                "x".repeat(200)
            )
        );
        let many: Vec<Source> = (0..12)
            .map(|n| Source {
                task_id: id(n),
                title: format!("t{n}"),
                description: None,
                output: None,
            })
            .collect();
        let (_, body) = template_runbook("l", &many[..1]);
        assert_eq!(
            body,
            "Distilled from 1 completed task.\n\nWhat was done before:\n1. t0"
        );
        let (_, body) = template_runbook("l", &many);
        assert!(body.starts_with("Distilled from 12 completed tasks."));
        assert!(body.ends_with("\n10. t9"), "{body}");
    }

    #[test]
    fn prompts_carry_the_titles_and_sources() {
        let messages = label_prompt(&["Deploy\ntimeout".into(), "Deploy failed".into()]);
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0].role, "system");
        assert!(messages[0].content.contains("at most 8 words"));
        assert_eq!(
            messages[1].content,
            "Titles of the failed tasks:\n- Deploy timeout\n- Deploy failed"
        );
        let sources = vec![Source {
            task_id: id(1),
            title: "Rotate keys".into(),
            description: None,
            output: Some("o".repeat(600)),
        }];
        let messages = runbook_prompt("rotate keys", &sources);
        assert!(messages[0]
            .content
            .contains("{\"topic\": \"...\", \"body\": \"...\"}"));
        assert_eq!(
            messages[1].content,
            format!(
                "Kind of work: rotate keys\n\nCompleted tasks:\n\n1. Title: Rotate keys\nOutput: {}",
                "o".repeat(500)
            )
        );
    }

    #[test]
    fn labels_are_read_from_the_first_line() {
        assert_eq!(
            read_label("\n  **\"Deploy timeouts on staging\"**  \nBecause...").as_deref(),
            Some("Deploy timeouts on staging")
        );
        assert_eq!(read_label("`flaky login`").as_deref(), Some("flaky login"));
        assert_eq!(read_label(&"w".repeat(100)).unwrap().len(), MAX_LABEL_CHARS);
        assert_eq!(read_label(""), None);
        assert_eq!(read_label("  \n \"\" \n"), None);
    }

    #[test]
    fn runbooks_are_read_bare_or_fenced() {
        let bare =
            r#" {"topic": " Rotate keys ", "body": "1. Run rotate.sh\n2. Update the vault"} "#;
        let expected = Some((
            "Rotate keys".to_owned(),
            "1. Run rotate.sh\n2. Update the vault".to_owned(),
        ));
        assert_eq!(read_runbook(bare), expected);
        let fenced = format!("Here it is:\n```json\n{}\n```\nDone.", bare.trim());
        assert_eq!(read_runbook(&fenced), expected);
        let long = format!(r#"{{"topic": "{}", "body": "b"}}"#, "t".repeat(200));
        assert_eq!(read_runbook(&long).unwrap().0.len(), MAX_TOPIC_CHARS);
        for bad in [
            "Rotate the keys.",
            r#"{"topic": "t"}"#,
            r#"{"topic": "", "body": "b"}"#,
            r#"{"topic": "t", "body": 3}"#,
            r#"["t", "b"]"#,
            "```\nnot json\n```",
        ] {
            assert_eq!(read_runbook(bad), None, "{bad}");
        }
    }
}
