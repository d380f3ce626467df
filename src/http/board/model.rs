//! What the pages show, taken from the API's own answer types: plain
//! strings and numbers, ready for templates that escape every one of them.
//!
//! Content fields may hold anything an agent wrote. A title or description
//! of a client-encrypted org is an envelope, not a string: it is shown as
//! its JSON text. Nothing here is ever marked safe for HTML.

use serde_json::Value;
use taskq_actors::api::{
    ListedTask, Object, SearchHit, TaskDetail, TaskEvent, TaskSummary, TaskView, Text,
};
use taskq_actors::domain::open::StatusCounts;
use taskq_actors::domain::{TaskId, TaskStatus};

use super::times::When;

/// A status as people read it.
pub fn status_label(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::Pending => "Pending",
        TaskStatus::Paused => "Paused",
        TaskStatus::InProgress => "In progress",
        TaskStatus::Feedback => "Feedback",
        TaskStatus::Blocked => "Blocked",
        TaskStatus::Canceled => "Canceled",
        TaskStatus::Completed => "Completed",
        TaskStatus::Failed => "Failed",
    }
}

/// A title, description or note: the text itself, an envelope as JSON.
pub fn text(text: &Text) -> String {
    match text {
        Text::Plain(s) => s.clone(),
        Text::Envelope(envelope) => Value::Object(envelope.clone()).to_string(),
    }
}

/// An object as indented JSON.
pub fn pretty(object: &Object) -> String {
    format!("{:#}", Value::Object(object.clone()))
}

fn ids(ids: &[TaskId]) -> Vec<String> {
    ids.iter().map(TaskId::to_string).collect()
}

/// A task on the board: a list item.
#[derive(Debug, Clone)]
pub struct Card {
    pub id: String,
    pub title: String,
    pub status: TaskStatus,
    pub priority: u8,
    pub assignee: Option<String>,
    pub tags: Vec<String>,
    pub blocked_by: Vec<String>,
    /// When its lease runs out, for a whole task that is leased.
    pub lease_expires_at: Option<When>,
    /// When a waiting task may be claimed.
    pub run_at: Option<When>,
}

impl From<&TaskSummary> for Card {
    fn from(t: &TaskSummary) -> Card {
        Card {
            id: t.task_id.to_string(),
            title: text(&t.title),
            status: t.status,
            priority: t.priority,
            assignee: t.assignee.clone(),
            tags: t.tags.clone(),
            blocked_by: ids(&t.blocked_by),
            lease_expires_at: None,
            run_at: t.run_at.map(When::utc),
        }
    }
}

impl From<&TaskView> for Card {
    fn from(t: &TaskView) -> Card {
        Card {
            id: t.task_id.to_string(),
            title: text(&t.title),
            status: t.status,
            priority: t.priority,
            assignee: t.assignee.clone(),
            tags: t.tags.clone(),
            blocked_by: ids(&t.blocked_by),
            lease_expires_at: t.lease.map(|l| When::utc(l.lease_expires_at)),
            // A whole task carries its run_at when past too; the board's
            // columns are lean items, which carry it only while it waits.
            run_at: None,
        }
    }
}

impl From<&ListedTask> for Card {
    fn from(t: &ListedTask) -> Card {
        match t {
            ListedTask::Lean(t) => Card::from(t),
            ListedTask::Full(t) => Card::from(&**t),
        }
    }
}

/// A board column: one status and its cards, and what its count counts.
pub struct Column {
    pub status: TaskStatus,
    pub label: &'static str,
    pub cards: Vec<Card>,
    /// The org's tasks of the status, when that is what the column has
    /// under the page's filters: an open status, filtered by status at
    /// most (the org's actor counts those; finished ones it does not keep).
    pub total: Option<usize>,
    /// Whether the cards are all the column has under the page's filters,
    /// so that their number is its total.
    pub whole: bool,
}

impl Column {
    /// Whether it shows as many cards as its total (when that is known).
    pub fn all_shown(&self) -> bool {
        self.total.is_none_or(|total| total == self.cards.len())
    }
}

/// What a page's list covers, for its columns' counts.
pub struct Scope {
    /// The statuses the page is filtered to (none: every status).
    pub statuses: Vec<String>,
    /// Whether a filter other than the status narrows the list (then the
    /// org's counts are not the columns').
    pub narrowed: bool,
    /// Whether the page holds the whole list: the first page, and no next.
    pub whole: bool,
}

/// The org's open tasks of a status, from the counts its actor publishes.
pub fn total(counts: &StatusCounts, status: TaskStatus) -> Option<usize> {
    match status {
        TaskStatus::Pending => Some(counts.pending),
        TaskStatus::Paused => Some(counts.paused),
        TaskStatus::InProgress => Some(counts.in_progress),
        TaskStatus::Feedback => Some(counts.feedback),
        TaskStatus::Blocked => Some(counts.blocked),
        TaskStatus::Canceled | TaskStatus::Completed | TaskStatus::Failed => None,
    }
}

/// Cards grouped by status, in the list's order (open work first); every
/// status has a column, empty or not. A column's total is the org's count
/// when that counts what the column has (see [`Column::total`]); else its
/// cards are its total when the page holds all it has: the whole list, or
/// a status the page's filter leaves out. Otherwise its total is unknown:
/// it counts the cards on this page.
pub fn columns(cards: Vec<Card>, counts: Option<StatusCounts>, scope: &Scope) -> Vec<Column> {
    let mut columns: Vec<Column> = TaskStatus::ALL
        .into_iter()
        .map(|status| {
            let listed =
                scope.statuses.is_empty() || scope.statuses.iter().any(|s| s == status.as_str());
            let total = counts
                .as_ref()
                .filter(|_| listed && !scope.narrowed)
                .and_then(|c| total(c, status));
            Column {
                status,
                label: status_label(status),
                cards: Vec::new(),
                total,
                whole: scope.whole || !listed,
            }
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
    pub at: When,
    pub from: Option<TaskStatus>,
    pub to: TaskStatus,
    pub agent: String,
    pub note: Option<String>,
}

impl From<&TaskEvent> for Event {
    fn from(e: &TaskEvent) -> Event {
        Event {
            at: When::utc(e.timestamp),
            from: e.from_status,
            to: e.to_status,
            agent: e.agent_id.clone(),
            note: e.note.as_ref().map(text),
        }
    }
}

/// A task with everything its page shows.
pub struct Task {
    pub id: String,
    pub title: String,
    pub description: Option<String>,
    pub status: TaskStatus,
    pub priority: u8,
    pub assignee: Option<String>,
    pub tags: Vec<String>,
    pub metadata: String,
    pub output: Option<String>,
    pub parent: Option<String>,
    pub created_at: When,
    pub updated_at: When,
    pub attempts: u8,
    pub max_attempts: u8,
    pub lease_expires_at: Option<When>,
    /// When it may be claimed, if it was given a time.
    pub run_at: Option<When>,
    /// Its retry policy, as the page says it, and the retries so far.
    pub retry: Option<String>,
    pub retries: u8,
    /// The schedule whose tick created it, and that tick's time.
    pub schedule: Option<(String, When)>,
    /// The blockers and their statuses.
    pub dependencies: Vec<(String, TaskStatus)>,
    /// Oldest first; a task asked for alone always has it.
    pub history: Option<Vec<Event>>,
}

impl From<&TaskDetail> for Task {
    fn from(detail: &TaskDetail) -> Task {
        let t = &detail.task;
        Task {
            id: t.task_id.to_string(),
            title: text(&t.title),
            description: t.description.as_ref().map(text).filter(|d| !d.is_empty()),
            status: t.status,
            priority: t.priority,
            assignee: t.assignee.clone(),
            tags: t.tags.clone(),
            metadata: pretty(&t.metadata),
            output: t.output.as_ref().map(pretty),
            parent: t.parent_task_id.map(|p| p.to_string()),
            created_at: When::utc(t.created_at),
            updated_at: When::utc(t.updated_at),
            attempts: t.attempts,
            max_attempts: t.max_attempts,
            lease_expires_at: t.lease.map(|l| When::utc(l.lease_expires_at)),
            run_at: t.run_at.map(When::utc),
            retry: t.retry.map(|r| {
                format!(
                    "up to {} retries, {} s doubling to at most {} s",
                    r.max_retries, r.backoff_seconds, r.max_backoff_seconds
                )
            }),
            retries: t.retries,
            schedule: t
                .schedule_id
                .zip(t.scheduled_for)
                .map(|(id, at)| (id.to_string(), When::utc(at))),
            dependencies: detail
                .dependencies
                .iter()
                .map(|d| (d.task_id.to_string(), d.status))
                .collect(),
            history: detail
                .history
                .as_ref()
                .map(|events| events.iter().map(Event::from).collect()),
        }
    }
}

/// A search result.
pub struct Found {
    pub id: String,
    pub title: String,
    pub status: TaskStatus,
    pub score: String,
}

impl From<&SearchHit> for Found {
    fn from(hit: &SearchHit) -> Found {
        Found {
            id: hit.task_id.to_string(),
            title: text(&hit.title),
            status: hit.status,
            score: format!("{:.2}", hit.score),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use taskq_actors::api::Timestamp;

    use super::*;

    fn lean(id: &str, title: Text, status: TaskStatus) -> ListedTask {
        ListedTask::Lean(TaskSummary {
            task_id: id.parse().unwrap(),
            title,
            status,
            priority: 3,
            updated_at: Timestamp(0),
            assignee: None,
            tags: Vec::new(),
            blocked_by: Vec::new(),
            parent_task_id: None,
            run_at: None,
        })
    }

    #[test]
    fn cards_fall_into_their_status_columns_in_list_order() {
        let (a, b, c) = (
            "00000000-0000-7000-8000-00000000000a",
            "00000000-0000-7000-8000-00000000000b",
            "00000000-0000-7000-8000-00000000000c",
        );
        let envelope = Object::from_iter([("__service_enc__".to_owned(), json!({}))]);
        let cards = [
            lean(a, "A".into(), TaskStatus::Blocked),
            lean(b, "B".into(), TaskStatus::Pending),
            lean(c, Text::Envelope(envelope), TaskStatus::Pending),
        ]
        .iter()
        .map(Card::from)
        .collect();
        let counts = StatusCounts {
            pending: 7,
            ..StatusCounts::default()
        };
        let everything = Scope {
            statuses: Vec::new(),
            narrowed: false,
            whole: false,
        };
        let columns = columns(cards, Some(counts), &everything);
        assert_eq!(columns[0].total, Some(7));
        assert_eq!(columns[4].total, Some(0));
        assert_eq!(columns[TaskStatus::ALL.len() - 1].total, None);
        let order: Vec<TaskStatus> = columns.iter().map(|c| c.status).collect();
        assert_eq!(order, TaskStatus::ALL);
        let pending: Vec<_> = columns[0].cards.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(pending, [b, c]);
        assert_eq!(columns[0].cards[1].title, r#"{"__service_enc__":{}}"#);
        assert_eq!(columns[4].status, TaskStatus::Blocked);
        assert_eq!(columns[4].cards[0].id, a);
    }

    fn columns_of(statuses: &[&str], narrowed: bool, whole: bool) -> Vec<Column> {
        let counts = StatusCounts {
            pending: 40,
            in_progress: 2,
            ..StatusCounts::default()
        };
        let card = lean(
            "00000000-0000-7000-8000-00000000000a",
            "A".into(),
            TaskStatus::Completed,
        );
        let scope = Scope {
            statuses: statuses.iter().map(|s| (*s).to_owned()).collect(),
            narrowed,
            whole,
        };
        columns(vec![Card::from(&card)], Some(counts), &scope)
    }

    fn of(columns: &[Column], status: TaskStatus) -> (Option<usize>, bool) {
        let c = columns.iter().find(|c| c.status == status).unwrap();
        (c.total, c.whole)
    }

    #[test]
    fn a_columns_count_is_its_total_only_when_it_is_known() {
        // A page of a longer list: open columns have the org's counts,
        // finished ones only what this page shows.
        let page = columns_of(&[], false, false);
        assert_eq!(of(&page, TaskStatus::Pending), (Some(40), false));
        assert_eq!(of(&page, TaskStatus::Completed), (None, false));
        // The whole list: every column's cards are all it has.
        let all = columns_of(&[], false, true);
        assert_eq!(of(&all, TaskStatus::Completed), (None, true));
        assert_eq!(of(&all, TaskStatus::Pending), (Some(40), true));
        // Filtered by tag: the org's counts are not the column's.
        let tagged = columns_of(&[], true, false);
        assert_eq!(of(&tagged, TaskStatus::Pending), (None, false));
        // Filtered by status: the statuses left out have none.
        let pending = columns_of(&["pending"], false, false);
        assert_eq!(of(&pending, TaskStatus::Pending), (Some(40), false));
        assert_eq!(of(&pending, TaskStatus::InProgress), (None, true));
        assert_eq!(of(&pending, TaskStatus::Completed), (None, true));
    }
}
