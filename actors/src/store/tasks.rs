//! Task reads: an org's open headers when its actor starts, tasks and
//! headers by id (within one org or across orgs), events, list pages, and
//! the orgs whose leases must be watched.

use std::collections::HashMap;
use std::iter;

use super::rows::{EventRow, FullRow, HeaderRow, OrgIdRow, OrgTaskRow};
use super::{records, Arg, BackendRow, Result, Store};
use crate::api::ListTasks;
use crate::domain::order::ListKey;
use crate::domain::{OrgId, StoredEvent, StoredTask, TaskHeader, TaskId, TaskStatus};

/// The columns `HeaderRow` reads.
const HEADER_COLUMNS: &str = "task_id, status, priority, assignee, tags, blocked_by, \
     parent_task_id, created_at, updated_at, lease_id, lease_expires_at, lease_seconds, \
     attempts, max_attempts, run_at, retry, retries, schedule_id, scheduled_for";
/// The columns `FullRow` reads.
const FULL_COLUMNS: &str = "task_id, status, priority, assignee, tags, blocked_by, \
     parent_task_id, created_at, updated_at, lease_id, lease_expires_at, lease_seconds, \
     attempts, max_attempts, run_at, retry, retries, schedule_id, scheduled_for, title, \
     description, metadata, output";

fn placeholders(start: usize, n: usize) -> String {
    (start..start + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Store {
    /// Headers of every task not yet finished: what an org actor holds.
    pub async fn open_task_headers(&self, org: OrgId) -> Result<Vec<TaskHeader>> {
        let sql = format!(
            "SELECT {HEADER_COLUMNS} FROM tasks WHERE org_id = $1 AND finished_rank IS NULL \
             AND status_rank < {finished}",
            finished = TaskStatus::FIRST_FINISHED_RANK
        );
        let rows: Vec<HeaderRow> = self.org_rows(&sql, org).await?;
        records(rows)
    }

    pub async fn task_headers(&self, org: OrgId, ids: &[TaskId]) -> Result<Vec<TaskHeader>> {
        let rows: Vec<HeaderRow> = self.rows_by_ids(HEADER_COLUMNS, org, ids).await?;
        records(rows)
    }

    /// The org's tasks with these ids, in the order of `ids` (an id with no
    /// task is left out).
    pub async fn tasks(&self, org: OrgId, ids: &[TaskId]) -> Result<Vec<StoredTask>> {
        let rows: Vec<FullRow> = self.rows_by_ids(FULL_COLUMNS, org, ids).await?;
        let mut tasks: Vec<StoredTask> = records(rows)?;
        let place: HashMap<TaskId, usize> =
            ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        tasks.sort_by_key(|t| place.get(&t.header.task_id).copied());
        Ok(tasks)
    }

    /// `columns` of the org's tasks with these ids.
    async fn rows_by_ids<R: BackendRow>(
        &self,
        columns: &str,
        org: OrgId,
        ids: &[TaskId],
    ) -> Result<Vec<R>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {columns} FROM tasks WHERE org_id = $1 AND task_id IN ({})",
            placeholders(2, ids.len())
        );
        let args = iter::once(org.to_string())
            .chain(ids.iter().map(|id| id.to_string()))
            .map(Arg::Text)
            .collect();
        self.fetch_all(&sql, args).await
    }

    /// Tasks of several orgs in one query, for grouped reads.
    pub async fn tasks_by_keys(
        &self,
        keys: &[(OrgId, TaskId)],
    ) -> Result<Vec<(OrgId, StoredTask)>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        // Padded with NULL keys to a power of two, so the text of the query
        // takes a few forms, each prepared once (see `commit::padded`).
        let slots = keys.len().next_power_of_two();
        let pairs: Vec<String> = (0..slots)
            .map(|i| format!("(${}, ${})", 2 * i + 1, 2 * i + 2))
            .collect();
        // A join with the key list, not `(org_id, task_id) IN (...)`, which
        // SQLite answers with a scan of the whole table.
        let sql = format!(
            "SELECT t.org_id, {} FROM (VALUES {}) AS v \
             JOIN tasks AS t ON t.org_id = v.column1 AND t.task_id = v.column2",
            FULL_COLUMNS
                .split(", ")
                .map(|c| format!("t.{}", c.trim()))
                .collect::<Vec<_>>()
                .join(", "),
            pairs.join(", ")
        );
        let args = keys
            .iter()
            .flat_map(|(org, task)| [org.to_string(), task.to_string()])
            .map(Arg::Text)
            .chain(std::iter::repeat_n(Arg::NullText, 2 * (slots - keys.len())))
            .collect();
        let rows: Vec<OrgTaskRow> = self.fetch_all(&sql, args).await?;
        records(rows)
    }

    /// The task's events, oldest first.
    pub async fn task_events(&self, org: OrgId, task: TaskId) -> Result<Vec<StoredEvent>> {
        let rows: Vec<EventRow> = self
            .fetch_all(
                &Self::events_in_order(
                    &[
                        "task_id",
                        "from_status",
                        "to_status",
                        "agent_id",
                        "at",
                        "note",
                        "lease_expired",
                    ],
                    "t.org_id = $1 AND t.task_id = $2",
                ),
                vec![Arg::Text(org.to_string()), Arg::Text(task.to_string())],
            )
            .await?;
        records(rows)
    }

    /// Up to `limit` of the org's finished tasks that match `query`, in
    /// list order, strictly after `after`. The org actor lists open tasks;
    /// a list goes on here where they end. Empty when `query` asks only for
    /// open statuses.
    pub async fn list_finished_tasks(
        &self,
        org: OrgId,
        query: &ListTasks,
        after: Option<ListKey>,
        limit: u32,
    ) -> Result<Vec<StoredTask>> {
        // A finished task is never waiting.
        let only_open =
            !query.statuses.is_empty() && !query.statuses.iter().any(|s| s.is_terminal());
        if only_open || query.waiting == Some(true) {
            return Ok(Vec::new());
        }
        let mut args = vec![Arg::Text(org.to_string())];
        let mut sql = format!(
            "SELECT * FROM (SELECT {FULL_COLUMNS} FROM tasks \
             WHERE org_id = $1 AND finished_rank IS NOT NULL"
        );
        self.push_list_filters(&mut sql, &mut args, query, after, "finished_rank");
        sql.push_str(" ORDER BY finished_rank, priority, created_at, task_id");
        args.push(Arg::Int(i64::from(limit)));
        sql.push_str(&format!(" LIMIT ${}) AS settled", args.len()));
        if let Store::Sqlite(_) = self {
            // Tasks finished since the writer last settled: a few
            // milliseconds' worth, sorted in with the settled ones below.
            sql.push_str(&format!(
                " UNION ALL SELECT {FULL_COLUMNS} FROM tasks INDEXED BY tasks_unsettled \
                 WHERE finished_rank IS NULL AND status_rank >= {finished} AND org_id = $1",
                finished = TaskStatus::FIRST_FINISHED_RANK
            ));
            self.push_list_filters(&mut sql, &mut args, query, after, "status_rank");
        }
        let rows: Vec<FullRow> = self.fetch_all(&sql, args).await?;
        let mut tasks: Vec<StoredTask> = records(rows)?;
        tasks.sort_by_key(|t| ListKey::of(&t.header));
        tasks.truncate(limit as usize);
        Ok(tasks)
    }

    /// Appends the conditions of `query` and of the cursor `after` on
    /// finished tasks whose rank is in `rank_column`, binding their values.
    fn push_list_filters(
        &self,
        sql: &mut String,
        args: &mut Vec<Arg>,
        query: &ListTasks,
        after: Option<ListKey>,
        rank_column: &str,
    ) {
        let mut push = |sql: &mut String, fragment: &str, a: Arg| {
            args.push(a);
            sql.push_str(&fragment.replace("$?", &format!("${}", args.len())));
        };
        if !query.statuses.is_empty() {
            sql.push_str(" AND status IN (");
            for (i, s) in query.statuses.iter().enumerate() {
                push(
                    sql,
                    if i == 0 { "$?" } else { ", $?" },
                    Arg::Text(s.as_str().to_owned()),
                );
            }
            sql.push(')');
        }
        if let Some(parent) = query.parent {
            push(
                sql,
                " AND parent_task_id = $?",
                Arg::Text(parent.to_string()),
            );
        }
        if let Some(assignee) = &query.assignee {
            push(sql, " AND assignee = $?", Arg::Text(assignee.clone()));
        }
        if let Some(p) = query.priority_max {
            push(sql, " AND priority <= $?", Arg::Int(i64::from(p)));
        }
        if !query.tags.is_empty() {
            sql.push_str(match self {
                Store::Sqlite(_) => " AND EXISTS (SELECT 1 FROM json_each(tasks.tags) AS t WHERE t.value IN (",
                Store::Postgres(..) => " AND EXISTS (SELECT 1 FROM jsonb_array_elements_text(tasks.tags::jsonb) AS t(value) WHERE t.value IN (",
            });
            for (i, t) in query.tags.iter().enumerate() {
                push(
                    sql,
                    if i == 0 { "$?" } else { ", $?" },
                    Arg::Text(t.clone()),
                );
            }
            sql.push_str("))");
        }
        if let Some(k) = after.filter(|k| k.rank >= TaskStatus::FIRST_FINISHED_RANK) {
            push(
                sql,
                &format!(" AND ({rank_column}, priority, created_at, task_id) > ($?"),
                Arg::Int(k.rank),
            );
            push(sql, ", $?", Arg::Int(i64::from(k.priority)));
            push(sql, ", $?", Arg::Int(k.created_at));
            push(sql, ", $?)", Arg::Text(k.task_id.to_string()));
        }
    }

    /// Orgs with something due at a time: a lease to expire, a waiting
    /// task to release, an active schedule to tick. Their actors must run
    /// for it to happen on time.
    pub async fn orgs_needing_timers(&self) -> Result<Vec<OrgId>> {
        let rows: Vec<OrgIdRow> = self
            .fetch_all(
                "SELECT org_id FROM (SELECT org_id FROM tasks \
                 WHERE finished_rank IS NULL AND lease_expires_at IS NOT NULL \
                 UNION SELECT org_id FROM tasks WHERE status = 'pending' AND run_at IS NOT NULL \
                 UNION SELECT org_id FROM schedules WHERE active <> 0) due \
                 WHERE due.org_id NOT IN (SELECT org_id FROM orgs WHERE deleted_at IS NOT NULL)",
                Vec::new(),
            )
            .await?;
        records(rows)
    }
}
