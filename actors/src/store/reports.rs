//! Computed reports and what they are computed from: each report's sealed
//! JSON keyed by kind (and, for standups, scope, cadence and period), and
//! an org's task histories (headers and state changes, no content).
//! Written and read by the reports actor and the report routes, never by
//! the org actors' writers: a report is derived data.

use std::collections::HashMap;

use super::{Arg, Result, Store, StoreError};
use crate::domain::history::{StateChange, TaskHistory};
use crate::domain::{OrgId, TaskId, TaskStatus};

/// Which report a row holds: `scope`, `cadence` and `period` are empty
/// except for standups.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReportKey {
    pub kind: &'static str,
    pub scope: String,
    pub cadence: String,
    pub period: String,
}

impl ReportKey {
    /// A report an org has one of.
    pub fn single(kind: &'static str) -> Self {
        Self {
            kind,
            scope: String::new(),
            cadence: String::new(),
            period: String::new(),
        }
    }
}

#[derive(Debug)]
pub struct StoredReport {
    pub key: ReportKey,
    pub computed_at: i64,
    pub body: Vec<u8>,
}

#[derive(sqlx::FromRow)]
struct ReportRow {
    scope: String,
    cadence: String,
    period: String,
    computed_at: i64,
    body: Vec<u8>,
}

#[derive(sqlx::FromRow)]
struct LastRow {
    org_id: String,
    kind: String,
    computed_at: i64,
}

#[derive(sqlx::FromRow)]
struct OrgRow {
    org_id: String,
}

#[derive(sqlx::FromRow)]
struct HistoryRow {
    task_id: String,
    status: String,
    tags: String,
    assignee: Option<String>,
    created_at: i64,
    updated_at: i64,
    retries: i64,
}

#[derive(sqlx::FromRow)]
struct ChangeRow {
    task_id: String,
    from_status: Option<String>,
    to_status: String,
    agent_id: String,
    at: i64,
}

fn corrupt(what: &str, value: &str) -> StoreError {
    StoreError::Corrupt(format!("{what} {value:?}"))
}

fn status(text: &str) -> Result<TaskStatus> {
    TaskStatus::parse(text).ok_or_else(|| corrupt("status", text))
}

impl ReportRow {
    fn into_report(self, kind: &'static str) -> StoredReport {
        StoredReport {
            key: ReportKey {
                kind,
                scope: self.scope,
                cadence: self.cadence,
                period: self.period,
            },
            computed_at: self.computed_at,
            body: self.body,
        }
    }
}

impl Store {
    /// Stores or replaces reports of one org, computed at `computed_at`,
    /// in one statement: a recompute costs the store one write.
    pub async fn put_reports(
        &self,
        org: OrgId,
        computed_at: i64,
        reports: &[(ReportKey, Vec<u8>)],
    ) -> Result<()> {
        if reports.is_empty() {
            return Ok(());
        }
        on_pool!(self, pool => {
            let mut qb = sqlx::QueryBuilder::new(
                "INSERT INTO reports (org_id, kind, scope, cadence, period, computed_at, body) ",
            );
            qb.push_values(reports, |mut b, (key, body)| {
                b.push_bind(org.to_string())
                    .push_bind(key.kind)
                    .push_bind(key.scope.clone())
                    .push_bind(key.cadence.clone())
                    .push_bind(key.period.clone())
                    .push_bind(computed_at)
                    .push_bind(body.clone());
            });
            qb.push(
                " ON CONFLICT (org_id, kind, scope, cadence, period) DO UPDATE \
                 SET computed_at = excluded.computed_at, body = excluded.body",
            );
            qb.build().execute(pool).await?;
        });
        Ok(())
    }

    pub async fn report(&self, org: OrgId, key: &ReportKey) -> Result<Option<StoredReport>> {
        let row: Option<ReportRow> = self
            .fetch_optional(
                "SELECT scope, cadence, period, computed_at, body FROM reports \
                 WHERE org_id = $1 AND kind = $2 AND scope = $3 AND cadence = $4 AND period = $5",
                vec![
                    Arg::Text(org.to_string()),
                    Arg::Text(key.kind.to_owned()),
                    Arg::Text(key.scope.clone()),
                    Arg::Text(key.cadence.clone()),
                    Arg::Text(key.period.clone()),
                ],
            )
            .await?;
        Ok(row.map(|r| r.into_report(key.kind)))
    }

    /// The org's reports of `kind` for `scope` (and `cadence`, if given),
    /// most recently computed first.
    pub async fn recent_reports(
        &self,
        org: OrgId,
        kind: &'static str,
        scope: &str,
        cadence: Option<&str>,
        limit: usize,
    ) -> Result<Vec<StoredReport>> {
        let mut args = vec![
            Arg::Text(org.to_string()),
            Arg::Text(kind.to_owned()),
            Arg::Text(scope.to_owned()),
            Arg::Int(limit as i64),
        ];
        let cadence_clause = match cadence {
            Some(c) => {
                args.push(Arg::Text(c.to_owned()));
                " AND cadence = $5"
            }
            None => "",
        };
        let sql = format!(
            "SELECT scope, cadence, period, computed_at, body FROM reports \
             WHERE org_id = $1 AND kind = $2 AND scope = $3{cadence_clause} \
             ORDER BY computed_at DESC, period DESC LIMIT $4"
        );
        let rows: Vec<ReportRow> = self.fetch_all(&sql, args).await?;
        Ok(rows.into_iter().map(|r| r.into_report(kind)).collect())
    }

    /// When each org last had each kind of report computed.
    pub async fn reports_last_computed(&self) -> Result<HashMap<(OrgId, String), i64>> {
        let rows: Vec<LastRow> = self
            .fetch_all(
                "SELECT org_id, kind, MAX(computed_at) AS computed_at FROM reports \
                 GROUP BY org_id, kind",
                vec![],
            )
            .await?;
        let mut last = HashMap::with_capacity(rows.len());
        for r in rows {
            let org = r.org_id.parse().map_err(|_| corrupt("org id", &r.org_id))?;
            last.insert((org, r.kind), r.computed_at);
        }
        Ok(last)
    }

    /// Every org.
    pub async fn org_ids(&self) -> Result<Vec<OrgId>> {
        let rows: Vec<OrgRow> = self
            .fetch_all(
                "SELECT org_id FROM orgs WHERE deleted_at IS NULL ORDER BY org_id",
                vec![],
            )
            .await?;
        rows.iter()
            .map(|r| r.org_id.parse().map_err(|_| corrupt("org id", &r.org_id)))
            .collect()
    }

    /// The org's tasks that are open or changed since `since` (ms), each
    /// with its state changes, oldest first.
    pub async fn task_histories(&self, org: OrgId, since: i64) -> Result<Vec<TaskHistory>> {
        let open = TaskStatus::Blocked.rank();
        let args = || vec![Arg::Text(org.to_string()), Arg::Int(since)];
        let rows: Vec<HistoryRow> = self
            .fetch_all(
                &format!(
                    "SELECT task_id, status, tags, assignee, created_at, updated_at, retries FROM tasks \
                     WHERE org_id = $1 AND (status_rank <= {open} OR updated_at >= $2) \
                     ORDER BY created_at, task_id"
                ),
                args(),
            )
            .await?;
        let changes: Vec<ChangeRow> = self
            .fetch_all(
                &Self::events_in_order(
                    &["task_id", "from_status", "to_status", "agent_id", "at"],
                    &format!("t.org_id = $1 AND (t.status_rank <= {open} OR t.updated_at >= $2)"),
                ),
                args(),
            )
            .await?;
        let mut by_task: HashMap<String, Vec<StateChange>> = HashMap::new();
        for c in changes {
            let change = StateChange {
                from: c.from_status.as_deref().map(status).transpose()?,
                to: status(&c.to_status)?,
                agent: c.agent_id,
                at: c.at,
            };
            by_task.entry(c.task_id).or_default().push(change);
        }
        rows.into_iter()
            .map(|r| {
                let task_id: TaskId = r
                    .task_id
                    .parse()
                    .map_err(|_| corrupt("task id", &r.task_id))?;
                Ok(TaskHistory {
                    task_id,
                    status: status(&r.status)?,
                    tags: serde_json::from_str(&r.tags).map_err(|_| corrupt("tags", &r.tags))?,
                    assignee: r.assignee,
                    created_at: r.created_at,
                    updated_at: r.updated_at,
                    retries: u8::try_from(r.retries).unwrap_or(u8::MAX),
                    events: by_task.remove(&r.task_id).unwrap_or_default(),
                })
            })
            .collect()
    }
}
