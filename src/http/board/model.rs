//! What the pages show, read from the API's own answers (the JSON bodies
//! the operations return): plain strings and numbers, ready for templates
//! that escape every one of them.
//!
//! Content fields may hold anything an agent wrote. A title or description
//! of a client-encrypted org is an object, not a string: it is shown as
//! its JSON text. Nothing here is ever marked safe for HTML.

use serde_json::Value;

/// The statuses in list order: open work first.
pub const STATUSES: [&str; 8] = [
    "pending",
    "paused",
    "in_progress",
    "feedback",
    "blocked",
    "completed",
    "failed",
    "canceled",
];

/// A status as people read it.
pub fn status_label(status: &str) -> &'static str {
    match status {
        "pending" => "Pending",
        "paused" => "Paused",
        "in_progress" => "In progress",
        "feedback" => "Feedback",
        "blocked" => "Blocked",
        "completed" => "Completed",
        "failed" => "Failed",
        "canceled" => "Canceled",
        _ => "Unknown",
    }
}

/// A field that holds text: the string itself, anything else as JSON.
pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn opt_text(v: &Value) -> Option<String> {
    (!v.is_null()).then(|| text(v))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(text).collect())
        .unwrap_or_default()
}

/// JSON as indented text.
pub fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// A task on the board: a list item.
#[derive(Debug, Clone)]
pub struct Card {
    pub id: String,
    pub title: String,
    pub status: String,
    pub priority: u64,
    pub assignee: Option<String>,
    pub tags: Vec<String>,
    pub blocked_by: Vec<String>,
}

impl Card {
    pub fn from_json(v: &Value) -> Card {
        Card {
            id: text(&v["task_id"]),
            title: text(&v["title"]),
            status: text(&v["status"]),
            priority: v["priority"].as_u64().unwrap_or(3),
            assignee: opt_text(&v["assignee"]),
            tags: strings(&v["tags"]),
            blocked_by: strings(&v["blocked_by"]),
        }
    }
}

/// A board column: one status and its cards.
pub struct Column {
    pub status: &'static str,
    pub label: &'static str,
    pub cards: Vec<Card>,
}

/// Cards grouped by status, in list order (open work first); every
/// status has a column, empty or not.
pub fn columns(cards: Vec<Card>) -> Vec<Column> {
    let mut columns: Vec<Column> = STATUSES
        .iter()
        .map(|s| Column {
            status: s,
            label: status_label(s),
            cards: Vec::new(),
        })
        .collect();
    for card in cards {
        if let Some(c) = columns.iter_mut().find(|c| c.status == card.status) {
            c.cards.push(card);
        }
    }
    columns
}

/// One state event of a task's history.
pub struct Event {
    pub at: String,
    pub from: Option<String>,
    pub to: String,
    pub agent: String,
    pub note: Option<String>,
}

/// A task with everything its page shows.
pub struct Task {
    pub id: String,
    pub title: String,
    pub description: Option<String>,
    pub status: String,
    pub priority: u64,
    pub assignee: Option<String>,
    pub tags: Vec<String>,
    pub metadata: String,
    pub output: Option<String>,
    pub parent: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub attempts: u64,
    pub max_attempts: u64,
    pub lease_expires_at: Option<String>,
    /// The blockers and their statuses.
    pub dependencies: Vec<(String, String)>,
    pub history: Vec<Event>,
}

impl Task {
    pub fn from_json(v: &Value) -> Task {
        let metadata = match &v["metadata"] {
            Value::Null => "{}".to_owned(),
            m => pretty(m),
        };
        Task {
            id: text(&v["task_id"]),
            title: text(&v["title"]),
            description: opt_text(&v["description"]).filter(|d| !d.is_empty()),
            status: text(&v["status"]),
            priority: v["priority"].as_u64().unwrap_or(3),
            assignee: opt_text(&v["assignee"]),
            tags: strings(&v["tags"]),
            metadata,
            output: (!v["output"].is_null()).then(|| pretty(&v["output"])),
            parent: opt_text(&v["parent_task_id"]),
            created_at: text(&v["created_at"]),
            updated_at: text(&v["updated_at"]),
            attempts: v["attempts"].as_u64().unwrap_or(0),
            max_attempts: v["max_attempts"].as_u64().unwrap_or(0),
            lease_expires_at: opt_text(&v["lease_expires_at"]),
            dependencies: v["dependencies"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|d| (text(&d["task_id"]), text(&d["status"])))
                        .collect()
                })
                .unwrap_or_default(),
            history: v["history"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|e| Event {
                            at: text(&e["timestamp"]),
                            from: opt_text(&e["from_status"]),
                            to: text(&e["to_status"]),
                            agent: text(&e["agent_id"]),
                            note: opt_text(&e["note"]),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// A search result.
pub struct Found {
    pub id: String,
    pub title: String,
    pub status: String,
    pub score: String,
}

impl Found {
    pub fn from_json(v: &Value) -> Found {
        Found {
            id: text(&v["task_id"]),
            title: text(&v["title"]),
            status: text(&v["status"]),
            score: v["score"]
                .as_f64()
                .map(|s| format!("{s:.2}"))
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cards_fall_into_their_status_columns_in_list_order() {
        let cards = [
            json!({"task_id": "a", "title": "A", "status": "blocked", "priority": 1}),
            json!({"task_id": "b", "title": "B", "status": "pending", "priority": 2}),
            json!({"task_id": "c", "title": {"__service_enc__": {}}, "status": "pending"}),
        ]
        .iter()
        .map(Card::from_json)
        .collect();
        let columns = columns(cards);
        assert_eq!(columns.len(), 8);
        assert_eq!(columns[0].status, "pending");
        let pending: Vec<_> = columns[0].cards.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(pending, ["b", "c"]);
        assert_eq!(columns[0].cards[1].title, r#"{"__service_enc__":{}}"#);
        assert_eq!(columns[4].cards[0].id, "a");
    }
}
