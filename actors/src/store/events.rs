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

use sqlx::FromRow;

use super::{Arg, Result, Store};
use crate::domain::OrgId;

/// One state event of an org as the log gives it: ids and statuses, never
/// its note.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct LoggedEvent {
    pub event_id: i64,
    pub task_id: String,
    /// `None` for a creation.
    pub from_status: Option<String>,
    pub to_status: String,
    pub agent_id: String,
    pub at: i64,
    /// 1 when a lease's expiry made it.
    pub lease_expired: Option<i64>,
}

impl LoggedEvent {
    pub fn lease_expired(&self) -> bool {
        self.lease_expired.is_some_and(|e| e != 0)
    }
}

impl Store {
    /// Up to `limit` of the org's events after `after`, oldest first.
    pub async fn org_events_after(
        &self,
        org: OrgId,
        after: i64,
        limit: i64,
    ) -> Result<Vec<LoggedEvent>> {
        self.fetch_all(
            "SELECT event_id, task_id, from_status, to_status, agent_id, at, lease_expired \
             FROM task_events WHERE org_id = $1 AND event_id > $2 ORDER BY event_id LIMIT $3",
            vec![Arg::Text(org.to_string()), Arg::Int(after), Arg::Int(limit)],
        )
        .await
    }
}
