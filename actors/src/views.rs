//! Tasks as clients see them: content opened and decoded into the answer
//! types. A value that fails its binding check is never served; the whole
//! answer becomes `CiphertextBinding`.

use serde::de::DeserializeOwned;

use crate::api::{
    LeaseTerms, Object, RetryPolicyView, TaskEvent, TaskSummary, TaskView, Text, Timestamp,
};
use crate::crypto::OrgCipher;
use crate::domain::{ContentField, StoredEvent, StoredTask, TaskId};
use crate::error::EngineError;

fn binding(task_id: TaskId, field: ContentField) -> EngineError {
    EngineError::CiphertextBinding {
        task_id,
        field: field.name(),
    }
}

/// Opens a sealed JSON value.
fn open<T: DeserializeOwned>(
    cipher: &OrgCipher,
    task: TaskId,
    field: ContentField,
    sealed: &[u8],
) -> Result<T, EngineError> {
    let bytes = cipher
        .open(task, field.name(), sealed)
        .map_err(|_| binding(task, field))?;
    serde_json::from_slice(&bytes).map_err(|_| binding(task, field))
}

fn open_optional<T: DeserializeOwned>(
    cipher: &OrgCipher,
    task: TaskId,
    field: ContentField,
    sealed: &Option<Vec<u8>>,
) -> Result<Option<T>, EngineError> {
    sealed
        .as_deref()
        .map(|s| open(cipher, task, field, s))
        .transpose()
}

pub fn title(cipher: &OrgCipher, t: &StoredTask) -> Result<Text, EngineError> {
    open(cipher, t.header.task_id, ContentField::Title, &t.title)
}

pub fn description(cipher: &OrgCipher, t: &StoredTask) -> Result<Option<Text>, EngineError> {
    open_optional(
        cipher,
        t.header.task_id,
        ContentField::Description,
        &t.description,
    )
}

pub fn output(cipher: &OrgCipher, t: &StoredTask) -> Result<Option<Object>, EngineError> {
    open_optional(cipher, t.header.task_id, ContentField::Output, &t.output)
}

/// The lean list item, as it stands at `now` (`run_at` only while ahead).
pub fn task_summary(
    cipher: &OrgCipher,
    t: &StoredTask,
    now: i64,
) -> Result<TaskSummary, EngineError> {
    let h = &t.header;
    Ok(TaskSummary {
        task_id: h.task_id,
        title: title(cipher, t)?,
        status: h.status,
        priority: h.priority,
        updated_at: Timestamp(h.updated_at),
        assignee: h.assignee.clone(),
        tags: h.tags.clone(),
        blocked_by: h.blocked_by.clone(),
        parent_task_id: h.parent,
        run_at: h.run_at.filter(|at| *at > now).map(Timestamp),
    })
}

/// The complete task.
pub fn task_view(cipher: &OrgCipher, t: &StoredTask) -> Result<TaskView, EngineError> {
    let h = &t.header;
    let metadata = open_optional(cipher, h.task_id, ContentField::Metadata, &t.metadata)?;
    Ok(TaskView {
        task_id: h.task_id,
        title: title(cipher, t)?,
        description: description(cipher, t)?,
        status: h.status,
        priority: h.priority,
        assignee: h.assignee.clone(),
        tags: h.tags.clone(),
        metadata: metadata.unwrap_or_default(),
        output: output(cipher, t)?,
        blocked_by: h.blocked_by.clone(),
        parent_task_id: h.parent,
        created_at: Timestamp(h.created_at),
        updated_at: Timestamp(h.updated_at),
        attempts: h.attempts,
        max_attempts: h.max_attempts,
        lease: h.lease.map(|l| LeaseTerms {
            lease_expires_at: Timestamp(l.expires_at),
            lease_seconds: l.seconds,
        }),
        run_at: h.run_at.map(Timestamp),
        retry: h.retry.map(|r| RetryPolicyView {
            max_retries: r.max_retries,
            backoff_seconds: r.backoff_seconds,
            max_backoff_seconds: r.max_backoff_seconds,
        }),
        retries: h.retries,
        schedule_id: h.scheduled.map(|s| s.schedule_id),
        scheduled_for: h.scheduled.map(|s| Timestamp(s.scheduled_for)),
    })
}

pub fn event(cipher: &OrgCipher, e: &StoredEvent) -> Result<TaskEvent, EngineError> {
    let note = e
        .note
        .as_deref()
        .map(|sealed| {
            cipher
                .open(e.task_id, ContentField::Note.name(), sealed)
                .ok()
                .and_then(|bytes| crate::api::note_from_bytes(&bytes))
                .ok_or_else(|| binding(e.task_id, ContentField::Note))
        })
        .transpose()?;
    Ok(TaskEvent {
        from_status: e.from_status,
        to_status: e.to_status,
        agent_id: e.agent_id.clone(),
        timestamp: Timestamp(e.at),
        note,
    })
}
