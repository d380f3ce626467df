//! The cluster's directory on PostgreSQL (migration `0017_cluster`): the
//! nodes and their heartbeats, and which node owns each org. Every time
//! here is the database's clock, so the nodes' clocks never disagree
//! about who is live.

use std::time::Duration;

use sqlx::{PgConnection, PgPool};

use super::{Result, Store, StoreError};
use crate::domain::OrgId;

/// A node as the directory lists it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct NodeRow {
    pub node_id: String,
    pub advertise_url: String,
    /// The URL clients may reach it at directly, if its operator named one.
    pub public_url: Option<String>,
    /// Ms since the Unix epoch.
    pub started_at: i64,
    /// The last heartbeat, ms since the Unix epoch.
    pub last_seen: i64,
    /// Orgs it owns now.
    pub orgs: i64,
    /// Its heartbeat is younger than the lease TTL.
    pub live: bool,
    /// It is stopping and hands its orgs over.
    pub leaving: bool,
    /// The fingerprints of the master keys it holds, its current one first.
    pub master_keys: String,
    /// Requests for an org it answered since it started, as of its last
    /// heartbeat; of those, how many it forwarded to the org's owner and
    /// how many another node forwarded to it.
    pub requests: i64,
    pub requests_forwarded: i64,
    pub requests_received: i64,
}

/// Where a node is, as it registers.
#[derive(Debug, Clone, Copy)]
pub struct NodeAddress<'a> {
    pub node_id: &'a str,
    /// Where the other nodes reach it.
    pub advertise_url: &'a str,
    /// Where clients may reach it directly, if its operator says.
    pub public_url: Option<&'a str>,
}

/// What a node's heartbeat says of its requests for an org since it
/// started: how many it answered, forwarded, and was forwarded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrafficCounts {
    pub requests: u64,
    pub forwarded: u64,
    pub received: u64,
}

/// Who owns an org, as its row says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerRow {
    /// A live node.
    Live { node_id: String, url: String },
    /// Nobody live: no row, a released row, or a node whose heartbeat
    /// lapsed.
    Free,
}

#[derive(sqlx::FromRow)]
struct OwnerQuery {
    node_id: Option<String>,
    advertise_url: Option<String>,
    live: bool,
}

/// Every node seen within `recent`, with how many orgs each owns.
pub async fn nodes_seen<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    ttl: Duration,
    recent: Duration,
) -> Result<Vec<NodeRow>> {
    let rows = sqlx::query_as::<_, NodeRow>(
        "SELECT n.node_id, n.advertise_url, n.public_url, n.started_at, \
         (extract(epoch FROM n.last_seen) * 1000)::int8 AS last_seen, \
         (SELECT count(*) FROM org_owners o WHERE o.node_id = n.node_id) AS orgs, \
         n.last_seen > now() - make_interval(secs => $1::int8 / 1000.0) AS live, \
         n.leaving, n.master_keys, n.requests, n.requests_forwarded, n.requests_received \
         FROM cluster_nodes n \
         WHERE n.last_seen > now() - make_interval(secs => $2::int8 / 1000.0) \
         ORDER BY n.node_id",
    )
    .bind(ms(ttl))
    .bind(ms(recent))
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

fn ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

impl Store {
    fn cluster_pool(&self) -> Result<&PgPool> {
        match self {
            Store::Postgres(pool, _) => Ok(pool),
            Store::Sqlite(_) => Err(StoreError::Corrupt("a cluster needs PostgreSQL".into())),
        }
    }

    /// Registers this node (or registers it again after a long outage).
    pub async fn register_node(&self, node: &NodeAddress<'_>, started_at: i64) -> Result<()> {
        let mut conn = self.cluster_pool()?.acquire().await?;
        Self::register_node_on(&mut conn, node, started_at).await
    }

    /// `register_node` on a given connection (the heartbeat's).
    pub async fn register_node_on(
        conn: &mut PgConnection,
        node: &NodeAddress<'_>,
        started_at: i64,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO cluster_nodes \
             (node_id, advertise_url, public_url, started_at, last_seen, leaving) \
             VALUES ($1, $2, $3, $4, now(), false) ON CONFLICT (node_id) DO UPDATE \
             SET advertise_url = excluded.advertise_url, public_url = excluded.public_url, \
             last_seen = now()",
        )
        .bind(node.node_id)
        .bind(node.advertise_url)
        .bind(node.public_url)
        .bind(started_at)
        .execute(conn)
        .await?;
        Ok(())
    }

    /// Marks this node as leaving (a graceful stop): no node chooses it
    /// for an org any more.
    pub async fn mark_leaving(&self, node_id: &str) -> Result<()> {
        sqlx::query("UPDATE cluster_nodes SET leaving = true WHERE node_id = $1")
            .bind(node_id)
            .execute(self.cluster_pool()?)
            .await?;
        Ok(())
    }

    /// A connection of the node's own for its heartbeat, so that a busy
    /// pool never delays it past the node's trust window.
    /// A new connection, not the pool's: made on the runtime that will use
    /// it (the heartbeat's thread), whose driver alone serves its socket.
    pub async fn heartbeat_conn(&self) -> Result<PgConnection> {
        use sqlx::ConnectOptions as _;
        Ok(self.cluster_pool()?.connect_options().connect().await?)
    }

    /// Renews this node's heartbeat, and with it every org it owns, on its
    /// own connection, with the master keys it holds and its requests so
    /// far; false when its row is gone (it must register again). Nodes not
    /// seen for a day leave the directory.
    pub async fn heartbeat(
        conn: &mut PgConnection,
        node_id: &str,
        leaving: bool,
        master_keys: &str,
        traffic: TrafficCounts,
    ) -> Result<bool> {
        let renewed = sqlx::query(
            "UPDATE cluster_nodes SET last_seen = now(), leaving = $2, master_keys = $3, \
             requests = $4, requests_forwarded = $5, requests_received = $6 \
             WHERE node_id = $1",
        )
        .bind(node_id)
        .bind(leaving)
        .bind(master_keys)
        .bind(i64::try_from(traffic.requests).unwrap_or(i64::MAX))
        .bind(i64::try_from(traffic.forwarded).unwrap_or(i64::MAX))
        .bind(i64::try_from(traffic.received).unwrap_or(i64::MAX))
        .execute(&mut *conn)
        .await?
        .rows_affected();
        sqlx::query("DELETE FROM cluster_nodes WHERE last_seen < now() - interval '1 day'")
            .execute(&mut *conn)
            .await?;
        Ok(renewed == 1)
    }

    /// The master key every node makes new wraps with, once a rotation
    /// through one of them began.
    pub async fn cluster_master_key(conn: &mut PgConnection) -> Result<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT value FROM cluster_settings WHERE name = 'master_key'")
                .fetch_optional(conn)
                .await?,
        )
    }

    /// The cluster's master key, set to `id` by the first node that asks.
    pub async fn adopt_cluster_master_key(&self, id: &str) -> Result<String> {
        let pool = self.cluster_pool()?;
        sqlx::query(
            "INSERT INTO cluster_settings (name, value) VALUES ('master_key', $1) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(id)
        .execute(pool)
        .await?;
        Ok(
            sqlx::query_scalar("SELECT value FROM cluster_settings WHERE name = 'master_key'")
                .fetch_one(pool)
                .await?,
        )
    }

    /// Makes `id` the master key of new wraps on every node.
    pub async fn set_cluster_master_key(&self, id: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO cluster_settings (name, value) VALUES ('master_key', $1) \
             ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        )
        .bind(id)
        .execute(self.cluster_pool()?)
        .await?;
        Ok(())
    }

    /// Every node seen within `recent`, with how many orgs each owns.
    pub async fn cluster_nodes(&self, ttl: Duration, recent: Duration) -> Result<Vec<NodeRow>> {
        nodes_seen(self.cluster_pool()?, ttl, recent).await
    }

    /// Makes `node_id` the org's owner if nobody live owns it (no row, a
    /// released row, a node whose heartbeat is older than `ttl`) or it
    /// already does; answers the new epoch, raised by every takeover so a
    /// former owner's commits fail their fence. `None`: a live node owns
    /// it.
    pub async fn acquire_org(
        &self,
        org: OrgId,
        node_id: &str,
        ttl: Duration,
    ) -> Result<Option<i64>> {
        // A node frozen inside a commit holds its row `FOR SHARE` until
        // PostgreSQL ends the session: wait a moment, not for ever.
        let mut tx = self.cluster_pool()?.begin().await?;
        sqlx::query("SET LOCAL lock_timeout = '1s'")
            .execute(&mut *tx)
            .await?;
        let epoch: std::result::Result<Option<i64>, sqlx::Error> = sqlx::query_scalar(
            "INSERT INTO org_owners (org_id, node_id, epoch) VALUES ($1, $2, 1) \
             ON CONFLICT (org_id) DO UPDATE SET node_id = $2, epoch = org_owners.epoch + 1, \
             needs_owner = false \
             WHERE org_owners.node_id IS NULL OR org_owners.node_id = $2 OR NOT EXISTS ( \
               SELECT 1 FROM cluster_nodes n WHERE n.node_id = org_owners.node_id \
               AND n.last_seen > now() - make_interval(secs => $3::int8 / 1000.0)) \
             RETURNING epoch",
        )
        .bind(org.to_string())
        .bind(node_id)
        .bind(ms(ttl))
        .fetch_optional(&mut *tx)
        .await;
        match epoch {
            Ok(epoch) => {
                tx.commit().await?;
                Ok(epoch)
            }
            // The lock was not granted in time: the org is busy moving.
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55P03") => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Gives an org up: its row keeps its epoch and names no node;
    /// `needs_owner` when its tasks hold leases, so that another node takes
    /// it for them.
    pub async fn release_org(
        &self,
        org: OrgId,
        node_id: &str,
        epoch: i64,
        needs_owner: bool,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE org_owners SET node_id = NULL, needs_owner = $4 \
             WHERE org_id = $1 AND node_id = $2 AND epoch = $3",
        )
        .bind(org.to_string())
        .bind(node_id)
        .bind(epoch)
        .bind(needs_owner)
        .execute(self.cluster_pool()?)
        .await?;
        Ok(())
    }

    /// Who owns the org now.
    pub async fn org_owner(&self, org: OrgId, ttl: Duration) -> Result<OwnerRow> {
        let row: Option<OwnerQuery> = sqlx::query_as(
            "SELECT o.node_id, n.advertise_url, \
             COALESCE(n.last_seen > now() - make_interval(secs => $2::int8 / 1000.0), false) AS live \
             FROM org_owners o LEFT JOIN cluster_nodes n ON n.node_id = o.node_id \
             WHERE o.org_id = $1",
        )
        .bind(org.to_string())
        .bind(ms(ttl))
        .fetch_optional(self.cluster_pool()?)
        .await?;
        Ok(match row {
            Some(OwnerQuery {
                node_id: Some(node_id),
                advertise_url: Some(url),
                live: true,
            }) => OwnerRow::Live { node_id, url },
            _ => OwnerRow::Free,
        })
    }

    /// Orgs that need an owner and have none: held by a node whose
    /// heartbeat is older than `ttl` (it died or froze), or released with
    /// leases held. A released org without leases waits for a request.
    pub async fn orphaned_orgs(&self, ttl: Duration) -> Result<Vec<OrgId>> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT o.org_id FROM org_owners o \
             WHERE (o.node_id IS NULL AND o.needs_owner) OR (o.node_id IS NOT NULL AND NOT EXISTS ( \
               SELECT 1 FROM cluster_nodes n WHERE n.node_id = o.node_id \
               AND n.last_seen > now() - make_interval(secs => $1::int8 / 1000.0))) \
             ORDER BY o.org_id",
        )
        .bind(ms(ttl))
        .fetch_all(self.cluster_pool()?)
        .await?;
        rows.into_iter()
            .map(|(id,)| super::rows::org_id(&id))
            .collect()
    }
}
