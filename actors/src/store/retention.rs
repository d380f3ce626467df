//! What the retention sweep reads: the orgs that keep finished tasks for
//! a time, their eligible tasks a page at a time, and the tasks that name
//! others (so kept tasks keep what they name). The removal itself is a
//! write of the org's actor (`WriteOp::PruneTasks`).

use super::{Arg, Result, Store, StoreError};
use crate::domain::retention::Referrer;
use crate::domain::{OrgId, TaskId, TaskStatus};

#[derive(sqlx::FromRow)]
struct RetainedRow {
    org_id: String,
    retention_days: i64,
}

#[derive(sqlx::FromRow)]
struct TaskIdRow {
    task_id: String,
}

#[derive(sqlx::FromRow)]
struct ReferrerRow {
    task_id: String,
    parent_task_id: Option<String>,
    blocked_by: String,
    status_rank: i64,
    updated_at: i64,
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(what.to_owned())
}

fn task_id(s: &str) -> Result<TaskId> {
    s.parse().map_err(|_| corrupt("task id"))
}

impl Store {
    /// Every org with a retention, and its days.
    pub async fn retained_orgs(&self) -> Result<Vec<(OrgId, i64)>> {
        let rows: Vec<RetainedRow> = self
            .fetch_all(
                "SELECT org_id, retention_days FROM orgs WHERE retention_days IS NOT NULL \
                 AND deleted_at IS NULL ORDER BY org_id",
                vec![],
            )
            .await?;
        rows.into_iter()
            .map(|r| {
                let org = r.org_id.parse().map_err(|_| corrupt("org id"))?;
                Ok((org, r.retention_days))
            })
            .collect()
    }

    /// Up to `limit` finished tasks last changed before `cutoff`, in id
    /// order after `after`.
    pub async fn eligible_tasks(
        &self,
        org: OrgId,
        cutoff: i64,
        after: Option<TaskId>,
        limit: usize,
    ) -> Result<Vec<TaskId>> {
        let rows: Vec<TaskIdRow> = self
            .fetch_all(
                &format!(
                    "SELECT task_id FROM tasks WHERE org_id = $1 AND status_rank >= {} \
                     AND updated_at < $2 AND task_id > $3 ORDER BY task_id LIMIT $4",
                    TaskStatus::FIRST_FINISHED_RANK
                ),
                vec![
                    Arg::Text(org.to_string()),
                    Arg::Int(cutoff),
                    Arg::Text(after.map(|a| a.to_string()).unwrap_or_default()),
                    Arg::Int(i64::try_from(limit).unwrap_or(i64::MAX)),
                ],
            )
            .await?;
        rows.iter().map(|r| task_id(&r.task_id)).collect()
    }

    /// Every task of the org that names a parent or a blocker, and whether
    /// it is itself eligible at `cutoff`.
    pub async fn referrers(&self, org: OrgId, cutoff: i64) -> Result<Vec<Referrer>> {
        let rows: Vec<ReferrerRow> = self
            .fetch_all(
                "SELECT task_id, parent_task_id, blocked_by, status_rank, updated_at FROM tasks \
                 WHERE org_id = $1 AND (parent_task_id IS NOT NULL OR blocked_by <> '[]')",
                vec![Arg::Text(org.to_string())],
            )
            .await?;
        rows.into_iter()
            .map(|r| {
                let blockers: Vec<TaskId> =
                    serde_json::from_str(&r.blocked_by).map_err(|_| corrupt("blocked_by"))?;
                let mut names = blockers;
                if let Some(p) = &r.parent_task_id {
                    names.push(task_id(p)?);
                }
                Ok(Referrer {
                    task_id: task_id(&r.task_id)?,
                    eligible: r.status_rank >= TaskStatus::FIRST_FINISHED_RANK
                        && r.updated_at < cutoff,
                    names,
                })
            })
            .collect()
    }
}

impl Store {
    /// How many tasks and task events the store holds of the org, counted
    /// now (one scan of each table's org index).
    pub async fn stored_counts(&self, org: OrgId) -> Result<(i64, i64)> {
        let org = org.to_string();
        let counts: Option<(i64, i64)> = self
            .fetch_optional(
                "SELECT (SELECT COUNT(*) FROM tasks WHERE org_id = $1), \
                 (SELECT COUNT(*) FROM task_events WHERE org_id = $2)",
                vec![Arg::Text(org.clone()), Arg::Text(org)],
            )
            .await?;
        Ok(counts.unwrap_or((0, 0)))
    }

    /// Up to `limit` of the org's task ids in id order after `after`: the
    /// export's pages.
    pub async fn task_ids_after(
        &self,
        org: OrgId,
        after: Option<TaskId>,
        limit: usize,
    ) -> Result<Vec<TaskId>> {
        let rows: Vec<TaskIdRow> = self
            .fetch_all(
                "SELECT task_id FROM tasks WHERE org_id = $1 AND task_id > $2 \
                 ORDER BY task_id LIMIT $3",
                vec![
                    Arg::Text(org.to_string()),
                    Arg::Text(after.map(|a| a.to_string()).unwrap_or_default()),
                    Arg::Int(i64::try_from(limit).unwrap_or(i64::MAX)),
                ],
            )
            .await?;
        rows.iter().map(|r| task_id(&r.task_id)).collect()
    }
}
