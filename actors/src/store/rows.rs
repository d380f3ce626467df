//! Row shapes as both backends return them, and their conversion to domain
//! records. Integers are `i64` and ids are text on both backends, so one
//! tuple type serves both.

use super::StoreError;
use crate::domain::account::{Encryption, KeyRecord, MemberRecord, OrgRecord, Role, Tier};
use crate::domain::admin::{Membership, Tag, Team};
use crate::domain::{Lease, StoredEvent, StoredTask, TaskHeader, TaskId, TaskStatus};

pub type HeaderRow = (
    String,
    String,
    i64,
    Option<String>,
    String,
    String,
    Option<String>,
    i64,
    i64,
    Option<String>,
    Option<i64>,
    Option<i64>,
);

pub type FullRow = (
    String,
    String,
    i64,
    Option<String>,
    String,
    String,
    Option<String>,
    i64,
    i64,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Vec<u8>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
);

pub type EventRow = (String, Option<String>, String, String, i64, Option<Vec<u8>>);
pub type OrgRow = (
    String,
    String,
    String,
    String,
    i64,
    i64,
    String,
    Option<Vec<u8>>,
    i64,
    i64,
);
pub type TagRow = (String, i64, i64, Option<String>, String, i64);
pub type TeamRow = (String, String, Option<String>, i64, String, i64);
pub type MembershipRow = (String, String, i64, i64, String, i64);
pub type MemberRow = (String, String, String, i64, String, i64);
pub type KeyRow = (String, String, String, String, Vec<u8>, i64, i64);

fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

fn task_id(s: &str) -> Result<TaskId, StoreError> {
    s.parse().map_err(|_| corrupt(format_args!("task id {s}")))
}

fn status(s: &str) -> Result<TaskStatus, StoreError> {
    TaskStatus::parse(s).ok_or_else(|| corrupt(format_args!("status {s}")))
}

/// Header fields in their stored form.
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
}

impl From<&TaskHeader> for HeaderColumns {
    fn from(h: &TaskHeader) -> Self {
        let blocked: Vec<String> = h.blocked_by.iter().map(|b| b.to_string()).collect();
        Self {
            task_id: h.task_id.to_string(),
            status: h.status.as_str(),
            status_rank: h.status.rank(),
            priority: i64::from(h.priority),
            assignee: h.assignee.clone(),
            tags: serde_json::to_string(&h.tags).unwrap_or_else(|_| "[]".into()),
            blocked_by: serde_json::to_string(&blocked).unwrap_or_else(|_| "[]".into()),
            parent: h.parent.map(|p| p.to_string()),
            created_at: h.created_at,
            updated_at: h.updated_at,
            lease_id: h.lease.map(|l| l.lease_id.to_string()),
            lease_expires_at: h.lease.map(|l| l.expires_at),
            lease_seconds: h.lease.map(|l| i64::from(l.seconds)),
        }
    }
}

fn header(
    (
        id,
        st,
        priority,
        assignee,
        tags,
        blocked,
        parent,
        created,
        updated,
        lease_id,
        lease_at,
        lease_secs,
    ): HeaderRow,
) -> Result<TaskHeader, StoreError> {
    let tags: Vec<String> = serde_json::from_str(&tags).map_err(|_| corrupt("tags"))?;
    let blocked: Vec<String> = serde_json::from_str(&blocked).map_err(|_| corrupt("blocked_by"))?;
    let lease = match (lease_id, lease_at, lease_secs) {
        (Some(l), Some(at), Some(secs)) => Some(Lease {
            lease_id: l.parse().map_err(|_| corrupt("lease id"))?,
            expires_at: at,
            seconds: u32::try_from(secs).map_err(|_| corrupt("lease seconds"))?,
        }),
        _ => None,
    };
    Ok(TaskHeader {
        task_id: task_id(&id)?,
        status: status(&st)?,
        priority: u8::try_from(priority).map_err(|_| corrupt("priority"))?,
        created_at: created,
        updated_at: updated,
        assignee,
        tags,
        blocked_by: blocked
            .iter()
            .map(|b| task_id(b))
            .collect::<Result<_, _>>()?,
        parent: parent.as_deref().map(task_id).transpose()?,
        lease,
    })
}

impl TryFrom<HeaderRow> for TaskHeader {
    type Error = StoreError;
    fn try_from(row: HeaderRow) -> Result<Self, StoreError> {
        header(row)
    }
}

impl TryFrom<FullRow> for StoredTask {
    type Error = StoreError;
    fn try_from(r: FullRow) -> Result<Self, StoreError> {
        Ok(StoredTask {
            header: header((r.0, r.1, r.2, r.3, r.4, r.5, r.6, r.7, r.8, r.9, r.10, r.11))?,
            title: r.12,
            description: r.13,
            metadata: r.14,
            output: r.15,
        })
    }
}

impl TryFrom<EventRow> for StoredEvent {
    type Error = StoreError;
    fn try_from((task, from, to, agent_id, at, note): EventRow) -> Result<Self, StoreError> {
        Ok(StoredEvent {
            task_id: task_id(&task)?,
            from_status: from.as_deref().map(status).transpose()?,
            to_status: status(&to)?,
            agent_id,
            at,
            note,
        })
    }
}

impl From<&OrgRecord> for OrgRow {
    fn from(o: &OrgRecord) -> Self {
        (
            o.org_id.to_string(),
            o.name.clone(),
            o.tier.as_str().to_owned(),
            o.encryption.as_str().to_owned(),
            o.seats,
            i64::from(o.suspended),
            serde_json::to_string(&o.limit_overrides).unwrap_or_else(|_| "{}".into()),
            o.wrapped_dek.clone(),
            o.created_at,
            i64::from(o.idp_enrolled),
        )
    }
}

impl TryFrom<OrgRow> for OrgRecord {
    type Error = StoreError;
    fn try_from(
        (id, name, tier, encryption, seats, suspended, limits, wrapped_dek, created_at, idp): OrgRow,
    ) -> Result<Self, StoreError> {
        let limit_overrides = serde_json::from_str(&limits).map_err(|_| corrupt("org limits"))?;
        Ok(OrgRecord {
            org_id: id.parse().map_err(|_| corrupt("org id"))?,
            name,
            tier: Tier::parse(&tier).ok_or_else(|| corrupt("tier"))?,
            encryption: Encryption::parse(&encryption).ok_or_else(|| corrupt("encryption"))?,
            seats,
            suspended: suspended != 0,
            limit_overrides,
            wrapped_dek,
            idp_enrolled: idp != 0,
            created_at,
        })
    }
}

impl TryFrom<MemberRow> for MemberRecord {
    type Error = StoreError;
    fn try_from(
        (org, email, role, seated, profile_tags, joined_at): MemberRow,
    ) -> Result<Self, StoreError> {
        Ok(MemberRecord {
            org_id: org.parse().map_err(|_| corrupt("org id"))?,
            email,
            role: Role::parse(&role).ok_or_else(|| corrupt("role"))?,
            seated: seated != 0,
            profile_tags: serde_json::from_str(&profile_tags)
                .map_err(|_| corrupt("profile tags"))?,
            joined_at,
        })
    }
}

impl TryFrom<KeyRow> for KeyRecord {
    type Error = StoreError;
    fn try_from(
        (key_id, org, email, name, secret_hash, active, created_at): KeyRow,
    ) -> Result<Self, StoreError> {
        Ok(KeyRecord {
            key_id: key_id.parse().map_err(|_| corrupt("key id"))?,
            org_id: org.parse().map_err(|_| corrupt("org id"))?,
            email,
            name,
            secret_hash,
            active: active != 0,
            created_at,
        })
    }
}

impl From<TagRow> for Tag {
    fn from((name, strict, is_default, description, created_by, created_at): TagRow) -> Self {
        Tag {
            name,
            strict: strict != 0,
            is_default: is_default != 0,
            description,
            created_by,
            created_at,
        }
    }
}

impl TryFrom<TeamRow> for Team {
    type Error = StoreError;
    fn try_from(
        (name, tags, description, idp_only, created_by, created_at): TeamRow,
    ) -> Result<Self, StoreError> {
        Ok(Team {
            name,
            tags: serde_json::from_str(&tags).map_err(|_| corrupt("team tags"))?,
            description,
            idp_only: idp_only != 0,
            created_by,
            created_at,
        })
    }
}

impl From<MembershipRow> for Membership {
    fn from((team, email, manual, idp, added_by, added_at): MembershipRow) -> Self {
        Membership {
            team,
            email,
            manual: manual != 0,
            idp: idp != 0,
            added_by,
            added_at,
        }
    }
}
