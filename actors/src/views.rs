//! Tasks as clients see them: content opened and decoded, timestamps
//! formatted, lean or full. A value that fails its binding check is never
//! served; the whole answer becomes `CiphertextBinding`.

use serde_json::{json, Map, Value};

use crate::clock::format_ms;
use crate::crypto::OrgCipher;
use crate::domain::{ContentField, StoredEvent, StoredTask, TaskId};
use crate::error::EngineError;

pub fn open_value(
    cipher: &OrgCipher,
    task: TaskId,
    field: ContentField,
    sealed: &[u8],
) -> Result<Value, EngineError> {
    let binding = || EngineError::CiphertextBinding {
        task_id: task,
        field: field.name(),
    };
    let bytes = cipher
        .open(task, field.name(), sealed)
        .map_err(|_| binding())?;
    serde_json::from_slice(&bytes).map_err(|_| binding())
}

fn open_optional(
    cipher: &OrgCipher,
    task: TaskId,
    field: ContentField,
    sealed: &Option<Vec<u8>>,
) -> Result<Value, EngineError> {
    match sealed {
        Some(s) => open_value(cipher, task, field, s),
        None => Ok(Value::Null),
    }
}

/// The lean list item: always task_id, title, status, priority, updated_at;
/// assignee, tags, blocked_by, parent_task_id only when set.
pub fn lean_task(cipher: &OrgCipher, t: &StoredTask) -> Result<Value, EngineError> {
    let h = &t.header;
    let mut m = Map::new();
    m.insert("task_id".into(), json!(h.task_id));
    m.insert(
        "title".into(),
        open_value(cipher, h.task_id, ContentField::Title, &t.title)?,
    );
    m.insert("status".into(), json!(h.status));
    m.insert("priority".into(), json!(h.priority));
    m.insert("updated_at".into(), json!(format_ms(h.updated_at)));
    if let Some(a) = &h.assignee {
        m.insert("assignee".into(), json!(a));
    }
    if !h.tags.is_empty() {
        m.insert("tags".into(), json!(h.tags));
    }
    if !h.blocked_by.is_empty() {
        m.insert("blocked_by".into(), json!(h.blocked_by));
    }
    if let Some(p) = h.parent {
        m.insert("parent_task_id".into(), json!(p));
    }
    Ok(Value::Object(m))
}

/// The complete task.
pub fn full_task(cipher: &OrgCipher, t: &StoredTask) -> Result<Map<String, Value>, EngineError> {
    let h = &t.header;
    let id = h.task_id;
    let metadata = match open_optional(cipher, id, ContentField::Metadata, &t.metadata)? {
        Value::Null => json!({}),
        v => v,
    };
    let mut m = Map::new();
    m.insert("task_id".into(), json!(id));
    m.insert(
        "title".into(),
        open_value(cipher, id, ContentField::Title, &t.title)?,
    );
    m.insert(
        "description".into(),
        open_optional(cipher, id, ContentField::Description, &t.description)?,
    );
    m.insert("status".into(), json!(h.status));
    m.insert("priority".into(), json!(h.priority));
    m.insert("assignee".into(), json!(h.assignee));
    m.insert("tags".into(), json!(h.tags));
    m.insert("metadata".into(), metadata);
    m.insert(
        "output".into(),
        open_optional(cipher, id, ContentField::Output, &t.output)?,
    );
    m.insert("blocked_by".into(), json!(h.blocked_by));
    m.insert("parent_task_id".into(), json!(h.parent));
    m.insert("created_at".into(), json!(format_ms(h.created_at)));
    m.insert("updated_at".into(), json!(format_ms(h.updated_at)));
    if let Some(lease) = h.lease {
        m.insert(
            "lease_expires_at".into(),
            json!(format_ms(lease.expires_at)),
        );
        m.insert("lease_seconds".into(), json!(lease.seconds));
    }
    Ok(m)
}

pub fn event(cipher: &OrgCipher, e: &StoredEvent) -> Result<Value, EngineError> {
    let note = match &e.note {
        Some(sealed) => {
            let bytes = cipher
                .open(e.task_id, ContentField::Note.name(), sealed)
                .map_err(|_| EngineError::CiphertextBinding {
                    task_id: e.task_id,
                    field: "note",
                })?;
            Value::String(String::from_utf8_lossy(&bytes).into_owned())
        }
        None => Value::Null,
    };
    Ok(json!({
        "from_status": e.from_status,
        "to_status": e.to_status,
        "agent_id": e.agent_id,
        "timestamp": format_ms(e.at),
        "note": note,
    }))
}
