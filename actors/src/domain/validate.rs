//! Request validation: JSON in, typed requests out, or a `ValidationError`
//! that names the offending field. Everything here runs before anything is
//! written, so a failure leaves no trace.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};
use uuid::Uuid;

use super::{BlockerRef, ClaimRequest, ListQuery, NewTask, TaskId, TaskStatus, TaskUpdate};
use crate::error::ValidationError;

pub const MAX_BATCH: usize = 25;
pub const DEFAULT_PRIORITY: u8 = 3;
pub const DEFAULT_LEASE_SECONDS: u32 = 14_400;
pub const MAX_LEASE_SECONDS: u32 = 259_200;
pub const DEFAULT_LIST_LIMIT: u32 = 50;
pub const MAX_LIST_LIMIT: u32 = 200;
/// The reserved key of a client-encrypted envelope.
pub const ENVELOPE_KEY: &str = "__service_enc__";

type Result<T> = std::result::Result<T, ValidationError>;

/// Whether the org encrypts for itself (BYOK) or lets the server do it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentPolicy {
    Managed,
    ClientEncrypted,
}

fn err(field: &str, message: &str) -> ValidationError {
    ValidationError::field(field, message)
}

fn body_object<'a>(body: &'a Value, what: &str) -> Result<&'a Map<String, Value>> {
    body.as_object().ok_or_else(|| {
        ValidationError::new(format!("request body must be a JSON object with {what}"))
    })
}

/// Refuses keys outside `known`, naming the first with its `path` prefix.
pub(crate) fn reject_unknown(obj: &Map<String, Value>, path: &str, known: &[&str]) -> Result<()> {
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(ValidationError::new(format!("{path}{k}: unknown field"))),
        None => Ok(()),
    }
}

/// The `key` array of a batch body: present, an array, 1 to 25 items.
pub(crate) fn batch<'a>(body: &'a Value, key: &str) -> Result<&'a Vec<Value>> {
    let obj = body_object(body, &format!("a `{key}` array"))?;
    reject_unknown(obj, "", &[key])?;
    let items = match obj.get(key) {
        None => return Err(err(key, "is required")),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(err(key, "must be an array")),
    };
    if items.is_empty() || items.len() > MAX_BATCH {
        return Err(err(
            key,
            &format!("must hold 1 to {MAX_BATCH} items, got {}", items.len()),
        ));
    }
    Ok(items)
}

fn string(v: &Value, field: &str) -> Result<String> {
    v.as_str()
        .map(str::to_owned)
        .ok_or_else(|| err(field, "must be a string"))
}

fn non_empty_string(v: &Value, field: &str) -> Result<String> {
    let s = string(v, field)?;
    if s.trim().is_empty() {
        return Err(err(field, "must not be empty"));
    }
    Ok(s)
}

fn uuid(v: &Value, field: &str) -> Result<Uuid> {
    v.as_str()
        .and_then(|s| s.parse::<TaskId>().ok())
        .map(|id| id.0)
        .ok_or_else(|| err(field, "must be a canonical UUID string"))
}

fn task_id(v: &Value, field: &str) -> Result<TaskId> {
    uuid(v, field).map(TaskId)
}

fn priority(v: &Value, field: &str) -> Result<u8> {
    match v.as_i64() {
        Some(p @ 1..=5) => Ok(p as u8),
        Some(_) => Err(err(field, "priority must be between 1 and 5")),
        None => Err(err(field, "must be an integer between 1 and 5")),
    }
}

fn tag_list(v: &Value, field: &str) -> Result<Vec<String>> {
    let items = v
        .as_array()
        .ok_or_else(|| err(field, "must be an array of strings"))?;
    let mut tags: Vec<String> = Vec::with_capacity(items.len());
    for (i, t) in items.iter().enumerate() {
        let tag = non_empty_string(t, &format!("{field}[{i}]"))?;
        if !tags.contains(&tag) {
            tags.push(tag);
        }
    }
    Ok(tags)
}

fn is_envelope(v: &Value) -> bool {
    v.as_object().is_some_and(|o| o.contains_key(ENVELOPE_KEY))
}

/// A text field (title, description): a string, or for client-encrypted orgs
/// an envelope object in its place.
fn text_content(v: &Value, field: &str, policy: ContentPolicy) -> Result<Value> {
    match v {
        Value::String(_) => Ok(v.clone()),
        Value::Object(_) if is_envelope(v) => match policy {
            ContentPolicy::ClientEncrypted => Ok(v.clone()),
            ContentPolicy::Managed => Err(managed_rejects(field)),
        },
        _ => Err(err(field, "must be a string")),
    }
}

/// An object field (metadata, output): a JSON object; managed orgs refuse the
/// envelope key anywhere at its top level.
fn object_content(v: &Value, field: &str, policy: ContentPolicy) -> Result<Map<String, Value>> {
    let obj = v
        .as_object()
        .ok_or_else(|| err(field, "must be a JSON object"))?;
    if policy == ContentPolicy::Managed && obj.contains_key(ENVELOPE_KEY) {
        return Err(managed_rejects(field));
    }
    Ok(obj.clone())
}

fn managed_rejects(field: &str) -> ValidationError {
    err(
        field,
        "client-encrypted content (__service_enc__) is not accepted by a server-managed org",
    )
}

fn optional_string(v: &Value, field: &str) -> Result<Option<String>> {
    match v {
        Value::Null => Ok(None),
        _ => non_empty_string(v, field).map(Some),
    }
}

/// `POST /tasks` body.
pub fn create_tasks(body: &Value, policy: ContentPolicy) -> Result<Vec<NewTask>> {
    let items = batch(body, "tasks")?;
    let mut out = Vec::with_capacity(items.len());
    let mut refs = HashSet::new();
    let mut ids = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let p = format!("tasks[{i}]");
        let obj = item
            .as_object()
            .ok_or_else(|| err(&p, "must be an object"))?;
        reject_unknown(
            obj,
            &format!("{p}."),
            &[
                "title",
                "description",
                "parent_task_id",
                "assignee",
                "priority",
                "tags",
                "metadata",
                "blocked_by",
                "ref",
                "task_id",
            ],
        )?;
        let f = |name: &str| format!("{p}.{name}");
        let title = match obj.get("title") {
            None | Some(Value::Null) => return Err(err(&f("title"), "is required")),
            Some(v) => {
                let t = text_content(v, &f("title"), policy)?;
                if t.as_str().is_some_and(|s| s.trim().is_empty()) {
                    return Err(err(&f("title"), "must not be empty"));
                }
                t
            }
        };
        let description = match obj.get("description") {
            None | Some(Value::Null) => None,
            Some(v) => Some(text_content(v, &f("description"), policy)?),
        };
        let client_id = match obj.get("task_id") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let id = v
                    .as_str()
                    .and_then(TaskId::parse_canonical)
                    .ok_or_else(|| {
                        err(&f("task_id"), "must be a canonical lowercase UUID string")
                    })?;
                if !ids.insert(id) {
                    return Err(err(&f("task_id"), "appears twice in this call"));
                }
                Some(id)
            }
        };
        let reference = match obj.get("ref") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let r = non_empty_string(v, &f("ref"))?;
                if !refs.insert(r.clone()) {
                    return Err(err(&f("ref"), &format!("duplicate ref '{r}' in this call")));
                }
                Some(r)
            }
        };
        let parent = match obj.get("parent_task_id") {
            None | Some(Value::Null) => None,
            Some(v) => Some(task_id(v, &f("parent_task_id"))?),
        };
        let assignee = match obj.get("assignee") {
            None => None,
            Some(v) => optional_string(v, &f("assignee"))?,
        };
        let priority = match obj.get("priority") {
            None | Some(Value::Null) => DEFAULT_PRIORITY,
            Some(v) => priority(v, &f("priority"))?,
        };
        let tags = match obj.get("tags") {
            None | Some(Value::Null) => None,
            Some(v) => Some(tag_list(v, &f("tags"))?),
        };
        let metadata = match obj.get("metadata") {
            None | Some(Value::Null) => None,
            Some(v) if policy == ContentPolicy::ClientEncrypted && is_envelope(v) => {
                Some(v.clone())
            }
            Some(v) => Some(Value::Object(object_content(v, &f("metadata"), policy)?)),
        };
        let blocked_by = match obj.get("blocked_by") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(list)) => {
                let mut out: Vec<BlockerRef> = Vec::with_capacity(list.len());
                for (j, b) in list.iter().enumerate() {
                    let bf = format!("{p}.blocked_by[{j}]");
                    let s = b
                        .as_str()
                        .ok_or_else(|| err(&bf, "must be a task UUID or a 'ref:<name>' string"))?;
                    let blocker = match s.strip_prefix("ref:") {
                        Some(name) if !name.is_empty() => BlockerRef::Ref(name.to_owned()),
                        _ => BlockerRef::Task(s.parse().map_err(|_| {
                            err(&bf, "must be a task UUID or a 'ref:<name>' string")
                        })?),
                    };
                    if !out.contains(&blocker) {
                        out.push(blocker);
                    }
                }
                out
            }
            Some(_) => return Err(err(&f("blocked_by"), "must be an array")),
        };
        out.push(NewTask {
            task_id: client_id,
            reference,
            title,
            description,
            parent,
            assignee,
            priority,
            tags,
            metadata,
            blocked_by,
        });
    }
    check_ref_graph(&out)?;
    Ok(out)
}

/// Every `ref:` names an item of the call, no item blocks itself, and the
/// refs form no cycle.
pub fn check_ref_graph(items: &[NewTask]) -> Result<()> {
    let index: HashMap<&str, usize> = items
        .iter()
        .enumerate()
        .filter_map(|(i, t)| t.reference.as_deref().map(|r| (r, i)))
        .collect();
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); items.len()];
    for (i, item) in items.iter().enumerate() {
        for b in &item.blocked_by {
            let target = match b {
                BlockerRef::Ref(name) => *index.get(name.as_str()).ok_or_else(|| {
                    err(
                        &format!("tasks[{i}].blocked_by"),
                        &format!("ref:{name} names no item of this call"),
                    )
                })?,
                BlockerRef::Task(id) => match items.iter().position(|t| t.task_id == Some(*id)) {
                    Some(j) => j,
                    None => continue,
                },
            };
            if target == i {
                return Err(err(
                    &format!("tasks[{i}].blocked_by"),
                    "a task cannot block itself",
                ));
            }
            edges[i].push(target);
        }
    }
    // Iterative three-colour depth-first search.
    let mut colour = vec![0u8; items.len()];
    for start in 0..items.len() {
        if colour[start] != 0 {
            continue;
        }
        let mut stack = vec![(start, 0usize)];
        colour[start] = 1;
        while let Some((node, next)) = stack.pop() {
            if let Some(&to) = edges[node].get(next) {
                stack.push((node, next + 1));
                match colour[to] {
                    0 => {
                        colour[to] = 1;
                        stack.push((to, 0));
                    }
                    1 => {
                        return Err(err(
                            &format!("tasks[{node}].blocked_by"),
                            "the blockers of this call form a cycle",
                        ))
                    }
                    _ => {}
                }
            } else {
                colour[node] = 2;
            }
        }
    }
    Ok(())
}

/// `POST /tasks/update` body.
pub fn update_tasks(body: &Value, policy: ContentPolicy) -> Result<Vec<TaskUpdate>> {
    let items = batch(body, "updates")?;
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = format!("updates[{i}]");
        let obj = item
            .as_object()
            .ok_or_else(|| err(&p, "must be an object"))?;
        reject_unknown(
            obj,
            &format!("{p}."),
            &[
                "task_id",
                "status",
                "title",
                "note",
                "output",
                "assignee",
                "priority",
                "blocked_by",
                "tags",
                "description",
                "metadata",
                "agent_id",
                "lease_id",
            ],
        )?;
        let f = |name: &str| format!("{p}.{name}");
        let mut u = TaskUpdate {
            task_id: Some(match obj.get("task_id") {
                None | Some(Value::Null) => return Err(err(&f("task_id"), "is required")),
                Some(v) => task_id(v, &f("task_id"))?,
            }),
            ..TaskUpdate::default()
        };
        for (key, v) in obj {
            let field = f(key);
            match key.as_str() {
                "status" => {
                    let s = string(v, &field)?;
                    u.status = Some(
                        TaskStatus::parse(&s)
                            .ok_or_else(|| err(&field, &format!("unknown status '{s}'")))?,
                    );
                }
                "title" => {
                    let t = text_content(v, &field, policy)?;
                    if t.as_str().is_some_and(|s| s.trim().is_empty()) {
                        return Err(err(&field, "must not be empty"));
                    }
                    u.title = Some(t);
                }
                "description" => {
                    u.description = Some(match v {
                        Value::Null => None,
                        _ => Some(text_content(v, &field, policy)?),
                    })
                }
                "note" => u.note = optional_string(v, &field)?,
                "output" => {
                    u.output = Some(
                        if policy == ContentPolicy::ClientEncrypted && is_envelope(v) {
                            v.clone()
                        } else {
                            Value::Object(object_content(v, &field, policy)?)
                        },
                    )
                }
                "assignee" => u.assignee = Some(optional_string(v, &field)?),
                "priority" => u.priority = Some(priority(v, &field)?),
                "blocked_by" => {
                    let list = v
                        .as_array()
                        .ok_or_else(|| err(&field, "must be an array of task UUIDs"))?;
                    let mut ids: Vec<TaskId> = Vec::with_capacity(list.len());
                    for (j, b) in list.iter().enumerate() {
                        let id = task_id(b, &format!("{field}[{j}]"))?;
                        if !ids.contains(&id) {
                            ids.push(id);
                        }
                    }
                    u.blocked_by = Some(ids);
                }
                "tags" => u.tags = Some(tag_list(v, &field)?),
                "metadata" => {
                    if policy == ContentPolicy::ClientEncrypted && is_envelope(v) {
                        // A client-encrypted metadata object replaces the whole value.
                        let mut m = Map::new();
                        m.insert(ENVELOPE_KEY.to_owned(), v[ENVELOPE_KEY].clone());
                        u.metadata = Some(m);
                    } else {
                        u.metadata = Some(object_content(v, &field, policy)?);
                    }
                }
                "agent_id" => u.agent_id = optional_string(v, &field)?,
                "lease_id" => {
                    u.lease_id = match v {
                        Value::Null => None,
                        _ => Some(uuid(v, &field)?),
                    }
                }
                _ => {}
            }
        }
        if let Some(status) = u.status {
            if status.needs_note() && u.note.is_none() {
                return Err(err(
                    &f("note"),
                    &format!("a note is required when the status is {status}"),
                ));
            }
        }
        out.push(u);
    }
    Ok(out)
}

/// `POST /tasks/get` body.
pub fn get_tasks(body: &Value) -> Result<Vec<TaskId>> {
    let items = batch(body, "task_ids")?;
    let mut ids: Vec<TaskId> = Vec::with_capacity(items.len());
    for (i, v) in items.iter().enumerate() {
        let id = task_id(v, &format!("task_ids[{i}]"))?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// `POST /tasks/claim` body (every field optional; an absent body is `{}`).
pub fn claim(body: &Value) -> Result<ClaimRequest> {
    let empty = Map::new();
    let obj = match body {
        Value::Null => &empty,
        Value::Object(o) => o,
        _ => return Err(ValidationError::new("request body must be a JSON object")),
    };
    reject_unknown(obj, "", &["tags", "lease_seconds", "include_context"])?;
    let tags = match obj.get("tags") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => tag_list(v, "tags")?,
    };
    let lease_seconds = match obj.get("lease_seconds") {
        None | Some(Value::Null) => DEFAULT_LEASE_SECONDS,
        Some(v) => match v.as_i64() {
            Some(s) if (1..=MAX_LEASE_SECONDS as i64).contains(&s) => s as u32,
            _ => {
                return Err(err(
                    "lease_seconds",
                    &format!("must be an integer from 1 to {MAX_LEASE_SECONDS}"),
                ))
            }
        },
    };
    let include_context = match obj.get("include_context") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(err("include_context", "must be a boolean")),
    };
    Ok(ClaimRequest {
        tags,
        lease_seconds,
        include_context,
    })
}

/// `GET /tasks` query parameters.
pub fn list_query(params: &[(String, String)]) -> Result<ListQuery> {
    let mut q = ListQuery {
        limit: DEFAULT_LIST_LIMIT,
        ..ListQuery::default()
    };
    for (key, value) in params {
        match key.as_str() {
            "status" => {
                for s in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    let st = TaskStatus::parse(s)
                        .ok_or_else(|| err("status", &format!("unknown status '{s}'")))?;
                    if !q.statuses.contains(&st) {
                        q.statuses.push(st);
                    }
                }
            }
            "parent_task_id" => {
                q.parent = Some(
                    value
                        .parse()
                        .map_err(|_| err("parent_task_id", "must be a canonical UUID"))?,
                )
            }
            "assignee" => q.assignee = Some(value.clone()),
            "tags" => {
                for t in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    if !q.tags.iter().any(|x| x == t) {
                        q.tags.push(t.to_owned());
                    }
                }
            }
            "priority_max" => {
                q.priority_max = Some(match value.parse::<u8>() {
                    Ok(p @ 1..=5) => p,
                    _ => return Err(err("priority_max", "must be an integer from 1 to 5")),
                })
            }
            "limit" => {
                q.limit = match value.parse::<u32>() {
                    Ok(l @ 1..=MAX_LIST_LIMIT) => l,
                    _ => {
                        return Err(err(
                            "limit",
                            &format!("must be an integer from 1 to {MAX_LIST_LIMIT}"),
                        ))
                    }
                }
            }
            "cursor" => q.cursor = Some(value.clone()),
            "full" => {
                q.full = match value.as_str() {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => return Err(err("full", "must be true or false")),
                }
            }
            other => return Err(err(other, "unknown query parameter")),
        }
    }
    q.statuses.sort();
    q.tags.sort();
    Ok(q)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const M: ContentPolicy = ContentPolicy::Managed;

    #[test]
    fn create_defaults_and_batch_bounds() {
        let items = create_tasks(&json!({"tasks": [{"title": "a"}]}), M).unwrap();
        assert_eq!(items[0].priority, DEFAULT_PRIORITY);
        assert_eq!(items[0].tags, None);
        let empty = create_tasks(&json!({"tasks": []}), M).unwrap_err();
        assert!(empty.0.starts_with("tasks:"));
        let many: Vec<_> = (0..26).map(|i| json!({"title": format!("t{i}")})).collect();
        assert!(create_tasks(&json!({ "tasks": many }), M).is_err());
    }

    #[test]
    fn create_names_the_bad_field() {
        let e = create_tasks(
            &json!({"tasks": [{"title": "a"}, {"title": "b", "priority": 6}]}),
            M,
        )
        .unwrap_err();
        assert!(e.0.starts_with("tasks[1].priority"), "{e}");
        let e = create_tasks(&json!({"tasks": [{"priority": 1}]}), M).unwrap_err();
        assert!(e.0.contains("title"), "{e}");
        let e = create_tasks(&json!({"tasks": [{"title": "a", "metadata": "x"}]}), M).unwrap_err();
        assert!(e.0.contains("metadata"), "{e}");
        let e = create_tasks(&json!({"tasks": [{"title": "a", "colour": 1}]}), M).unwrap_err();
        assert!(e.0.contains("colour"), "{e}");
    }

    #[test]
    fn refs_resolve_forward_and_reject_cycles_and_dangling_names() {
        let ok = json!({"tasks": [
            {"title": "a", "blocked_by": ["ref:b"]},
            {"title": "b", "ref": "b"}
        ]});
        assert!(create_tasks(&ok, M).is_ok());
        let cycle = json!({"tasks": [
            {"title": "a", "ref": "a", "blocked_by": ["ref:b"]},
            {"title": "b", "ref": "b", "blocked_by": ["ref:a"]}
        ]});
        assert!(create_tasks(&cycle, M).unwrap_err().0.contains("cycle"));
        let dangling = json!({"tasks": [{"title": "a", "blocked_by": ["ref:zzz"]}]});
        assert!(create_tasks(&dangling, M)
            .unwrap_err()
            .0
            .contains("ref:zzz"));
        let own = json!({"tasks": [{"title": "a", "ref": "a", "blocked_by": ["ref:a"]}]});
        assert!(create_tasks(&own, M).is_err());
    }

    #[test]
    fn managed_orgs_refuse_client_envelopes() {
        let body = json!({"tasks": [{"title": {"__service_enc__": {"v": 1}}}]});
        assert!(create_tasks(&body, M).is_err());
        assert!(create_tasks(&body, ContentPolicy::ClientEncrypted).is_ok());
        let meta = json!({"tasks": [{"title": "t", "metadata": {"__service_enc__": {}}}]});
        assert!(create_tasks(&meta, M).is_err());
    }

    #[test]
    fn update_requires_note_for_terminal_statuses() {
        let id = "0190a0c2-7f3e-7c1a-9b2d-3e4f5a6b7c8d";
        let e = update_tasks(
            &json!({"updates": [{"task_id": id, "status": "completed"}]}),
            M,
        )
        .unwrap_err();
        assert!(e.0.contains("note"));
        let ok = update_tasks(
            &json!({"updates": [{"task_id": id, "status": "completed", "note": "done"}]}),
            M,
        )
        .unwrap();
        assert_eq!(ok[0].status, Some(TaskStatus::Completed));
        let e = update_tasks(&json!({"updates": [{"task_id": id, "output": "x"}]}), M).unwrap_err();
        assert!(e.0.contains("output"));
        let nulls = update_tasks(
            &json!({"updates": [{"task_id": id, "assignee": null, "description": null}]}),
            M,
        )
        .unwrap();
        assert_eq!(nulls[0].assignee, Some(None));
        assert_eq!(nulls[0].description, Some(None));
    }

    #[test]
    fn claim_bounds_lease_seconds() {
        assert_eq!(
            claim(&Value::Null).unwrap().lease_seconds,
            DEFAULT_LEASE_SECONDS
        );
        assert!(claim(&json!({"lease_seconds": 0})).is_err());
        assert!(claim(&json!({"lease_seconds": 259_201})).is_err());
        assert_eq!(
            claim(&json!({"lease_seconds": 259_200}))
                .unwrap()
                .lease_seconds,
            259_200
        );
        assert!(
            !claim(&json!({"include_context": false}))
                .unwrap()
                .include_context
        );
    }

    #[test]
    fn list_query_bounds() {
        let p = |k: &str, v: &str| vec![(k.to_owned(), v.to_owned())];
        assert!(list_query(&p("limit", "0")).is_err());
        assert!(list_query(&p("limit", "201")).is_err());
        assert_eq!(list_query(&p("limit", "200")).unwrap().limit, 200);
        assert!(list_query(&p("status", "done")).is_err());
        assert!(list_query(&p("full", "yes")).is_err());
        assert_eq!(list_query(&[]).unwrap().limit, DEFAULT_LIST_LIMIT);
    }
}
