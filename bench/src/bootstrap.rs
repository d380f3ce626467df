//! The operator API as the bench uses it: creating orgs, lifting their
//! limits, issuing agent keys and reading metrics; and the bootstrap that
//! gives every agent of a run its org and key before anything is measured.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context as _};
use reqwest::header::AUTHORIZATION;
use reqwest::{Client, Method, StatusCode};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::api::{exchange, http_client, lossy, truncate};
use super::BenchArgs;

#[derive(Clone)]
pub(super) struct Admin {
    client: Client,
    base: Arc<str>,
    token: Arc<str>,
}

#[derive(Deserialize)]
pub(super) struct CreatedOrg {
    pub(super) org_id: String,
    pub(super) owner: CreatedKey,
}

#[derive(Deserialize)]
pub(super) struct CreatedKey {
    pub(super) api_key: String,
}

impl Admin {
    pub(super) fn new(base: &str, token: &str, max_idle: usize) -> anyhow::Result<Self> {
        Ok(Admin {
            client: http_client(max_idle)?,
            base: base.into(),
            token: token.into(),
        })
    }

    pub(super) async fn call(
        &self,
        method: Method,
        path: &str,
        body: &serde_json::Value,
        expect: StatusCode,
    ) -> Result<(Vec<u8>, Duration), String> {
        let request = self
            .client
            .request(method.clone(), format!("{}{path}", self.base))
            .header(AUTHORIZATION, format!("Bearer {}", self.token))
            .json(body);
        exchange(request, expect)
            .await
            .map_err(|e| format!("{method} {path}: {e}"))
    }

    /// `POST /admin/orgs`: an enterprise org; returns its id and owner key.
    pub(super) async fn create_org(
        &self,
        name: &str,
        owner_email: &str,
        seats: usize,
    ) -> Result<(CreatedOrg, Duration), String> {
        let body = json!({
            "name": name,
            "tier": "enterprise",
            "owner_email": owner_email,
            "seats": seats,
        });
        let (bytes, latency) = self
            .call(Method::POST, "/admin/orgs", &body, StatusCode::CREATED)
            .await?;
        let org = serde_json::from_slice(&bytes)
            .map_err(|e| truncate(&format!("unexpected org response ({e}): {}", lossy(&bytes))))?;
        Ok((org, latency))
    }

    /// `taskq_actors_alive` from `GET /metrics`.
    pub(super) async fn actors_alive(&self) -> Option<u64> {
        self.gauge("taskq_actors_alive").await
    }

    /// `taskq_claim_waiters` from `GET /metrics`: claims waiting for a task.
    pub(super) async fn claim_waiters(&self) -> Option<u64> {
        self.gauge("taskq_claim_waiters").await
    }

    /// The search gauges from one `GET /metrics`; `None` when the server
    /// has no embedder (it shows none of them) or did not answer.
    pub(super) async fn search_gauges(&self) -> Option<SearchGauges> {
        let text = self.metrics().await?;
        Some(SearchGauges {
            backlog: gauge_in(&text, "taskq_embedding_backlog")?,
            index_tasks: gauge_in(&text, "taskq_search_index_tasks")?,
            index_bytes: gauge_in(&text, "taskq_search_index_bytes")?,
        })
    }

    /// The writers' and the claim cache's counters from one
    /// `GET /metrics`; `None` when the server did not answer with them.
    pub(super) async fn commit_counters(&self) -> Option<CommitCounters> {
        let text = self.metrics().await?;
        Some(CommitCounters {
            commits: gauge_in(&text, "taskq_commits_total")?,
            batches: gauge_in(&text, "taskq_commit_batches_total")?,
            rows: gauge_in(&text, "taskq_commit_rows_total")?,
            commit_secs: gauge_in(&text, "taskq_commit_seconds_total")?,
            claims_kept: gauge_in(&text, "taskq_claims_kept_total")?,
            claims_read: gauge_in(&text, "taskq_claims_read_total")?,
        })
    }

    /// `taskq_board_pages_shared_total` from `GET /metrics`: board pages
    /// made from a list another board read for the same notice.
    pub(super) async fn board_pages_shared(&self) -> Option<u64> {
        self.gauge("taskq_board_pages_shared_total").await
    }

    /// An unlabelled gauge or counter from `GET /metrics`.
    async fn gauge(&self, name: &str) -> Option<u64> {
        gauge_in(&self.metrics().await?, name)
    }

    async fn metrics(&self) -> Option<String> {
        let response = self
            .client
            .get(format!("{}/metrics", self.base))
            .header(AUTHORIZATION, format!("Bearer {}", self.token))
            .send()
            .await
            .ok()?;
        response.text().await.ok()
    }

    /// `PATCH /admin/orgs/{id}`: lifts the rate and volume limits.
    pub(super) async fn lift_limits(&self, org_id: &str) -> Result<Duration, String> {
        let body = json!({
            "limits": {
                "writes_per_minute": null,
                "reads_per_minute": null,
                "requests_per_month": null,
                "tasks_per_month": null,
            }
        });
        let path = format!("/admin/orgs/{org_id}");
        let (_, latency) = self
            .call(Method::PATCH, &path, &body, StatusCode::OK)
            .await?;
        Ok(latency)
    }

    /// `POST /admin/orgs/{id}/members`: agent `n` as a user; returns its key.
    async fn add_agent(&self, org_id: &str, n: usize) -> Result<String, String> {
        let body = json!({
            "email": format!("agent-{n}@bench.local"),
            "role": "user",
            "key_name": format!("agent-{n}"),
        });
        let path = format!("/admin/orgs/{org_id}/members");
        let (bytes, _) = self
            .call(Method::POST, &path, &body, StatusCode::CREATED)
            .await?;
        let key: CreatedKey = serde_json::from_slice(&bytes).map_err(|e| {
            truncate(&format!(
                "unexpected member response ({e}): {}",
                lossy(&bytes)
            ))
        })?;
        Ok(key.api_key)
    }
}

fn gauge_in<T: std::str::FromStr>(metrics: &str, name: &str) -> Option<T> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// What `/metrics` says about the commits and the claims' content so far.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct CommitCounters {
    pub(super) commits: u64,
    pub(super) batches: u64,
    pub(super) rows: u64,
    /// Time spent in committed transactions, all lanes.
    pub(super) commit_secs: f64,
    pub(super) claims_kept: u64,
    pub(super) claims_read: u64,
}

/// What `/metrics` says about search.
#[derive(Debug, Clone, Copy)]
pub(super) struct SearchGauges {
    /// Tasks waiting for a vector.
    pub(super) backlog: u64,
    /// Vectors held in memory, and their bytes.
    pub(super) index_tasks: u64,
    pub(super) index_bytes: u64,
}

/// A bootstrapped org and its agents' keys.
pub(super) struct BenchOrg {
    index: usize,
    pub(super) org_id: String,
    owner_key: String,
    agent_keys: Vec<String>,
}

/// One agent to run: its org (by index) and key.
#[derive(Clone)]
pub(super) struct Agent {
    pub(super) org: usize,
    pub(super) key: String,
}

pub(super) fn agents_of(orgs: &[BenchOrg]) -> Vec<Agent> {
    orgs.iter()
        .flat_map(|org| {
            org.agent_keys.iter().map(|key| Agent {
                org: org.index,
                key: key.clone(),
            })
        })
        .collect()
}

/// Each org's owner key, in the orgs' order.
pub(super) fn owner_keys_of(orgs: &[BenchOrg]) -> Vec<String> {
    orgs.iter().map(|org| org.owner_key.clone()).collect()
}

/// Creates the orgs, lifts their limits and issues one key per agent;
/// agent `n` belongs to org `n % orgs`.
pub(super) async fn bootstrap(
    admin: &Admin,
    args: &BenchArgs,
    run_id: &str,
) -> anyhow::Result<Vec<BenchOrg>> {
    eprintln!(
        "[bootstrap] {} org(s), {} agent key(s)",
        args.orgs, args.agents
    );
    let permits = Arc::new(Semaphore::new(args.concurrency));
    let mut orgs = JoinSet::new();
    for index in 0..args.orgs {
        let agents: Vec<usize> = (index..args.agents).step_by(args.orgs).collect();
        let name = format!("bench-{run_id}-{index}");
        orgs.spawn(bootstrap_org(
            admin.clone(),
            permits.clone(),
            index,
            name,
            agents,
        ));
    }
    let mut created = Vec::with_capacity(args.orgs);
    while let Some(joined) = orgs.join_next().await {
        let org = joined
            .context("bootstrap task failed")?
            .context("bootstrap (creating orgs and agent keys)")?;
        created.push(org);
    }
    created.sort_by_key(|org| org.index);
    Ok(created)
}

/// One org of the bootstrap: the org, its limits, and its agents' keys
/// (agents numbered globally). `permits` bounds the requests in flight.
async fn bootstrap_org(
    admin: Admin,
    permits: Arc<Semaphore>,
    index: usize,
    name: String,
    agents: Vec<usize>,
) -> anyhow::Result<BenchOrg> {
    let (org_id, owner_key): (Arc<str>, String) = {
        let _permit = permits.acquire().await?;
        let owner_email = format!("owner-{index}@bench.local");
        let (org, _) = admin
            .create_org(&name, &owner_email, agents.len() + 1)
            .await
            .map_err(|e| anyhow!(e))?;
        admin
            .lift_limits(&org.org_id)
            .await
            .map_err(|e| anyhow!(e))?;
        (org.org_id.into(), org.owner.api_key)
    };
    let mut members = JoinSet::new();
    for (slot, n) in agents.into_iter().enumerate() {
        let admin = admin.clone();
        let permits = permits.clone();
        let org_id = org_id.clone();
        members.spawn(async move {
            let _permit = permits.acquire().await?;
            let key = admin.add_agent(&org_id, n).await.map_err(|e| anyhow!(e))?;
            anyhow::Ok((slot, key))
        });
    }
    let mut agent_keys = vec![String::new(); members.len()];
    while let Some(joined) = members.join_next().await {
        let (slot, key) = joined??;
        agent_keys[slot] = key;
    }
    Ok(BenchOrg {
        index,
        org_id: org_id.to_string(),
        owner_key,
        agent_keys,
    })
}
