//! What the removal of deleted orgs reads: which orgs are being deleted,
//! and whether any of an org's many rows are left. The removals are
//! writes (`WriteOp::PurgeOrg`, `WriteOp::DropOrg`).

use super::commit::purge::BATCHED;
use super::rows::OrgIdRow;
use super::{records, Arg, Result, Store};
use crate::domain::OrgId;

#[derive(sqlx::FromRow)]
struct CountRow {
    n: i64,
}

impl Store {
    /// The orgs marked deleted whose rows are still being removed.
    pub async fn deleting_orgs(&self) -> Result<Vec<OrgId>> {
        let rows: Vec<OrgIdRow> = self
            .fetch_all(
                "SELECT org_id FROM orgs WHERE deleted_at IS NOT NULL ORDER BY org_id",
                vec![],
            )
            .await?;
        records(rows)
    }

    /// Whether a table with many rows an org still holds one of this org.
    pub async fn org_rows_left(&self, org: OrgId) -> Result<bool> {
        for (table, _) in BATCHED {
            let row: Option<CountRow> = self
                .fetch_optional(
                    &format!(
                        "SELECT COUNT(*) AS n FROM (SELECT 1 FROM {table} WHERE org_id = $1 LIMIT 1) x"
                    ),
                    vec![Arg::Text(org.to_string())],
                )
                .await?;
            if row.is_some_and(|r| r.n > 0) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Several nodes: the deleted org's ownership row, once its own row is
    /// gone (a node alone has none).
    pub async fn drop_org_owner(&self, org: OrgId) -> Result<()> {
        if let Store::Postgres(pool, _) = self {
            sqlx::query("DELETE FROM org_owners WHERE org_id = $1")
                .bind(org.to_string())
                .execute(pool)
                .await?;
        }
        Ok(())
    }
}
