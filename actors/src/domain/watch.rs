//! Watching's pure rules (CONTRACT §10): what a state event is called on
//! the stream, which events a stream's filters keep, how a client says
//! where it left off, and when a wait for tasks is over. No I/O: the
//! stream and the org actor apply them.

use std::collections::HashSet;

use super::error::ValidationError;
use super::webhooks::{event_types, EventType, Subscription};
use super::{TaskId, TaskStatus};

/// How many task ids one stream may follow.
pub const MAX_WATCHED_TASKS: usize = 100;

/// The name of a state event on the stream: the most specific of the types
/// it makes (§7's order: the cause, then the outcome). A change that makes
/// none but `task.status_changed` (a pause, a release, a task sent back
/// for feedback) has no name, so the stream sends it as an unnamed event,
/// which a browser's `EventSource` hands to `onmessage`; its `data` says
/// `task.status_changed`, as a webhook delivery of it would.
pub fn event_name(from: Option<TaskStatus>, to: TaskStatus, lease_expired: bool) -> EventType {
    event_types(from, to, lease_expired)
        .next()
        .unwrap_or(EventType::StatusChanged)
}

/// What a stream keeps: the types asked for (`None`: all) and the tasks
/// asked for (`None`: all).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamFilter {
    types: Option<Subscription>,
    tasks: Option<HashSet<TaskId>>,
}

impl StreamFilter {
    /// From the query's `types` and `task_id`, each comma-separated. A
    /// type is one of §7's (`task.status_changed` and `*` keep every
    /// transition); an empty list, an unknown type, a malformed id or
    /// more than [`MAX_WATCHED_TASKS`] ids is refused, naming the value.
    pub fn parse(types: Option<&str>, tasks: Option<&str>) -> Result<Self, ValidationError> {
        let types = match types {
            None => None,
            Some(text) => {
                let names = items(text, "types")?;
                Some(
                    Subscription::parse(&names)
                        .map_err(|e| ValidationError::new(format!("types: {e}")))?,
                )
            }
        };
        let tasks = match tasks {
            None => None,
            Some(text) => {
                let ids = items(text, "task_id")?
                    .iter()
                    .map(|id| {
                        id.parse::<TaskId>().map_err(|_| {
                            ValidationError::new(format!("task_id: {id:?} is not a task id"))
                        })
                    })
                    .collect::<Result<HashSet<TaskId>, _>>()?;
                if ids.len() > MAX_WATCHED_TASKS {
                    return Err(ValidationError::new(format!(
                        "task_id: at most {MAX_WATCHED_TASKS} ids"
                    )));
                }
                Some(ids)
            }
        };
        Ok(Self { types, tasks })
    }

    /// Whether the stream sends this state event.
    pub fn keeps(
        &self,
        task: TaskId,
        from: Option<TaskStatus>,
        to: TaskStatus,
        lease_expired: bool,
    ) -> bool {
        let task_kept = self
            .tasks
            .as_ref()
            .is_none_or(|tasks| tasks.contains(&task));
        let type_kept = self
            .types
            .as_ref()
            .is_none_or(|types| event_types(from, to, lease_expired).any(|t| types.matches(t)));
        task_kept && type_kept
    }
}

/// The non-blank items of a comma-separated list; none at all is refused.
fn items(text: &str, field: &str) -> Result<Vec<String>, ValidationError> {
    let items: Vec<String> = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if items.is_empty() {
        return Err(ValidationError::new(format!("{field}: empty list")));
    }
    Ok(items)
}

/// Where a client left off: `Last-Event-ID` (which wins: a browser sends it
/// on reconnecting, to the URL it first opened) or `since`, an event id.
/// `None`: the stream starts with the next event.
pub fn resume_after(
    last_event_id: Option<&str>,
    since: Option<&str>,
) -> Result<Option<i64>, ValidationError> {
    let (text, field) = match (last_event_id, since) {
        (Some(header), _) => (header, "Last-Event-ID"),
        (None, Some(query)) => (query, "since"),
        (None, None) => return Ok(None),
    };
    match text.trim().parse::<i64>() {
        Ok(id) if id >= 0 => Ok(Some(id)),
        _ => Err(ValidationError::new(format!(
            "{field}: {text:?} is not an event id (a whole number, 0 or more)"
        ))),
    }
}

/// What `POST /tasks/wait` waits for.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum WaitUntil {
    /// Every task found is finished.
    #[default]
    All,
    /// At least one task found is finished.
    Any,
}

impl WaitUntil {
    /// Whether a wait on `found` tasks, `finished` of them finished, is
    /// over. Ids not found do not count: a wait for all of none is over
    /// at once, a wait for any of none can never be.
    pub fn holds(self, found: usize, finished: usize) -> bool {
        match self {
            WaitUntil::All => finished >= found,
            WaitUntil::Any => finished > 0,
        }
    }

    /// Whether nothing can still change the answer: the wait is over, or
    /// there is nothing to wait for.
    pub fn settled(self, found: usize, finished: usize) -> bool {
        found == 0 || self.holds(found, finished)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskStatus::*;

    #[test]
    fn a_change_is_named_by_its_most_specific_type() {
        let cases = [
            (None, Pending, false, EventType::Created),
            (Some(Pending), InProgress, false, EventType::Claimed),
            (Some(InProgress), Completed, false, EventType::Completed),
            (Some(InProgress), Failed, false, EventType::Failed),
            (Some(Pending), Canceled, false, EventType::Canceled),
            (Some(InProgress), Pending, true, EventType::LeaseExpired),
            (Some(InProgress), Failed, true, EventType::LeaseExpired),
            (Some(Blocked), Pending, false, EventType::Unblocked),
            (Some(Pending), Paused, false, EventType::StatusChanged),
        ];
        for (from, to, expired, name) in cases {
            assert_eq!(event_name(from, to, expired), name, "{from:?} -> {to:?}");
        }
    }

    #[test]
    fn filters_keep_the_types_and_tasks_asked_for() {
        let a = TaskId::new_v7();
        let b = TaskId::new_v7();
        let all = StreamFilter::parse(None, None).unwrap();
        assert!(all.keeps(a, Some(Pending), Paused, false));

        let done = StreamFilter::parse(Some("task.completed, task.failed"), None).unwrap();
        assert!(done.keeps(a, Some(InProgress), Completed, false));
        // A lease that ran out for the last time is a failure too.
        assert!(done.keeps(a, Some(InProgress), Failed, true));
        assert!(!done.keeps(a, Some(Pending), InProgress, false));

        let every = StreamFilter::parse(Some("task.status_changed"), None).unwrap();
        assert!(every.keeps(a, Some(Pending), Paused, false));

        let one = StreamFilter::parse(None, Some(&a.to_string())).unwrap();
        assert!(one.keeps(a, None, Pending, false));
        assert!(!one.keeps(b, None, Pending, false));
    }

    #[test]
    fn bad_filters_are_refused_naming_the_value() {
        let unknown = StreamFilter::parse(Some("task.created,task.exploded"), None).unwrap_err();
        assert!(unknown.to_string().contains("task.exploded"), "{unknown}");
        assert!(StreamFilter::parse(Some(" , "), None).is_err());
        let id = StreamFilter::parse(None, Some("not-a-uuid")).unwrap_err();
        assert!(id.to_string().contains("not-a-uuid"), "{id}");
        let many: Vec<String> = (0..=MAX_WATCHED_TASKS)
            .map(|_| TaskId::new_v7().to_string())
            .collect();
        assert!(StreamFilter::parse(None, Some(&many.join(","))).is_err());
        let enough = &many[..MAX_WATCHED_TASKS];
        assert!(StreamFilter::parse(None, Some(&enough.join(","))).is_ok());
    }

    #[test]
    fn the_header_wins_over_the_query_and_ids_are_whole_numbers() {
        assert_eq!(resume_after(None, None).unwrap(), None);
        assert_eq!(resume_after(None, Some("7")).unwrap(), Some(7));
        assert_eq!(resume_after(Some("9"), Some("7")).unwrap(), Some(9));
        assert_eq!(resume_after(Some("0"), None).unwrap(), Some(0));
        assert!(resume_after(Some("-1"), None).is_err());
        assert!(resume_after(None, Some("abc")).is_err());
        assert!(resume_after(Some("1.5"), None).is_err());
    }

    #[test]
    fn a_wait_is_over_when_all_or_any_of_the_tasks_found_are_finished() {
        assert!(!WaitUntil::All.holds(3, 2));
        assert!(WaitUntil::All.holds(3, 3));
        assert!(!WaitUntil::Any.holds(3, 0));
        assert!(WaitUntil::Any.holds(3, 1));
        // Nothing found: all of none holds, any of none never will.
        assert!(WaitUntil::All.holds(0, 0));
        assert!(!WaitUntil::Any.holds(0, 0));
        assert!(WaitUntil::Any.settled(0, 0));
        assert!(!WaitUntil::Any.settled(2, 0));
        assert_eq!(WaitUntil::default(), WaitUntil::All);
    }
}
