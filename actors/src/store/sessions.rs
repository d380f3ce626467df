//! Sessions of the operator page: the hash of each session id and its
//! expiry, shared by every node.

use super::{Result, Store};

/// Sessions open at once; beyond that the one closest to expiry goes.
const MAX_SESSIONS: i64 = 256;

impl Store {
    /// Records a session, after dropping the expired ones and, at the
    /// bound, the one closest to expiry.
    pub async fn open_session(&self, id_hash: &[u8], expires_at: i64, now: i64) -> Result<()> {
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query("DELETE FROM operator_sessions WHERE expires_at <= $1")
                .bind(now)
                .execute(&mut *tx)
                .await?;
            let open: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM operator_sessions")
                .fetch_one(&mut *tx)
                .await?;
            if open >= MAX_SESSIONS {
                sqlx::query(
                    "DELETE FROM operator_sessions WHERE id_hash = \
                     (SELECT id_hash FROM operator_sessions ORDER BY expires_at LIMIT 1)",
                )
                .execute(&mut *tx)
                .await?;
            }
            sqlx::query("INSERT INTO operator_sessions (id_hash, expires_at) VALUES ($1, $2)")
                .bind(id_hash)
                .bind(expires_at)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// Whether the session is open at `now`.
    pub async fn session_open(&self, id_hash: &[u8], now: i64) -> Result<bool> {
        let found: Option<i64> = on_pool!(self, pool => {
            sqlx::query_scalar(
                "SELECT expires_at FROM operator_sessions WHERE id_hash = $1 AND expires_at > $2",
            )
            .bind(id_hash)
            .bind(now)
            .fetch_optional(pool)
            .await?
        });
        Ok(found.is_some())
    }

    pub async fn close_session(&self, id_hash: &[u8]) -> Result<()> {
        on_pool!(self, pool => {
            sqlx::query("DELETE FROM operator_sessions WHERE id_hash = $1")
                .bind(id_hash)
                .execute(pool)
                .await?;
        });
        Ok(())
    }
}
