//! Row shapes as both backends return them, and their conversion to domain
//! records. Ids are text, integers `i64` (booleans are stored as 0 or 1) and
//! sealed content bytes on both backends, so one struct per row serves both;
//! fields are read by column name.

use super::StoreError;
use crate::domain::account::{
    Encryption, KeyRecord, MemberRecord, OrgRecord, Role, StoredOrg, Tier, WrappedDek,
};
use crate::domain::admin::{Membership, Tag, Team};
use crate::domain::retry::RetryPolicy;
use crate::domain::usage::Usage;
use crate::domain::{
    Lease, OrgId, Scheduled, StoredEvent, StoredTask, TaskHeader, TaskId, TaskStatus, WebhookId,
};

/// The header columns of `tasks`, as `HEADER_COLUMNS` selects them.
#[derive(sqlx::FromRow)]
pub struct HeaderRow {
    pub task_id: String,
    pub status: String,
    pub priority: i64,
    pub assignee: Option<String>,
    pub tags: String,
    pub blocked_by: String,
    pub parent_task_id: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub lease_id: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub lease_seconds: Option<i64>,
    pub attempts: i64,
    pub max_attempts: i64,
    pub run_at: Option<i64>,
    /// A [`StoredRetry`] as JSON.
    pub retry: Option<String>,
    pub retries: i64,
    pub schedule_id: Option<String>,
    pub scheduled_for: Option<i64>,
}

/// A task's retry policy as `tasks.retry` holds it.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct StoredRetry {
    pub max_retries: u8,
    pub backoff_seconds: u32,
    pub max_backoff_seconds: u32,
}

/// A whole task, as `FULL_COLUMNS` selects it.
#[derive(sqlx::FromRow)]
pub struct FullRow {
    #[sqlx(flatten)]
    pub header: HeaderRow,
    pub title: Vec<u8>,
    pub description: Option<Vec<u8>>,
    pub metadata: Option<Vec<u8>>,
    pub output: Option<Vec<u8>>,
}

/// A whole task and the org it belongs to, for reads across orgs.
#[derive(sqlx::FromRow)]
pub struct OrgTaskRow {
    pub org_id: String,
    #[sqlx(flatten)]
    pub task: FullRow,
}

/// A bare org id, as the queries that list orgs select it.
#[derive(sqlx::FromRow)]
pub struct OrgIdRow {
    pub org_id: String,
}

#[derive(sqlx::FromRow)]
pub struct EventRow {
    pub task_id: String,
    pub from_status: Option<String>,
    pub to_status: String,
    pub agent_id: String,
    pub at: i64,
    pub note: Option<Vec<u8>>,
    pub lease_expired: Option<i64>,
}

/// Every column of `orgs`; read by `get_org` and bound by the writes.
#[derive(sqlx::FromRow)]
pub struct OrgRow {
    pub org_id: String,
    pub name: String,
    pub tier: String,
    pub encryption: String,
    pub seats: i64,
    pub suspended: i64,
    pub limits: String,
    pub wrapped_dek: Option<Vec<u8>>,
    pub master_key_id: Option<String>,
    pub created_at: i64,
    pub idp_enrolled: i64,
    pub retention_days: Option<i64>,
}

/// An org's row with its deletion mark.
#[derive(sqlx::FromRow)]
pub struct FoundOrgRow {
    #[sqlx(flatten)]
    pub org: OrgRow,
    pub deleted_at: Option<i64>,
}

#[derive(sqlx::FromRow)]
pub struct MemberRow {
    pub org_id: String,
    pub email: String,
    pub role: String,
    pub seated: i64,
    pub profile_tags: String,
    pub joined_at: i64,
}

#[derive(sqlx::FromRow)]
pub struct KeyRow {
    pub key_id: String,
    pub org_id: String,
    pub email: String,
    pub name: String,
    pub secret_hash: Vec<u8>,
    pub active: i64,
    pub created_at: i64,
}

#[derive(sqlx::FromRow)]
pub struct TagRow {
    pub name: String,
    pub strict: i64,
    pub is_default: i64,
    pub description: Option<String>,
    pub created_by: String,
    pub created_at: i64,
}

#[derive(sqlx::FromRow)]
pub struct TeamRow {
    pub name: String,
    pub tags: String,
    pub description: Option<String>,
    pub idp_only: i64,
    pub created_by: String,
    pub created_at: i64,
}

/// A row of `team_members`.
#[derive(sqlx::FromRow)]
pub struct MembershipRow {
    pub team: String,
    pub email: String,
    pub manual: i64,
    pub idp: i64,
    pub added_by: String,
    pub added_at: i64,
}

/// A row of `org_usage`.
#[derive(sqlx::FromRow)]
pub struct UsageRow {
    pub month: String,
    pub requests: i64,
    pub tasks: i64,
    pub plans: i64,
    pub read_tat: i64,
    pub write_tat: i64,
}

fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

/// Parses a stored value, naming `what` if it is malformed.
fn parse<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, StoreError> {
    s.parse().map_err(|_| corrupt(what))
}

fn task_id(s: &str) -> Result<TaskId, StoreError> {
    s.parse().map_err(|_| corrupt(format_args!("task id {s}")))
}

pub(super) fn org_id(s: &str) -> Result<OrgId, StoreError> {
    s.parse().map_err(|_| corrupt(format_args!("org id {s}")))
}

pub(super) fn webhook_id(s: &str) -> Result<WebhookId, StoreError> {
    s.parse()
        .map_err(|_| corrupt(format_args!("webhook id {s}")))
}

pub(super) fn status(s: &str) -> Result<TaskStatus, StoreError> {
    TaskStatus::parse(s).ok_or_else(|| corrupt(format_args!("status {s}")))
}

/// Header fields in their stored form, for writes.
pub struct HeaderColumns {
    pub task_id: String,
    pub status: &'static str,
    pub status_rank: i64,
    pub priority: i64,
    pub assignee: Option<String>,
    pub tags: String,
    pub blocked_by: String,
    pub parent: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub lease_id: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub lease_seconds: Option<i64>,
    pub attempts: i64,
    pub max_attempts: i64,
    /// The status rank of a finished task; `None` while it is open.
    pub finished_rank: Option<i64>,
    pub run_at: Option<i64>,
    pub retry: Option<String>,
    pub retries: i64,
    pub schedule_id: Option<String>,
    pub scheduled_for: Option<i64>,
}

impl From<&TaskHeader> for HeaderColumns {
    fn from(h: &TaskHeader) -> Self {
        Self {
            task_id: h.task_id.to_string(),
            status: h.status.as_str(),
            status_rank: h.status.rank(),
            priority: i64::from(h.priority),
            assignee: h.assignee.clone(),
            tags: serde_json::to_string(&h.tags).unwrap_or_else(|_| "[]".into()),
            blocked_by: serde_json::to_string(&h.blocked_by).unwrap_or_else(|_| "[]".into()),
            parent: h.parent.map(|p| p.to_string()),
            created_at: h.created_at,
            updated_at: h.updated_at,
            lease_id: h.lease.map(|l| l.lease_id.to_string()),
            lease_expires_at: h.lease.map(|l| l.expires_at),
            lease_seconds: h.lease.map(|l| i64::from(l.seconds)),
            attempts: i64::from(h.attempts),
            max_attempts: i64::from(h.max_attempts),
            finished_rank: h.status.is_terminal().then(|| h.status.rank()),
            run_at: h.run_at,
            retry: h.retry.map(|r| {
                serde_json::to_string(&StoredRetry {
                    max_retries: r.max_retries,
                    backoff_seconds: r.backoff_seconds,
                    max_backoff_seconds: r.max_backoff_seconds,
                })
                .expect("a retry policy serializes")
            }),
            retries: i64::from(h.retries),
            schedule_id: h.scheduled.map(|s| s.schedule_id.to_string()),
            scheduled_for: h.scheduled.map(|s| s.scheduled_for),
        }
    }
}

impl TryFrom<HeaderRow> for TaskHeader {
    type Error = StoreError;
    fn try_from(r: HeaderRow) -> Result<Self, StoreError> {
        let tags: Vec<String> = serde_json::from_str(&r.tags).map_err(|_| corrupt("tags"))?;
        let blocked: Vec<String> =
            serde_json::from_str(&r.blocked_by).map_err(|_| corrupt("blocked_by"))?;
        let lease = match (r.lease_id, r.lease_expires_at, r.lease_seconds) {
            (Some(l), Some(at), Some(secs)) => Some(Lease {
                lease_id: parse(&l, "lease id")?,
                expires_at: at,
                seconds: u32::try_from(secs).map_err(|_| corrupt("lease seconds"))?,
            }),
            _ => None,
        };
        Ok(TaskHeader {
            task_id: task_id(&r.task_id)?,
            status: status(&r.status)?,
            priority: u8::try_from(r.priority).map_err(|_| corrupt("priority"))?,
            created_at: r.created_at,
            updated_at: r.updated_at,
            assignee: r.assignee,
            tags,
            blocked_by: blocked
                .iter()
                .map(|b| task_id(b))
                .collect::<Result<_, _>>()?,
            parent: r.parent_task_id.as_deref().map(task_id).transpose()?,
            lease,
            attempts: u8::try_from(r.attempts).map_err(|_| corrupt("attempts"))?,
            max_attempts: u8::try_from(r.max_attempts).map_err(|_| corrupt("max_attempts"))?,
            run_at: r.run_at,
            retry: r
                .retry
                .as_deref()
                .map(|json| {
                    let r: StoredRetry =
                        serde_json::from_str(json).map_err(|_| corrupt("retry"))?;
                    Ok::<_, StoreError>(RetryPolicy {
                        max_retries: r.max_retries,
                        backoff_seconds: r.backoff_seconds,
                        max_backoff_seconds: r.max_backoff_seconds,
                    })
                })
                .transpose()?,
            retries: u8::try_from(r.retries).map_err(|_| corrupt("retries"))?,
            scheduled: match (r.schedule_id, r.scheduled_for) {
                (Some(id), Some(scheduled_for)) => Some(Scheduled {
                    schedule_id: parse(&id, "schedule id")?,
                    scheduled_for,
                }),
                _ => None,
            },
        })
    }
}

impl TryFrom<FullRow> for StoredTask {
    type Error = StoreError;
    fn try_from(r: FullRow) -> Result<Self, StoreError> {
        Ok(StoredTask {
            header: TaskHeader::try_from(r.header)?,
            title: r.title,
            description: r.description,
            metadata: r.metadata,
            output: r.output,
        })
    }
}

impl TryFrom<OrgTaskRow> for (OrgId, StoredTask) {
    type Error = StoreError;
    fn try_from(r: OrgTaskRow) -> Result<Self, StoreError> {
        Ok((org_id(&r.org_id)?, StoredTask::try_from(r.task)?))
    }
}

impl TryFrom<OrgIdRow> for OrgId {
    type Error = StoreError;
    fn try_from(r: OrgIdRow) -> Result<Self, StoreError> {
        org_id(&r.org_id)
    }
}

impl TryFrom<EventRow> for StoredEvent {
    type Error = StoreError;
    fn try_from(r: EventRow) -> Result<Self, StoreError> {
        Ok(StoredEvent {
            task_id: task_id(&r.task_id)?,
            from_status: r.from_status.as_deref().map(status).transpose()?,
            to_status: status(&r.to_status)?,
            agent_id: r.agent_id,
            at: r.at,
            note: r.note,
            lease_expired: r.lease_expired.is_some_and(|e| e != 0),
        })
    }
}

impl From<&OrgRecord> for OrgRow {
    fn from(o: &OrgRecord) -> Self {
        Self {
            org_id: o.org_id.to_string(),
            name: o.name.clone(),
            tier: o.tier.as_str().to_owned(),
            encryption: o.encryption.as_str().to_owned(),
            seats: o.seats,
            suspended: i64::from(o.suspended),
            limits: serde_json::to_string(&o.limit_overrides).unwrap_or_else(|_| "{}".into()),
            wrapped_dek: o.wrapped_dek.as_ref().map(|w| w.bytes.clone()),
            master_key_id: o.wrapped_dek.as_ref().and_then(|w| w.master_key_id.clone()),
            created_at: o.created_at,
            idp_enrolled: i64::from(o.idp_enrolled),
            retention_days: o.retention_days,
        }
    }
}

impl TryFrom<OrgRow> for OrgRecord {
    type Error = StoreError;
    fn try_from(r: OrgRow) -> Result<Self, StoreError> {
        let limit_overrides = serde_json::from_str(&r.limits).map_err(|_| corrupt("org limits"))?;
        Ok(OrgRecord {
            org_id: parse(&r.org_id, "org id")?,
            name: r.name,
            tier: Tier::parse(&r.tier).ok_or_else(|| corrupt("tier"))?,
            encryption: Encryption::parse(&r.encryption).ok_or_else(|| corrupt("encryption"))?,
            seats: r.seats,
            suspended: r.suspended != 0,
            limit_overrides,
            wrapped_dek: r.wrapped_dek.map(|bytes| WrappedDek {
                master_key_id: r.master_key_id,
                bytes,
            }),
            idp_enrolled: r.idp_enrolled != 0,
            retention_days: r.retention_days,
            created_at: r.created_at,
        })
    }
}

impl TryFrom<FoundOrgRow> for StoredOrg {
    type Error = StoreError;
    fn try_from(r: FoundOrgRow) -> Result<Self, StoreError> {
        match r.deleted_at {
            Some(_) => Ok(StoredOrg::Deleting),
            None => r.org.try_into().map(StoredOrg::Live),
        }
    }
}

impl TryFrom<MemberRow> for MemberRecord {
    type Error = StoreError;
    fn try_from(r: MemberRow) -> Result<Self, StoreError> {
        Ok(MemberRecord {
            org_id: parse(&r.org_id, "org id")?,
            email: r.email,
            role: Role::parse(&r.role).ok_or_else(|| corrupt("role"))?,
            seated: r.seated != 0,
            profile_tags: serde_json::from_str(&r.profile_tags)
                .map_err(|_| corrupt("profile tags"))?,
            joined_at: r.joined_at,
        })
    }
}

impl TryFrom<KeyRow> for KeyRecord {
    type Error = StoreError;
    fn try_from(r: KeyRow) -> Result<Self, StoreError> {
        Ok(KeyRecord {
            key_id: parse(&r.key_id, "key id")?,
            org_id: parse(&r.org_id, "org id")?,
            email: r.email,
            name: r.name,
            secret_hash: r.secret_hash,
            active: r.active != 0,
            created_at: r.created_at,
        })
    }
}

impl From<TagRow> for Tag {
    fn from(r: TagRow) -> Self {
        Tag {
            name: r.name,
            strict: r.strict != 0,
            is_default: r.is_default != 0,
            description: r.description,
            created_by: r.created_by,
            created_at: r.created_at,
        }
    }
}

impl TryFrom<TeamRow> for Team {
    type Error = StoreError;
    fn try_from(r: TeamRow) -> Result<Self, StoreError> {
        Ok(Team {
            name: r.name,
            tags: serde_json::from_str(&r.tags).map_err(|_| corrupt("team tags"))?,
            description: r.description,
            idp_only: r.idp_only != 0,
            created_by: r.created_by,
            created_at: r.created_at,
        })
    }
}

impl From<MembershipRow> for Membership {
    fn from(r: MembershipRow) -> Self {
        Membership {
            team: r.team,
            email: r.email,
            manual: r.manual != 0,
            idp: r.idp != 0,
            added_by: r.added_by,
            added_at: r.added_at,
        }
    }
}

impl From<UsageRow> for Usage {
    fn from(r: UsageRow) -> Self {
        Usage {
            month: r.month,
            requests: r.requests,
            tasks: r.tasks,
            plans: r.plans,
            read_tat: r.read_tat.max(0) as u64,
            write_tat: r.write_tat.max(0) as u64,
        }
    }
}
