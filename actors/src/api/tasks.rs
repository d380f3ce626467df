//! Task requests and their decoders: update, get, list, claim (create has
//! its own file).

use schemars::JsonSchema;
use serde_json::Value;
use uuid::Uuid;

use super::content::{
    check_object, check_text, content_object, note, text, title, ContentPolicy, Text, ENVELOPE_KEY,
};
use super::decode::{
    batch, err, field_path, non_empty_string, optional_body, optional_string, present,
    reject_unknown, string, string_list, Result,
};
use super::{Decode, MemberRequest, Object, RequestKind};
use crate::domain::{TaskId, TaskStatus};

pub const DEFAULT_PRIORITY: u8 = 3;
pub const DEFAULT_LEASE_SECONDS: u32 = 14_400;
pub const MAX_LEASE_SECONDS: u32 = 259_200;
/// The longest a claim may wait for a task to become pending.
pub const MAX_WAIT_SECONDS: u32 = 30;
/// The most tasks one batch claim takes.
pub const MAX_CLAIM_COUNT: u32 = 25;
pub const DEFAULT_LIST_LIMIT: u32 = 50;
pub const MAX_LIST_LIMIT: u32 = 200;

/// A comma-separated list of statuses, as the list query takes it.
const STATUS_LIST_PATTERN: &str = "^(pending|in_progress|paused|feedback|blocked|completed|failed|canceled)(,(pending|in_progress|paused|feedback|blocked|completed|failed|canceled))*$";

fn default_list_limit() -> u32 {
    DEFAULT_LIST_LIMIT
}

// ---- ids and lists ----------------------------------------------------------

fn uuid(v: &Value, field: &str) -> Result<Uuid> {
    v.as_str()
        .and_then(|s| s.parse::<TaskId>().ok())
        .map(|id| id.0)
        .ok_or_else(|| err(field, "must be a canonical UUID string"))
}

pub(super) fn task_id(v: &Value, field: &str) -> Result<TaskId> {
    uuid(v, field).map(TaskId)
}

pub(super) fn priority(v: &Value, field: &str) -> Result<u8> {
    match v.as_i64() {
        Some(p @ 1..=5) => Ok(p as u8),
        Some(_) => Err(err(field, "priority must be between 1 and 5")),
        None => Err(err(field, "must be an integer between 1 and 5")),
    }
}

pub(super) fn tag_list(v: &Value, field: &str) -> Result<Vec<String>> {
    string_list(v, field, non_empty_string)
}

// ---- update -----------------------------------------------------------------

/// `POST /tasks/update`: 1 to 25 items, each attempted in order.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateTasks {
    #[schemars(length(min = 1, max = 25))]
    pub updates: Vec<TaskUpdate>,
}

/// One task's changes. `Option<Option<_>>` tells "absent" from "null".
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskUpdate {
    pub task_id: TaskId,
    #[serde(default)]
    pub status: Option<TaskStatus>,
    #[serde(default)]
    pub title: Option<Text>,
    /// `null` clears it.
    #[serde(default)]
    pub description: Option<Option<Text>>,
    /// Required when the status is completed, failed or canceled.
    #[serde(default)]
    pub note: Option<Text>,
    #[serde(default)]
    pub output: Option<Object>,
    /// `null` clears it.
    #[serde(default)]
    pub assignee: Option<Option<String>>,
    #[serde(default)]
    #[schemars(range(min = 1, max = 5))]
    pub priority: Option<u8>,
    /// Replaces the blockers.
    #[serde(default)]
    pub blocked_by: Option<Vec<TaskId>>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Merged into the task's metadata, key by key.
    #[serde(default)]
    pub metadata: Option<Object>,
    /// Who the state event names (default: the key's name).
    #[serde(default)]
    pub agent_id: Option<String>,
    /// The claim's lease; when it is no longer current the item fails with `lease lost`.
    #[serde(default)]
    pub lease_id: Option<Uuid>,
}

impl TaskUpdate {
    pub fn new(task_id: TaskId) -> Self {
        Self {
            task_id,
            status: None,
            title: None,
            description: None,
            note: None,
            output: None,
            assignee: None,
            priority: None,
            blocked_by: None,
            tags: None,
            metadata: None,
            agent_id: None,
            lease_id: None,
        }
    }
}

impl MemberRequest for UpdateTasks {
    const KIND: RequestKind = RequestKind::Write;
}

impl Decode for UpdateTasks {
    fn decode(body: &Value) -> Result<Self> {
        let items = batch(body, "updates")?;
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            out.push(update_item(item, &format!("updates[{i}]"))?);
        }
        Ok(UpdateTasks { updates: out })
    }
}

fn update_item(item: &Value, p: &str) -> Result<TaskUpdate> {
    let obj = item
        .as_object()
        .ok_or_else(|| err(p, "must be an object"))?;
    reject_unknown(
        obj,
        p,
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
    let f = |name: &str| field_path(p, name);
    let mut u = TaskUpdate::new(match present(obj, "task_id") {
        None => return Err(err(&f("task_id"), "is required")),
        Some(v) => task_id(v, &f("task_id"))?,
    });
    for (key, v) in obj {
        let field = f(key);
        match key.as_str() {
            "status" => {
                let s = string(v, &field)?;
                u.status = Some(
                    TaskStatus::parse(&s)
                        .ok_or_else(|| err(&field, format!("unknown status '{s}'")))?,
                );
            }
            "title" => u.title = Some(title(v, &field)?),
            "description" => {
                u.description = Some(match v {
                    Value::Null => None,
                    _ => Some(text(v, &field)?),
                })
            }
            "note" => u.note = note(v, &field)?,
            "output" => u.output = Some(content_object(v, &field)?),
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
            "metadata" => u.metadata = Some(content_object(v, &field)?),
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
                format!("a note is required when the status is {status}"),
            ));
        }
    }
    Ok(u)
}

impl UpdateTasks {
    /// A managed org refuses client envelopes in any content field. For a
    /// BYOK org a metadata envelope replaces the whole value: only the
    /// envelope key is kept.
    pub fn check_content(&mut self, policy: ContentPolicy) -> Result<()> {
        for (i, u) in self.updates.iter_mut().enumerate() {
            match policy {
                ContentPolicy::Managed => {
                    check_text(u.title.as_ref(), || format!("updates[{i}].title"))?;
                    check_text(u.description.as_ref().and_then(Option::as_ref), || {
                        format!("updates[{i}].description")
                    })?;
                    check_text(u.note.as_ref(), || format!("updates[{i}].note"))?;
                    check_object(u.output.as_ref(), || format!("updates[{i}].output"))?;
                    check_object(u.metadata.as_ref(), || format!("updates[{i}].metadata"))?;
                }
                ContentPolicy::ClientEncrypted => {
                    if let Some(m) = u.metadata.as_mut() {
                        if let Some(envelope) = m.shift_remove(ENVELOPE_KEY) {
                            m.clear();
                            m.insert(ENVELOPE_KEY.to_owned(), envelope);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

// ---- get --------------------------------------------------------------------

/// `POST /tasks/get`: 1 to 25 ids.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetTasks {
    #[schemars(length(min = 1, max = 25))]
    pub task_ids: Vec<TaskId>,
}

impl MemberRequest for GetTasks {
    const KIND: RequestKind = RequestKind::Read;
}

impl Decode for GetTasks {
    fn decode(body: &Value) -> Result<Self> {
        let items = batch(body, "task_ids")?;
        let mut ids: Vec<TaskId> = Vec::with_capacity(items.len());
        for (i, v) in items.iter().enumerate() {
            let id = task_id(v, &format!("task_ids[{i}]"))?;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        Ok(GetTasks { task_ids: ids })
    }
}

// ---- list -------------------------------------------------------------------

/// `GET /tasks`: filters, page size and cursor. Over HTTP the fields are
/// query parameters (`status` and `tags` comma-separated); a tool may send
/// them as JSON values.
#[derive(Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTasks {
    /// Statuses to keep, comma-separated.
    #[serde(rename = "status", default)]
    #[schemars(with = "Option<String>", regex(pattern = STATUS_LIST_PATTERN))]
    pub statuses: Vec<TaskStatus>,
    #[serde(rename = "parent_task_id", default)]
    pub parent: Option<TaskId>,
    #[serde(default)]
    pub assignee: Option<String>,
    /// Tags, comma-separated; a task matches when it has any of them.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub tags: Vec<String>,
    /// Keep priority <= this.
    #[serde(default)]
    #[schemars(range(min = 1, max = 5))]
    pub priority_max: Option<u8>,
    #[serde(default = "default_list_limit")]
    #[schemars(range(min = 1, max = 200))]
    pub limit: u32,
    /// `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Whole tasks instead of lean items.
    #[serde(default)]
    pub full: bool,
}

impl MemberRequest for ListTasks {
    const KIND: RequestKind = RequestKind::Read;
}

impl Decode for ListTasks {
    fn decode(body: &Value) -> Result<Self> {
        let obj = optional_body(body)?;
        Self::from_pairs(obj.iter().map(|(k, v)| (k.as_str(), v)))
    }
}

/// A query value as text: strings as they are, other scalars as JSON,
/// arrays joined with commas.
fn query_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(query_text).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

impl ListTasks {
    /// Whether a task with header `h` passes the filters: the same test the
    /// store's query makes of finished tasks, made here of open ones.
    pub fn matches(&self, h: &crate::domain::TaskHeader) -> bool {
        (self.statuses.is_empty() || self.statuses.contains(&h.status))
            && self.parent.is_none_or(|p| h.parent == Some(p))
            && self
                .assignee
                .as_ref()
                .is_none_or(|a| h.assignee.as_ref() == Some(a))
            && self.priority_max.is_none_or(|p| h.priority <= p)
            && (self.tags.is_empty() || h.tags.iter().any(|t| self.tags.contains(t)))
    }

    /// Query parameters as HTTP gives them; repeated keys accumulate.
    pub fn from_query(params: &[(String, String)]) -> Result<Self> {
        let values: Vec<(&str, Value)> = params
            .iter()
            .map(|(k, v)| (k.as_str(), Value::String(v.clone())))
            .collect();
        Self::from_pairs(values.iter().map(|(k, v)| (*k, v)))
    }

    fn from_pairs<'a>(pairs: impl Iterator<Item = (&'a str, &'a Value)>) -> Result<Self> {
        let mut q = ListTasks {
            limit: DEFAULT_LIST_LIMIT,
            ..ListTasks::default()
        };
        for (key, value) in pairs {
            let value = query_text(value);
            match key {
                "status" => {
                    for s in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                        let st = TaskStatus::parse(s)
                            .ok_or_else(|| err("status", format!("unknown status '{s}'")))?;
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
                "assignee" => q.assignee = Some(value),
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
                                format!("must be an integer from 1 to {MAX_LIST_LIMIT}"),
                            ))
                        }
                    }
                }
                "cursor" => q.cursor = Some(value),
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
}

// ---- claim ------------------------------------------------------------------

/// `POST /tasks/claim`: every field optional; an absent body is `{}`.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    /// Claim only a task carrying any of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// How long the lease lasts unless renewed by an update.
    #[serde(default = "default_lease_seconds")]
    #[schemars(range(min = 1, max = 259_200))]
    pub lease_seconds: u32,
    /// Whether to add the parent chain and the blockers' outputs.
    #[serde(default = "default_true")]
    pub include_context: bool,
    /// With nothing to claim, how long to wait for a matching task to
    /// become pending before answering `null` (a long poll).
    #[serde(default)]
    #[schemars(range(min = 0, max = 30))]
    pub wait_seconds: u32,
    /// Claim up to this many tasks, each with its own lease; the answer is
    /// then `{tasks: [...]}`. Without it, one task or `null`.
    #[serde(default)]
    #[schemars(range(min = 1, max = 25))]
    pub count: Option<u32>,
}

impl ClaimRequest {
    /// How many tasks this request may claim.
    pub fn limit(&self) -> usize {
        self.count.unwrap_or(1) as usize
    }
}

fn default_lease_seconds() -> u32 {
    DEFAULT_LEASE_SECONDS
}

fn default_true() -> bool {
    true
}

impl Default for ClaimRequest {
    fn default() -> Self {
        Self {
            tags: Vec::new(),
            lease_seconds: DEFAULT_LEASE_SECONDS,
            include_context: true,
            wait_seconds: 0,
            count: None,
        }
    }
}

impl MemberRequest for ClaimRequest {
    const KIND: RequestKind = RequestKind::Write;
}

impl Decode for ClaimRequest {
    fn decode(body: &Value) -> Result<Self> {
        let obj = optional_body(body)?;
        reject_unknown(
            obj,
            "",
            &[
                "tags",
                "lease_seconds",
                "include_context",
                "wait_seconds",
                "count",
            ],
        )?;
        Ok(ClaimRequest {
            tags: present(obj, "tags")
                .map(|v| tag_list(v, "tags"))
                .transpose()?
                .unwrap_or_default(),
            lease_seconds: match present(obj, "lease_seconds") {
                None => DEFAULT_LEASE_SECONDS,
                Some(v) => match v.as_i64() {
                    Some(s) if (1..=i64::from(MAX_LEASE_SECONDS)).contains(&s) => s as u32,
                    _ => {
                        return Err(err(
                            "lease_seconds",
                            format!("must be an integer from 1 to {MAX_LEASE_SECONDS}"),
                        ))
                    }
                },
            },
            include_context: match present(obj, "include_context") {
                None => true,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(err("include_context", "must be a boolean")),
            },
            wait_seconds: match present(obj, "wait_seconds") {
                None => 0,
                Some(v) => match v.as_u64() {
                    Some(s) if s <= u64::from(MAX_WAIT_SECONDS) => s as u32,
                    _ => {
                        return Err(err(
                            "wait_seconds",
                            format!("must be an integer from 0 to {MAX_WAIT_SECONDS}"),
                        ))
                    }
                },
            },
            count: match present(obj, "count") {
                None => None,
                Some(v) => match v.as_u64() {
                    Some(n) if (1..=u64::from(MAX_CLAIM_COUNT)).contains(&n) => Some(n as u32),
                    _ => {
                        return Err(err(
                            "count",
                            format!("must be an integer from 1 to {MAX_CLAIM_COUNT}"),
                        ))
                    }
                },
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn list_filters_match_headers_as_the_store_does() {
        let parent = TaskId::new_v7();
        let h = crate::domain::TaskHeader {
            task_id: TaskId::new_v7(),
            status: TaskStatus::InProgress,
            priority: 2,
            created_at: 1,
            updated_at: 1,
            assignee: Some("ann".into()),
            tags: vec!["gpu".into(), "eu".into()],
            blocked_by: Vec::new(),
            parent: Some(parent),
            lease: None,
            attempts: 0,
            max_attempts: 5,
        };
        let q = |pairs: &[(&str, &str)]| {
            let params: Vec<(String, String)> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            ListTasks::from_query(&params).unwrap()
        };
        assert!(q(&[]).matches(&h));
        assert!(q(&[("status", "pending,in_progress")]).matches(&h));
        assert!(!q(&[("status", "pending")]).matches(&h));
        assert!(q(&[("parent_task_id", &parent.to_string())]).matches(&h));
        assert!(!q(&[("parent_task_id", &TaskId::new_v7().to_string())]).matches(&h));
        assert!(q(&[("assignee", "ann")]).matches(&h));
        assert!(!q(&[("assignee", "bob")]).matches(&h));
        assert!(q(&[("priority_max", "2")]).matches(&h));
        assert!(!q(&[("priority_max", "1")]).matches(&h));
        assert!(q(&[("tags", "cpu,eu")]).matches(&h));
        assert!(!q(&[("tags", "cpu")]).matches(&h));
        let unassigned = crate::domain::TaskHeader {
            assignee: None,
            parent: None,
            ..h
        };
        assert!(!q(&[("assignee", "ann")]).matches(&unassigned));
        assert!(!q(&[("parent_task_id", &parent.to_string())]).matches(&unassigned));
    }

    #[test]
    fn update_requires_note_for_terminal_statuses() {
        let id = "0190a0c2-7f3e-7c1a-9b2d-3e4f5a6b7c8d";
        let update = |item: Value| UpdateTasks::decode(&json!({ "updates": [item] }));
        let e = update(json!({"task_id": id, "status": "completed"})).unwrap_err();
        assert!(e.0.contains("note"));
        let ok = update(json!({"task_id": id, "status": "completed", "note": "done"})).unwrap();
        assert_eq!(ok.updates[0].status, Some(TaskStatus::Completed));
        let e = update(json!({"task_id": id, "output": "x"})).unwrap_err();
        assert!(e.0.contains("output"));
        let nulls = update(json!({"task_id": id, "assignee": null, "description": null})).unwrap();
        assert_eq!(nulls.updates[0].assignee, Some(None));
        assert_eq!(nulls.updates[0].description, Some(None));
    }

    #[test]
    fn unknown_fields_are_named_by_their_path() {
        let id = "0190a0c2-7f3e-7c1a-9b2d-3e4f5a6b7c8d";
        let e = UpdateTasks::decode(
            &json!({ "updates": [{"task_id": id}, {"task_id": id, "colour": 1}] }),
        )
        .unwrap_err();
        assert_eq!(e.0, "updates[1].colour: unknown field");
        let e = ClaimRequest::decode(&json!({ "colour": 1 })).unwrap_err();
        assert_eq!(e.0, "colour: unknown field");
    }

    #[test]
    fn claim_bounds_wait_seconds() {
        let claim = |v: Value| ClaimRequest::decode(&v);
        assert_eq!(claim(Value::Null).unwrap().wait_seconds, 0);
        assert_eq!(claim(json!({"wait_seconds": 30})).unwrap().wait_seconds, 30);
        assert_eq!(claim(json!({"wait_seconds": 0})).unwrap().wait_seconds, 0);
        for bad in [json!(31), json!(-1), json!(1.5), json!("5"), json!(true)] {
            let e = claim(json!({ "wait_seconds": bad })).unwrap_err();
            assert!(e.0.contains("wait_seconds"), "{bad}: {}", e.0);
        }
    }

    #[test]
    fn claim_bounds_count() {
        let claim = |v: Value| ClaimRequest::decode(&v);
        assert_eq!(claim(Value::Null).unwrap().count, None);
        assert_eq!(claim(Value::Null).unwrap().limit(), 1);
        assert_eq!(claim(json!({"count": null})).unwrap().count, None);
        assert_eq!(claim(json!({"count": 1})).unwrap().count, Some(1));
        assert_eq!(claim(json!({"count": 25})).unwrap().limit(), 25);
        for bad in [json!(0), json!(26), json!(-1), json!(2.5), json!("3")] {
            let e = claim(json!({ "count": bad })).unwrap_err();
            assert!(e.0.contains("count"), "{bad}: {}", e.0);
        }
    }

    #[test]
    fn claim_bounds_lease_seconds() {
        let claim = |v: Value| ClaimRequest::decode(&v);
        assert_eq!(
            claim(Value::Null).unwrap().lease_seconds,
            DEFAULT_LEASE_SECONDS
        );
        assert!(claim(json!({"lease_seconds": 0})).is_err());
        assert!(claim(json!({"lease_seconds": 259_201})).is_err());
        assert_eq!(
            claim(json!({"lease_seconds": 259_200}))
                .unwrap()
                .lease_seconds,
            259_200
        );
        assert!(
            !claim(json!({"include_context": false}))
                .unwrap()
                .include_context
        );
    }

    #[test]
    fn the_status_list_pattern_names_every_status() {
        for status in TaskStatus::ALL {
            let name = status.to_string();
            assert_eq!(
                STATUS_LIST_PATTERN.matches(&format!("({name}|")).count()
                    + STATUS_LIST_PATTERN.matches(&format!("|{name}|")).count()
                    + STATUS_LIST_PATTERN.matches(&format!("|{name})")).count(),
                2,
                "{name} in {STATUS_LIST_PATTERN}"
            );
        }
    }

    #[test]
    fn list_query_bounds_and_json_values() {
        let p = |k: &str, v: &str| vec![(k.to_owned(), v.to_owned())];
        assert!(ListTasks::from_query(&p("limit", "0")).is_err());
        assert!(ListTasks::from_query(&p("limit", "201")).is_err());
        assert_eq!(
            ListTasks::from_query(&p("limit", "200")).unwrap().limit,
            200
        );
        assert!(ListTasks::from_query(&p("status", "done")).is_err());
        assert!(ListTasks::from_query(&p("full", "yes")).is_err());
        assert_eq!(
            ListTasks::from_query(&[]).unwrap().limit,
            DEFAULT_LIST_LIMIT
        );
        let q =
            ListTasks::decode(&json!({"limit": 5, "full": true, "status": ["blocked", "pending"]}))
                .unwrap();
        assert_eq!((q.limit, q.full), (5, true));
        assert_eq!(q.statuses, vec![TaskStatus::Pending, TaskStatus::Blocked]);
    }
}
