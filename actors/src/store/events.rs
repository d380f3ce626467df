//! The event log as its readers see it: an org's state events after a
//! given id, in id order, which is the org's commit order.
//!
//! Event ids rise within an org in commit order on both backends: SQLite
//! has one writer, which numbers the events of each commit after the last
//! one; PostgreSQL's writers number them from blocks of a sequence, an
//! org's batches all commit on one lane, one commit after another, and a
//! node that takes an org over numbers from a block taken after its last
//! owner stopped writing (`EventLinks`). So when a reader sees an org's
//! event, it sees every earlier one of that org: reading "after the last
//! id seen" never skips one that commits later. The webhook delivery
//! worker reads the log this way (`task_events_org`, migration
//! `0023_webhook_cursors`), and so does the event stream's replay
//! (`watch::stream`), whose live events carry the ids their commit gave
//! them (`WriterConn::apply` answers the first), so that one id means one
//! event whether it was read here or heard live.
//!
//! Each row is read once, here, into a typed [`LoggedEvent`]: a row that
//! does not read is an error naming it (`StoreError::Corrupt`), never an
//! event passed over in silence.

use sqlx::FromRow;

use super::{Arg, Result, Store, StoreError};
use crate::domain::webhooks::{event_types, EventType, Transition};
use crate::domain::{OrgId, TaskId, TaskStatus};

/// One state event of an org as the log gives it: ids and statuses, never
/// its note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedEvent {
    pub event_id: i64,
    pub task_id: TaskId,
    pub transition: Transition,
    pub at: i64,
    /// Made by a lease's expiry.
    pub lease_expired: bool,
}

impl LoggedEvent {
    /// The types it makes, most specific first (`event_types`).
    pub fn types(&self) -> impl Iterator<Item = EventType> {
        let t = &self.transition;
        event_types(t.from_status, t.to_status, self.lease_expired)
    }
}

/// A row of `task_events` as both backends return it.
#[derive(FromRow)]
struct EventRow {
    event_id: i64,
    task_id: String,
    /// `None` for a creation.
    from_status: Option<String>,
    to_status: String,
    agent_id: String,
    at: i64,
    /// 1 when a lease's expiry made it.
    lease_expired: Option<i64>,
}

impl TryFrom<EventRow> for LoggedEvent {
    type Error = StoreError;

    fn try_from(r: EventRow) -> Result<Self> {
        let id = r.event_id;
        let corrupt = |what: &str, value: &str| {
            StoreError::Corrupt(format!("task_events row {id}: {what} {value:?}"))
        };
        let status = |s: &str| TaskStatus::parse(s).ok_or_else(|| corrupt("status", s));
        Ok(LoggedEvent {
            event_id: id,
            task_id: (r.task_id.parse()).map_err(|_| corrupt("task id", &r.task_id))?,
            transition: Transition {
                from_status: r.from_status.as_deref().map(status).transpose()?,
                to_status: status(&r.to_status)?,
                agent_id: r.agent_id,
            },
            at: r.at,
            lease_expired: r.lease_expired.is_some_and(|e| e != 0),
        })
    }
}

impl Store {
    /// Up to `limit` of the org's events after `after`, oldest first; a
    /// row that does not read fails the read, naming it.
    pub async fn org_events_after(
        &self,
        org: OrgId,
        after: i64,
        limit: i64,
    ) -> Result<Vec<LoggedEvent>> {
        let rows: Vec<EventRow> = self
            .fetch_all(
                "SELECT event_id, task_id, from_status, to_status, agent_id, at, lease_expired \
                 FROM task_events WHERE org_id = $1 AND event_id > $2 ORDER BY event_id LIMIT $3",
                vec![Arg::Text(org.to_string()), Arg::Int(after), Arg::Int(limit)],
            )
            .await?;
        rows.into_iter().map(LoggedEvent::try_from).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(to_status: &str) -> EventRow {
        EventRow {
            event_id: 41,
            task_id: "0190a0c2-7f3e-7c1a-9b2d-3e4f5a6b7c8d".into(),
            from_status: Some("in_progress".into()),
            to_status: to_status.into(),
            agent_id: "system".into(),
            at: 7,
            lease_expired: Some(1),
        }
    }

    #[test]
    fn a_row_reads_once_into_a_typed_event_and_a_corrupt_one_is_an_error_naming_it() {
        let event = LoggedEvent::try_from(row("pending")).unwrap();
        assert_eq!(
            event.task_id.to_string(),
            "0190a0c2-7f3e-7c1a-9b2d-3e4f5a6b7c8d"
        );
        assert_eq!(event.transition.from_status, Some(TaskStatus::InProgress));
        assert_eq!(event.transition.to_status, TaskStatus::Pending);
        assert!(event.lease_expired);
        let types: Vec<EventType> = event.types().collect();
        assert_eq!(types, [EventType::LeaseExpired, EventType::StatusChanged]);

        let Err(StoreError::Corrupt(what)) = LoggedEvent::try_from(row("exploded")) else {
            panic!("an unknown status is corrupt");
        };
        assert!(
            what.contains("row 41") && what.contains("exploded"),
            "{what}"
        );
        let bad_id = EventRow {
            task_id: "not-a-task".into(),
            ..row("pending")
        };
        let Err(StoreError::Corrupt(what)) = LoggedEvent::try_from(bad_id) else {
            panic!("a malformed task id is corrupt");
        };
        assert!(
            what.contains("row 41") && what.contains("not-a-task"),
            "{what}"
        );
    }
}
