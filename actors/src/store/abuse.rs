//! Abuse: strikes recorded against a member's email (and the org they were
//! earned in) and the members blocked for collecting too many.

use super::{Arg, Result, Store};
use crate::domain::OrgId;

impl Store {
    /// Records a strike; answers the member's and the org's strike totals.
    /// The insert commits before the totals are read, so of strikes
    /// recorded at once the last to commit counts them all and a limit is
    /// never passed unseen (read in the insert's own transaction, two
    /// strikes at once could each miss the other's).
    pub async fn record_strike(&self, email: &str, org: OrgId, at: i64) -> Result<(i64, i64)> {
        on_pool!(self, pool => {
            sqlx::query("INSERT INTO strikes (email, org_id, at) VALUES ($1, $2, $3)")
                .bind(email)
                .bind(org.to_string())
                .bind(at)
                .execute(pool)
                .await?;
            let totals: (i64, i64) = sqlx::query_as(
                "SELECT (SELECT COUNT(*) FROM strikes WHERE email = $1), \
                 (SELECT COUNT(*) FROM strikes WHERE org_id = $2)",
            )
            .bind(email)
            .bind(org.to_string())
            .fetch_one(pool)
            .await?;
            Ok(totals)
        })
    }

    pub async fn block_member(&self, email: &str, at: i64) -> Result<()> {
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO blocked_members (email, blocked_at) VALUES ($1, $2) ON CONFLICT (email) DO NOTHING",
            )
            .bind(email)
            .bind(at)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    pub async fn is_blocked(&self, email: &str) -> Result<bool> {
        let row: Option<(String,)> = self
            .fetch_optional(
                "SELECT email FROM blocked_members WHERE email = $1",
                vec![Arg::Text(email.to_owned())],
            )
            .await?;
        Ok(row.is_some())
    }

    /// Lifts a block and clears the member's strikes; false if not blocked.
    pub async fn unblock_member(&self, email: &str) -> Result<bool> {
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            let lifted = sqlx::query("DELETE FROM blocked_members WHERE email = $1")
                .bind(email)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            sqlx::query("DELETE FROM strikes WHERE email = $1")
                .bind(email)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(lifted > 0)
        })
    }
}
