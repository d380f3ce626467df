//! Which finished tasks are about the same thing. Failed tasks that went
//! wrong in the same way become the insights' failure clusters; completed
//! tasks that did the same kind of work become the clusters runbooks are
//! distilled from. A task's meaning is its vector when the embedder gave
//! one, else the words of its title and its tags.
//!
//! Everything here is pure: the reports actor loads the items and asks the
//! language model; this module groups them, `wording.rs` names them.

use std::cmp::Ordering;
use std::collections::HashSet;

use crate::domain::TaskId;

/// Cosine similarity from which two tasks' vectors mean the same thing.
pub const VECTOR_THRESHOLD: f64 = 0.6;
/// Jaccard similarity of [`terms`] from which two tasks mean the same thing.
pub const TERM_THRESHOLD: f64 = 0.3;
/// The most items [`cluster`] looks at: the newest. Each item is compared
/// with every item before it, so the cost grows with the square.
pub const MAX_ITEMS: usize = 2_000;

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
pub(super) fn newest_first(items: &[Item], a: usize, b: usize) -> Ordering {
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

#[cfg(test)]
pub(super) mod tests {
    use uuid::Uuid;

    use super::*;

    pub(in crate::reports) fn id(n: u128) -> TaskId {
        TaskId(Uuid::from_u128(n))
    }

    pub(in crate::reports) fn item(n: u128, at: i64, title: &str, tags: &[&str]) -> Item {
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
}
