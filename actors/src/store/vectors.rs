//! Task vectors: each task's embedding, sealed, and the tasks still
//! waiting for one. Written by the embedding worker, not the org actors'
//! writers: a vector is derived data, remade whenever it is missing.

use sqlx::QueryBuilder;

use super::{Arg, Result, Store};
use crate::domain::{OrgId, TaskId};

/// Rows per multi-row insert.
const ROWS_PER_STATEMENT: usize = 256;

/// A stored vector and its task's creation time.
#[derive(Debug)]
pub struct StoredVector {
    pub task_id: TaskId,
    pub created_at: i64,
    pub sealed: Vec<u8>,
}

#[derive(sqlx::FromRow)]
struct VectorRow {
    task_id: String,
    created_at: i64,
    vector: Vec<u8>,
}

#[derive(sqlx::FromRow)]
struct TaskIdRow {
    task_id: String,
}

fn task_id(text: &str) -> Result<TaskId> {
    text.parse()
        .map_err(|_| super::StoreError::Corrupt(format!("task id {text:?}")))
}

impl Store {
    /// Stores or replaces the vectors `model` made for these tasks.
    pub async fn put_vectors(
        &self,
        org: OrgId,
        model: &str,
        vectors: &[(TaskId, Vec<u8>)],
    ) -> Result<()> {
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            for chunk in vectors.chunks(ROWS_PER_STATEMENT) {
                let mut qb = QueryBuilder::new(
                    "INSERT INTO task_vectors (org_id, task_id, model, vector) ",
                );
                qb.push_values(chunk, |mut b, (task, sealed)| {
                    b.push_bind(org.to_string())
                        .push_bind(task.to_string())
                        .push_bind(model.to_owned())
                        .push_bind(sealed.clone());
                });
                qb.push(
                    " ON CONFLICT (org_id, task_id) DO UPDATE \
                     SET model = excluded.model, vector = excluded.vector",
                );
                qb.build().execute(&mut *tx).await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// Every vector of the org that `model` made, with its task's creation
    /// time.
    pub async fn org_vectors(&self, org: OrgId, model: &str) -> Result<Vec<StoredVector>> {
        let rows: Vec<VectorRow> = self
            .fetch_all(
                "SELECT v.task_id, t.created_at, v.vector FROM task_vectors v \
                 JOIN tasks t ON t.org_id = v.org_id AND t.task_id = v.task_id \
                 WHERE v.org_id = $1 AND v.model = $2",
                vec![Arg::Text(org.to_string()), Arg::Text(model.to_owned())],
            )
            .await?;
        rows.into_iter()
            .map(|r| {
                Ok(StoredVector {
                    task_id: task_id(&r.task_id)?,
                    created_at: r.created_at,
                    sealed: r.vector,
                })
            })
            .collect()
    }

    /// The org's tasks that have no vector by `model`, oldest first.
    pub async fn unembedded_tasks(&self, org: OrgId, model: &str) -> Result<Vec<TaskId>> {
        let rows: Vec<TaskIdRow> = self
            .fetch_all(
                "SELECT t.task_id FROM tasks t LEFT JOIN task_vectors v \
                 ON v.org_id = t.org_id AND v.task_id = t.task_id AND v.model = $2 \
                 WHERE t.org_id = $1 AND v.task_id IS NULL ORDER BY t.created_at, t.task_id",
                vec![Arg::Text(org.to_string()), Arg::Text(model.to_owned())],
            )
            .await?;
        rows.iter().map(|r| task_id(&r.task_id)).collect()
    }
}
