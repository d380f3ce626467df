//! `POST /tasks/search`: recall by meaning over the org's task history.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Decode, Object, Text, Unavailable, NON_BLANK_PATTERN};
use crate::domain::{TaskId, TaskStatus};

pub const DEFAULT_SEARCH_LIMIT: u8 = 3;
pub const MAX_SEARCH_LIMIT: u8 = 25;
/// The longest query, in characters.
pub const MAX_QUERY_CHARS: usize = 4_096;

#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchTasks {
    /// What to look for, in words.
    #[schemars(length(min = 1, max = MAX_QUERY_CHARS), regex(pattern = NON_BLANK_PATTERN))]
    pub query: String,
    /// How many results (1 to 25).
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = MAX_SEARCH_LIMIT))]
    pub limit: u8,
}

fn default_limit() -> u8 {
    DEFAULT_SEARCH_LIMIT
}

impl Decode for SearchTasks {}

/// One task recalled, best first.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SearchHit {
    pub task_id: TaskId,
    pub title: Text,
    pub status: TaskStatus,
    /// A completed task's output.
    pub output: Option<Object>,
    /// Cosine similarity, in [-1, 1].
    pub score: f32,
}

/// The results, or why there are none.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SearchAnswer {
    Results { results: Vec<SearchHit> },
    Unavailable(Unavailable),
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn search_needs_a_query_and_a_limit_in_range() {
        let s = SearchTasks::decode(&json!({"query": "flaky deploy"})).unwrap();
        assert_eq!(s.limit, DEFAULT_SEARCH_LIMIT);
        assert_eq!(
            SearchTasks::decode(&json!({"query": "q", "limit": 25}))
                .unwrap()
                .limit,
            25
        );
        for bad in [
            json!({}),
            json!({"query": ""}),
            json!({"query": 3}),
            json!({"query": "q", "limit": 0}),
            json!({"query": "q", "limit": 26}),
            json!({"query": "q", "limit": "3"}),
            json!({"query": "q", "extra": 1}),
        ] {
            assert!(SearchTasks::decode(&bad).is_err(), "{bad}");
        }
    }
}
