//! Accounts: orgs, their members and API keys, and the org administration
//! records (tags, teams and team memberships).

use super::rows::{FoundOrgRow, KeyRow, MemberRow, MembershipRow, OrgIdRow, TagRow, TeamRow};
use super::{records, Arg, Result, Store, WriteBatch, WriteOp};
use crate::domain::account::{KeyRecord, MemberRecord, OrgRecord, StoredOrg};
use crate::domain::admin::{Membership, Tag, Team};
use crate::domain::{KeyId, OrgId};

impl Store {
    /// Creates an org with its owner and the owner's first key, atomically.
    pub async fn insert_org(
        &self,
        org: &OrgRecord,
        owner: &MemberRecord,
        key: &KeyRecord,
    ) -> Result<()> {
        let batch = WriteBatch::new(
            org.org_id,
            vec![
                WriteOp::InsertOrg(org.clone()),
                WriteOp::InsertMember(owner.clone()),
                WriteOp::InsertKey(key.clone()),
            ],
        );
        self.apply(&[&batch]).await
    }

    /// The org, or the mark of its deletion while its rows are removed.
    pub async fn find_org(&self, org: OrgId) -> Result<Option<StoredOrg>> {
        let row: Option<FoundOrgRow> = self
            .fetch_optional(
                "SELECT org_id, name, tier, encryption, seats, suspended, limits, wrapped_dek, \
                 master_key_id, created_at, idp_enrolled, retention_days, deleted_at FROM orgs \
                 WHERE org_id = $1",
                vec![Arg::Text(org.to_string())],
            )
            .await?;
        row.map(StoredOrg::try_from).transpose()
    }

    /// The org, unless it is deleted.
    pub async fn get_org(&self, org: OrgId) -> Result<Option<OrgRecord>> {
        Ok(match self.find_org(org).await? {
            Some(StoredOrg::Live(record)) => Some(record),
            Some(StoredOrg::Deleting) | None => None,
        })
    }

    /// The first org with this name, if any (used for the feedback org).
    pub async fn org_by_name(&self, name: &str) -> Result<Option<OrgId>> {
        let row: Option<OrgIdRow> = self
            .fetch_optional(
                "SELECT org_id FROM orgs WHERE name = $1 ORDER BY created_at LIMIT 1",
                vec![Arg::Text(name.to_owned())],
            )
            .await?;
        row.map(OrgId::try_from).transpose()
    }

    pub async fn get_key(&self, key_id: KeyId) -> Result<Option<KeyRecord>> {
        let row: Option<KeyRow> = self
            .fetch_optional(
                "SELECT key_id, org_id, email, name, secret_hash, active, created_at FROM api_keys \
                 WHERE key_id = $1",
                vec![Arg::Text(key_id.to_string())],
            )
            .await?;
        row.map(KeyRecord::try_from).transpose()
    }

    pub async fn org_keys(&self, org: OrgId) -> Result<Vec<KeyRecord>> {
        let rows: Vec<KeyRow> = self
            .org_rows(
                "SELECT key_id, org_id, email, name, secret_hash, active, created_at FROM api_keys \
                 WHERE org_id = $1 ORDER BY created_at, key_id",
                org,
            )
            .await?;
        records(rows)
    }

    pub async fn org_members(&self, org: OrgId) -> Result<Vec<MemberRecord>> {
        let rows: Vec<MemberRow> = self
            .org_rows(
                "SELECT org_id, email, role, seated, profile_tags, joined_at FROM members \
                 WHERE org_id = $1 ORDER BY joined_at, email",
                org,
            )
            .await?;
        records(rows)
    }

    /// Every org the email is a member of.
    pub async fn member_orgs(&self, email: &str) -> Result<Vec<OrgId>> {
        let rows: Vec<OrgIdRow> = self
            .fetch_all(
                "SELECT org_id FROM members WHERE email = $1",
                vec![Arg::Text(email.to_owned())],
            )
            .await?;
        records(rows)
    }

    pub async fn org_tags(&self, org: OrgId) -> Result<Vec<Tag>> {
        let rows: Vec<TagRow> = self
            .org_rows(
                "SELECT name, strict, is_default, description, created_by, created_at FROM tags \
                 WHERE org_id = $1",
                org,
            )
            .await?;
        Ok(rows.into_iter().map(Tag::from).collect())
    }

    pub async fn org_teams(&self, org: OrgId) -> Result<Vec<Team>> {
        let rows: Vec<TeamRow> = self
            .org_rows(
                "SELECT name, tags, description, idp_only, created_by, created_at FROM teams \
                 WHERE org_id = $1",
                org,
            )
            .await?;
        records(rows)
    }

    pub async fn org_memberships(&self, org: OrgId) -> Result<Vec<Membership>> {
        let rows: Vec<MembershipRow> = self
            .org_rows(
                "SELECT team, email, manual, idp, added_by, added_at FROM team_members \
                 WHERE org_id = $1",
                org,
            )
            .await?;
        Ok(rows.into_iter().map(Membership::from).collect())
    }
}
