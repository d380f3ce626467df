//! What an org actor loads when it starts, gathered in one call from the
//! individual loaders.

use super::{Result, Store};
use crate::domain::account::{KeyRecord, MemberRecord, OrgRecord};
use crate::domain::admin::{Membership, Tag, Team};
use crate::domain::schedule::ScheduleRecord;
use crate::domain::usage::Usage;
use crate::domain::webhooks::Endpoint;
use crate::domain::{OrgId, TaskHeader};

/// Everything stored for one org that its actor holds in memory.
#[derive(Debug, Default)]
pub struct OrgRecords {
    /// `None` for no such org.
    pub record: Option<OrgRecord>,
    pub open_tasks: Vec<TaskHeader>,
    pub members: Vec<MemberRecord>,
    pub keys: Vec<KeyRecord>,
    pub tags: Vec<Tag>,
    pub teams: Vec<Team>,
    pub memberships: Vec<Membership>,
    pub webhooks: Vec<Endpoint>,
    pub schedules: Vec<ScheduleRecord>,
    /// `None` until the org's usage is first saved.
    pub usage: Option<Usage>,
}

impl Store {
    /// The org's record, its open task headers, members, keys, tags, teams, memberships
    /// and usage, read at once outside a transaction: the caller makes sure
    /// no write of the org is in flight.
    pub async fn load_org(&self, org: OrgId) -> Result<OrgRecords> {
        let (
            record,
            open_tasks,
            members,
            keys,
            tags,
            teams,
            memberships,
            webhooks,
            schedules,
            usage,
        ) = tokio::try_join!(
            self.get_org(org),
            self.open_task_headers(org),
            self.org_members(org),
            self.org_keys(org),
            self.org_tags(org),
            self.org_teams(org),
            self.org_memberships(org),
            self.org_webhooks(org),
            self.org_schedules(org),
            self.org_usage(org),
        )?;
        Ok(OrgRecords {
            record,
            open_tasks,
            members,
            keys,
            tags,
            teams,
            memberships,
            webhooks,
            schedules,
            usage,
        })
    }
}
