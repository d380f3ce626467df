//! Usage: an org's stored monthly counters and rate-bucket state. They are
//! written by the group commit (`WriteOp::SaveUsage`) and read back here.

use super::rows::UsageRow;
use super::{Arg, Result, Store};
use crate::domain::usage::Usage;
use crate::domain::OrgId;

impl Store {
    pub async fn org_usage(&self, org: OrgId) -> Result<Option<Usage>> {
        let row: Option<UsageRow> = self
            .fetch_optional(
                "SELECT month, requests, tasks, plans, read_tat, write_tat FROM org_usage \
                 WHERE org_id = $1",
                vec![Arg::Text(org.to_string())],
            )
            .await?;
        Ok(row.map(Usage::from))
    }
}
