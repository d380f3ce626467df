//! Sessions of the board: the hash of each session id, the org and key
//! that signed in, and the expiry, shared by every node. The key is
//! resolved again on every request (by the engine), so this table never
//! decides who the caller is beyond naming the key.

use super::{Result, Store, StoreError};
use crate::domain::{KeyId, OrgId};

/// Sessions one key may hold at once; beyond that its oldest goes.
const SESSIONS_PER_KEY: i64 = 32;

impl Store {
    /// Records a board session, after dropping the expired ones and, at
    /// the key's bound, its session closest to expiry.
    pub async fn open_board_session(
        &self,
        id_hash: &[u8],
        org: OrgId,
        key: KeyId,
        expires_at: i64,
        now: i64,
    ) -> Result<()> {
        let key = key.to_string();
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query("DELETE FROM board_sessions WHERE expires_at <= $1")
                .bind(now)
                .execute(&mut *tx)
                .await?;
            let open: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM board_sessions WHERE key_id = $1")
                    .bind(&key)
                    .fetch_one(&mut *tx)
                    .await?;
            if open >= SESSIONS_PER_KEY {
                sqlx::query(
                    "DELETE FROM board_sessions WHERE id_hash = \
                     (SELECT id_hash FROM board_sessions WHERE key_id = $1 \
                      ORDER BY expires_at LIMIT 1)",
                )
                .bind(&key)
                .execute(&mut *tx)
                .await?;
            }
            sqlx::query(
                "INSERT INTO board_sessions (id_hash, org_id, key_id, expires_at) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(id_hash)
            .bind(org.to_string())
            .bind(&key)
            .bind(expires_at)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// The org and key of a session open at `now`.
    pub async fn board_session(&self, id_hash: &[u8], now: i64) -> Result<Option<(OrgId, KeyId)>> {
        let row: Option<(String, String)> = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT org_id, key_id FROM board_sessions WHERE id_hash = $1 AND expires_at > $2",
            )
            .bind(id_hash)
            .bind(now)
            .fetch_optional(pool)
            .await?
        });
        row.map(|(org, key)| {
            let corrupt =
                || StoreError::Corrupt("board_sessions: an id that does not parse".into());
            Ok((
                org.parse().map_err(|_| corrupt())?,
                key.parse().map_err(|_| corrupt())?,
            ))
        })
        .transpose()
    }

    pub async fn close_board_session(&self, id_hash: &[u8]) -> Result<()> {
        on_pool!(self, pool => {
            sqlx::query("DELETE FROM board_sessions WHERE id_hash = $1")
                .bind(id_hash)
                .execute(pool)
                .await?;
        });
        Ok(())
    }
}
