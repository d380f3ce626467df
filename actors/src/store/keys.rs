//! Data keys: a BYOK org's client-wrapped key, stored verbatim, and the
//! managed orgs' wraps as a master-key rotation moves them.

use super::rows::org_id;
use super::{Arg, Result, Store};
use crate::domain::account::WrappedDek;
use crate::domain::OrgId;

/// A BYOK org's data key as its client enrolled it. Never parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientDek {
    pub wrapped_dek: String,
    pub kms_key_id: String,
    pub created_at: i64,
}

#[derive(sqlx::FromRow)]
struct ClientDekRow {
    wrapped_dek: String,
    kms_key_id: String,
    created_at: i64,
}

#[derive(sqlx::FromRow)]
struct WrapRow {
    org_id: String,
    wrapped_dek: Vec<u8>,
    master_key_id: Option<String>,
}

#[derive(sqlx::FromRow)]
struct MasterKeyUseRow {
    master_key_id: String,
    n: i64,
}

#[derive(sqlx::FromRow)]
struct CountRow {
    n: i64,
}

impl Store {
    pub async fn client_dek(&self, org: OrgId) -> Result<Option<ClientDek>> {
        let row: Option<ClientDekRow> = self
            .fetch_optional(
                "SELECT wrapped_dek, kms_key_id, created_at FROM org_deks WHERE org_id = $1",
                vec![Arg::Text(org.to_string())],
            )
            .await?;
        Ok(row.map(|r| ClientDek {
            wrapped_dek: r.wrapped_dek,
            kms_key_id: r.kms_key_id,
            created_at: r.created_at,
        }))
    }

    /// Enrolls a BYOK org's data key; `false` when one already exists (the
    /// first enrollment stands).
    pub async fn insert_client_dek(&self, org: OrgId, dek: &ClientDek) -> Result<bool> {
        let done = on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO org_deks (org_id, wrapped_dek, kms_key_id, created_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (org_id) DO NOTHING",
            )
            .bind(org.to_string())
            .bind(&dek.wrapped_dek)
            .bind(&dek.kms_key_id)
            .bind(dek.created_at)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(done == 1)
    }

    /// Up to `limit` managed orgs whose data key is not wrapped by the
    /// master key `current`, in org id order after `after`.
    pub async fn wraps_not_under(
        &self,
        current: &str,
        after: Option<OrgId>,
        limit: i64,
    ) -> Result<Vec<(OrgId, WrappedDek)>> {
        let rows: Vec<WrapRow> = self
            .fetch_all(
                "SELECT org_id, wrapped_dek, master_key_id FROM orgs \
                 WHERE wrapped_dek IS NOT NULL \
                 AND (master_key_id IS NULL OR master_key_id <> $1) AND org_id > $2 \
                 ORDER BY org_id LIMIT $3",
                vec![
                    Arg::Text(current.to_owned()),
                    Arg::Text(after.map(|o| o.to_string()).unwrap_or_default()),
                    Arg::Int(limit),
                ],
            )
            .await?;
        rows.into_iter()
            .map(|r| {
                Ok((
                    org_id(&r.org_id)?,
                    WrappedDek {
                        master_key_id: r.master_key_id,
                        bytes: r.wrapped_dek,
                    },
                ))
            })
            .collect()
    }

    /// The master keys that wrap managed orgs' data keys or seal webhook
    /// secrets, by id, each with the number of wraps and secrets naming it.
    pub async fn wrapping_master_keys(&self) -> Result<Vec<(String, i64)>> {
        let rows: Vec<MasterKeyUseRow> = self
            .fetch_all(
                "SELECT master_key_id, COUNT(*) AS n FROM (SELECT master_key_id FROM orgs \
                 WHERE wrapped_dek IS NOT NULL AND master_key_id IS NOT NULL \
                 UNION ALL SELECT secret_key_id FROM webhooks \
                 UNION ALL SELECT previous_secret_key_id FROM webhooks \
                 WHERE previous_secret_key_id IS NOT NULL) k \
                 GROUP BY master_key_id ORDER BY master_key_id",
                vec![],
            )
            .await?;
        Ok(rows.into_iter().map(|r| (r.master_key_id, r.n)).collect())
    }

    /// How many managed orgs' data keys and webhook secrets are not sealed by
    /// `current`.
    pub async fn count_wraps_not_under(&self, current: &str) -> Result<i64> {
        let rows: Vec<CountRow> = self
            .fetch_all(
                "SELECT (SELECT COUNT(*) FROM orgs WHERE wrapped_dek IS NOT NULL \
                 AND (master_key_id IS NULL OR master_key_id <> $1)) \
                 + (SELECT COUNT(*) FROM webhooks WHERE secret_key_id <> $1 \
                 OR (previous_secret IS NOT NULL AND previous_secret_key_id <> $1)) AS n",
                vec![Arg::Text(current.to_owned())],
            )
            .await?;
        Ok(rows.first().map_or(0, |r| r.n))
    }

    /// Replaces an org's wrap, if it is still `old`; `false` when something
    /// else moved it first.
    pub async fn rewrap_dek(&self, org: OrgId, old: &WrappedDek, new: &WrappedDek) -> Result<bool> {
        let done = on_pool!(self, pool => {
            sqlx::query(
                "UPDATE orgs SET wrapped_dek = $3, master_key_id = $4 \
                 WHERE org_id = $1 AND wrapped_dek = $2",
            )
            .bind(org.to_string())
            .bind(&old.bytes)
            .bind(&new.bytes)
            .bind(&new.master_key_id)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(done == 1)
    }
}
