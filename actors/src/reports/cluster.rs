//! Which finished tasks are about the same thing. Failed tasks that went
//! wrong in the same way become the insights' failure clusters; completed
//! tasks that did the same kind of work become the clusters runbooks are
//! distilled from. A task's meaning is its vector when the embedder gave
//! one, else the words of its title and its tags.
//!
//! Everything here is pure: the reports actor loads the items and asks the
//! language model; this module groups, words the templates used when no
//! model answers, and writes and reads the model's prompts.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::plan::unfence;
use crate::domain::TaskId;
use crate::llm::ChatMessage;

/// Cosine similarity from which two tasks' vectors mean the same thing.
pub const VECTOR_THRESHOLD: f64 = 0.6;
/// Jaccard similarity of [`terms`] from which two tasks mean the same thing.
pub const TERM_THRESHOLD: f64 = 0.3;
/// The most items [`cluster`] looks at: the newest. Each item is compared
/// with every item before it, so the cost grows with the square.
pub const MAX_ITEMS: usize = 2_000;
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

/// A finished task to be clustered.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub task_id: TaskId,
    /// When the task finished, in milliseconds since the epoch.
    pub at: i64,
    pub title: String,
    pub tags: Vec<String>,
    /// The task's unit-length vector, when it has one.
    pub vector: Option<Vec<f32>>,
}

/// A completed task a runbook is distilled from.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub task_id: TaskId,
    pub title: String,
    pub description: Option<String>,
    /// The task's output, rendered as text.
    pub output: Option<String>,
}

const STOPWORDS: &[&str] = &[
    "the", "and", "for", "with", "from", "that", "this", "into", "onto", "are", "was", "were",
    "been", "has", "have", "had", "not", "but", "its", "our", "your", "their", "all", "any", "can",
    "will", "should", "would", "could", "when", "what", "which", "who", "how", "why", "then",
    "than", "there", "here", "out", "off", "over", "about", "after", "before", "again", "also",
    "just", "only", "some", "very", "too", "per", "via", "upon",
];

/// What a task is about without vectors: the lowercase words of its title
/// of three or more characters, less common English words, each once, then
/// `tag:<tag>` for each of its tags.
pub fn terms(title: &str, tags: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in title.split(|c: char| !c.is_alphanumeric()) {
        let word = word.to_lowercase();
        if word.chars().count() >= 3 && !STOPWORDS.contains(&word.as_str()) && !out.contains(&word)
        {
            out.push(word);
        }
    }
    for tag in tags {
        let term = format!("tag:{tag}");
        if !out.contains(&term) {
            out.push(term);
        }
    }
    out
}

/// Newest first: `at` descending, then task id descending.
fn newest_first(items: &[Item], a: usize, b: usize) -> Ordering {
    (items[b].at, items[b].task_id).cmp(&(items[a].at, items[a].task_id))
}

fn jaccard(a: &HashSet<String>, b: &HashSet<String>) -> f64 {
    let union = a.union(b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(b).count() as f64 / union as f64
}

/// Groups the items that are about the same thing, average linkage,
/// greedily: oldest first, each item joins the cluster it is on average
/// most similar to, among those it is similar enough to, or starts its
/// own. Two items' similarity is the cosine of their vectors when both
/// have one, else the Jaccard similarity of their [`terms`]; a cluster is
/// similar enough at [`VECTOR_THRESHOLD`] when every pair was compared by
/// vectors, else at [`TERM_THRESHOLD`].
///
/// Only the [`MAX_ITEMS`] newest items are looked at. Answers the clusters
/// of at least `min_size` members as indexes into `items`, newest first;
/// the largest cluster first, then the one with the newest member.
pub fn cluster(items: &[Item], min_size: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| newest_first(items, a, b));
    order.truncate(MAX_ITEMS);
    order.reverse();
    let term_sets: Vec<HashSet<String>> = order
        .iter()
        .map(|&i| terms(&items[i].title, &items[i].tags).into_iter().collect())
        .collect();
    // Positions in `order`, not indexes into `items`.
    let similarity = |a: usize, b: usize| -> (f64, bool) {
        match (&items[order[a]].vector, &items[order[b]].vector) {
            (Some(x), Some(y)) if x.len() == y.len() => {
                let dot: f64 = x
                    .iter()
                    .zip(y)
                    .map(|(p, q)| f64::from(*p) * f64::from(*q))
                    .sum();
                (dot, true)
            }
            _ => (jaccard(&term_sets[a], &term_sets[b]), false),
        }
    };
    let mut clusters: Vec<Vec<usize>> = Vec::new();
    for position in 0..order.len() {
        let mut best: Option<(usize, f64)> = None;
        for (c, members) in clusters.iter().enumerate() {
            let mut sum = 0.0;
            let mut by_vectors = true;
            for &member in members {
                let (score, vectors) = similarity(position, member);
                sum += score;
                by_vectors &= vectors;
            }
            let average = sum / members.len() as f64;
            let threshold = if by_vectors {
                VECTOR_THRESHOLD
            } else {
                TERM_THRESHOLD
            };
            if average >= threshold && best.is_none_or(|(_, b)| average > b) {
                best = Some((c, average));
            }
        }
        match best {
            Some((c, _)) => clusters[c].push(position),
            None => clusters.push(vec![position]),
        }
    }
    let mut out: Vec<Vec<usize>> = clusters
        .into_iter()
        .filter(|members| members.len() >= min_size)
        .map(|members| {
            let mut members: Vec<usize> = members.into_iter().map(|p| order[p]).collect();
            members.sort_by(|&a, &b| newest_first(items, a, b));
            members
        })
        .collect();
    out.sort_by(|a, b| {
        b.len()
            .cmp(&a.len())
            .then_with(|| newest_first(items, a[0], b[0]))
    });
    out
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
    use uuid::Uuid;

    use super::*;

    fn id(n: u128) -> TaskId {
        TaskId(Uuid::from_u128(n))
    }

    fn item(n: u128, at: i64, title: &str, tags: &[&str]) -> Item {
        Item {
            task_id: id(n),
            at,
            title: title.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            vector: None,
        }
    }

    fn with_vector(mut item: Item, vector: &[f32]) -> Item {
        item.vector = Some(vector.to_vec());
        item
    }

    #[test]
    fn terms_are_long_words_without_stopwords_then_tags() {
        assert_eq!(
            terms(
                "Fix the DB-migration for the API, fix it again",
                &["ops".into(), "ops".into()]
            ),
            vec!["fix", "migration", "api", "tag:ops"]
        );
        assert_eq!(terms("", &[]), Vec::<String>::new());
    }

    #[test]
    fn titles_sharing_words_cluster_and_noise_stays_out() {
        let items = vec![
            item(1, 10, "Deploy timeout on staging", &["ci"]),
            item(2, 20, "Invoice export CSV broken", &[]),
            item(3, 30, "Deploy timeout on production", &["ci"]),
            item(4, 40, "Write the quarterly newsletter", &[]),
            item(5, 50, "Invoice export CSV empty", &[]),
            item(6, 60, "Deploy timeout again on staging", &["ci"]),
            item(7, 70, "Invoice export CSV missing rows", &[]),
        ];
        assert_eq!(cluster(&items, 2), vec![vec![6, 4, 1], vec![5, 2, 0]]);
        assert_eq!(
            cluster(&items, 1),
            vec![vec![6, 4, 1], vec![5, 2, 0], vec![3]]
        );
        assert_eq!(cluster(&items, 4), Vec::<Vec<usize>>::new());
    }

    #[test]
    fn vectors_decide_when_every_member_has_one() {
        let items = vec![
            with_vector(item(1, 10, "Alpha release", &[]), &[1.0, 0.0, 0.0]),
            with_vector(item(2, 20, "beta", &[]), &[0.8, 0.6, 0.0]),
            with_vector(item(3, 30, "gamma", &[]), &[0.28, 0.96, 0.0]),
            with_vector(item(4, 40, "delta", &[]), &[0.0, 0.0, 1.0]),
            with_vector(item(5, 50, "epsilon", &[]), &[0.6, 0.8, 0.0]),
            with_vector(item(6, 60, "Alpha release", &[]), &[-1.0, 0.0, 0.0]),
        ];
        // Item 2 is 0.8 like item 1 but 0.28 like item 0: on average too
        // far from their cluster. Item 4 averages 0.78 with {0, 1} and 0.936
        // with {2}. Item 5 shares its title with item 0, but not its meaning.
        assert_eq!(cluster(&items, 2), vec![vec![4, 2], vec![1, 0]]);
        assert_eq!(
            cluster(&items, 1),
            vec![vec![4, 2], vec![1, 0], vec![5], vec![3]]
        );
    }

    #[test]
    fn without_both_vectors_terms_decide() {
        let items = vec![
            with_vector(item(1, 10, "Rotate the signing keys", &[]), &[1.0, 0.0]),
            item(2, 20, "Rotate signing keys for billing", &[]),
        ];
        assert_eq!(cluster(&items, 2), vec![vec![1, 0]]);
    }

    #[test]
    fn equal_sizes_put_the_newest_member_first() {
        let items = vec![
            item(2, 10, "Backup restore failed", &[]),
            item(1, 10, "Backup restore failed again", &[]),
            item(3, 5, "Certificate renewal expired", &[]),
            item(4, 40, "Certificate renewal expired twice", &[]),
        ];
        // Members tie on `at` by task id; clusters of two by their newest.
        assert_eq!(cluster(&items, 2), vec![vec![3, 2], vec![0, 1]]);
    }

    #[test]
    fn only_the_newest_items_are_clustered() {
        let mut items: Vec<Item> = (0..MAX_ITEMS as u128)
            .map(|n| {
                item(
                    n + 10,
                    1_000 + n as i64,
                    &format!("unique{n} words{n}"),
                    &[],
                )
            })
            .collect();
        items.push(item(1, 1, "Flaky login test", &[]));
        items.push(item(2, 2, "Flaky login test", &[]));
        assert_eq!(cluster(&items, 2), Vec::<Vec<usize>>::new());
        // Now items 2001 and 1 are kept, item 0 is one of the two oldest.
        items[0].title = "Flaky login test".into();
        items[1].title = "Flaky login test".into();
        items[MAX_ITEMS + 1].at = 2_000_000;
        assert_eq!(cluster(&items, 2), vec![vec![MAX_ITEMS + 1, 1]]);
    }

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
