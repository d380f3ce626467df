//! The keyword baseline the model's figures are compared with: Okapi BM25
//! (k1 = 1.2, b = 0.75, Lucene's idf `ln(1 + (N - df + 0.5) / (df + 0.5))`)
//! over title + description, each split into lowercase alphanumeric tokens
//! with a short list of English stopwords dropped. Each distinct query term
//! counts once. Documents matching no query term are not ranked at all;
//! equal scores keep corpus order. Nothing stems or expands words, so it
//! shows what matching words alone recalls of paraphrased queries.

use std::collections::HashMap;

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Words too common to say what a task is about.
const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "do", "for", "from", "has",
    "have", "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "no", "not", "of", "on",
    "or", "our", "so", "that", "the", "their", "them", "then", "there", "they", "this", "to", "up",
    "us", "was", "we", "were", "what", "when", "where", "which", "who", "why", "will", "with",
    "you", "your",
];

/// Lowercase runs of letters and digits.
pub(super) fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
}

fn terms(text: &str) -> impl Iterator<Item = String> + '_ {
    tokens(text).filter(|t| !STOPWORDS.contains(&t.as_str()))
}

/// A BM25 index over documents numbered by their place in the corpus.
pub(super) struct Bm25 {
    /// Per document, each term's count.
    documents: Vec<HashMap<String, u32>>,
    lengths: Vec<f64>,
    average_length: f64,
    /// Documents holding each term.
    frequency: HashMap<String, u32>,
}

impl Bm25 {
    pub(super) fn new<'a>(documents: impl IntoIterator<Item = &'a str>) -> Self {
        let mut counted = Vec::new();
        let mut lengths = Vec::new();
        let mut frequency: HashMap<String, u32> = HashMap::new();
        for text in documents {
            let mut counts: HashMap<String, u32> = HashMap::new();
            let mut length = 0;
            for term in terms(text) {
                *counts.entry(term).or_default() += 1;
                length += 1;
            }
            for term in counts.keys() {
                *frequency.entry(term.clone()).or_default() += 1;
            }
            counted.push(counts);
            lengths.push(f64::from(length));
        }
        let average_length = if lengths.is_empty() {
            0.0
        } else {
            lengths.iter().sum::<f64>() / lengths.len() as f64
        };
        Bm25 {
            documents: counted,
            lengths,
            average_length,
            frequency,
        }
    }

    /// The `k` best documents for `query`, best first.
    pub(super) fn top(&self, query: &str, k: usize) -> Vec<usize> {
        let mut query_terms: Vec<String> = terms(query).collect();
        query_terms.sort_unstable();
        query_terms.dedup();
        let n = self.documents.len() as f64;
        let mut scored: Vec<(usize, f64)> = Vec::new();
        for (document, counts) in self.documents.iter().enumerate() {
            let norm = K1 * (1.0 - B + B * self.lengths[document] / self.average_length.max(1.0));
            let score: f64 = query_terms
                .iter()
                .filter_map(|term| {
                    let tf = f64::from(*counts.get(term)?);
                    let df = f64::from(self.frequency[term]);
                    let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                    Some(idf * tf * (K1 + 1.0) / (tf + norm))
                })
                .sum();
            if score > 0.0 {
                scored.push((document, score));
            }
        }
        // Stable: equal scores stay in corpus order.
        scored.sort_by(|a, b| b.1.total_cmp(&a.1));
        scored.into_iter().take(k).map(|(d, _)| d).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_lowercase_alphanumeric_runs() {
        let got: Vec<String> = tokens("Fix the CI-pipeline's flaky test #42!").collect();
        assert_eq!(
            got,
            ["fix", "the", "ci", "pipeline", "s", "flaky", "test", "42"]
        );
    }

    #[test]
    fn matching_rare_words_ranks_first_and_ties_keep_corpus_order() {
        let index = Bm25::new([
            "rotate the database password",
            "bake bread for the team",
            "database backup is slow",
            "the database password expired",
        ]);
        assert_eq!(index.top("database password", 10), [0, 3, 2]);
        assert_eq!(index.top("the and of", 10), Vec::<usize>::new());
        assert_eq!(index.top("database", 2), [0, 2]);
    }
}
