//! Task requests and answers: create, update, get, list, claim.

use std::collections::{HashMap, HashSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::decode::{
    batch, err, non_empty_string, optional_body, optional_string, present, reject_unknown, string,
    string_list, Result,
};
use super::{Decode, MemberRequest, Object, RequestKind, Timestamp, ValidationError};
use crate::domain::{TaskId, TaskStatus};

pub const DEFAULT_PRIORITY: u8 = 3;
pub const DEFAULT_LEASE_SECONDS: u32 = 14_400;
pub const MAX_LEASE_SECONDS: u32 = 259_200;
pub const DEFAULT_LIST_LIMIT: u32 = 50;
pub const MAX_LIST_LIMIT: u32 = 200;
/// The reserved key of a client-encrypted envelope.
pub const ENVELOPE_KEY: &str = "__service_enc__";

fn default_priority() -> u8 {
    DEFAULT_PRIORITY
}

fn default_list_limit() -> u32 {
    DEFAULT_LIST_LIMIT
}

// ---- content ----------------------------------------------------------------

/// A title or description: plain text, or for a BYOK org a client envelope
/// (`{"__service_enc__": {...}}`) in its place, kept byte for byte.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Text {
    Plain(String),
    Envelope(Object),
}

impl Text {
    pub fn is_envelope(&self) -> bool {
        matches!(self, Text::Envelope(_))
    }
}

/// Whether the org encrypts for itself (BYOK) or lets the server do it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentPolicy {
    Managed,
    ClientEncrypted,
}

fn is_envelope(v: &Value) -> bool {
    v.as_object().is_some_and(|o| o.contains_key(ENVELOPE_KEY))
}

/// A text field: a string, or an envelope object in its place.
fn text(v: &Value, field: &str) -> Result<Text> {
    match v {
        Value::String(s) => Ok(Text::Plain(s.clone())),
        Value::Object(o) if is_envelope(v) => Ok(Text::Envelope(o.clone())),
        _ => Err(err(field, "must be a string")),
    }
}

/// A title: a non-blank string or an envelope.
fn title(v: &Value, field: &str) -> Result<Text> {
    let t = text(v, field)?;
    if matches!(&t, Text::Plain(s) if s.trim().is_empty()) {
        return Err(err(field, "must not be empty"));
    }
    Ok(t)
}

/// An object field (metadata, output).
fn content_object(v: &Value, field: &str) -> Result<Object> {
    v.as_object()
        .cloned()
        .ok_or_else(|| err(field, "must be a JSON object"))
}

/// A managed org refuses client envelopes: `field` carries one.
fn managed_rejects(field: &str) -> ValidationError {
    err(
        field,
        "client-encrypted content (__service_enc__) is not accepted by a server-managed org",
    )
}

fn check_text(t: Option<&Text>, field: impl FnOnce() -> String) -> Result<()> {
    match t {
        Some(t) if t.is_envelope() => Err(managed_rejects(&field())),
        _ => Ok(()),
    }
}

fn check_object(o: Option<&Object>, field: impl FnOnce() -> String) -> Result<()> {
    match o {
        Some(o) if o.contains_key(ENVELOPE_KEY) => Err(managed_rejects(&field())),
        _ => Ok(()),
    }
}

// ---- ids and lists ----------------------------------------------------------

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
    string_list(v, field, non_empty_string)
}

// ---- create -----------------------------------------------------------------

/// `POST /tasks`: 1 to 25 tasks, created together or not at all.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTasks {
    #[schemars(length(min = 1, max = 25))]
    pub tasks: Vec<NewTask>,
}

/// A create item's blocker: an existing task, or `ref:<name>` naming another
/// item of the same call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockerRef {
    Task(TaskId),
    Ref(String),
}

impl JsonSchema for BlockerRef {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "BlockerRef".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "a task UUID, or `ref:<name>` naming another item of the same call"
        })
    }
}

/// One task to create.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTask {
    /// A client-minted id (canonical lowercase UUID), which makes retries safe.
    #[serde(default)]
    pub task_id: Option<TaskId>,
    /// A name other items of this call use in `blocked_by` as `ref:<name>`.
    #[serde(rename = "ref", default)]
    pub reference: Option<String>,
    pub title: Text,
    #[serde(default)]
    pub description: Option<Text>,
    #[serde(rename = "parent_task_id", default)]
    pub parent: Option<TaskId>,
    /// A member's email or the name of one of the org's keys.
    #[serde(default)]
    pub assignee: Option<String>,
    /// 1 is most urgent.
    #[serde(default = "default_priority")]
    #[schemars(range(min = 1, max = 5))]
    pub priority: u8,
    /// Absent: the org's default tags; `[]`: no tags.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    pub metadata: Option<Object>,
    #[serde(default)]
    pub blocked_by: Vec<BlockerRef>,
}

impl NewTask {
    /// A task with just a title and the defaults.
    pub fn titled(title: impl Into<String>) -> Self {
        Self {
            task_id: None,
            reference: None,
            title: Text::Plain(title.into()),
            description: None,
            parent: None,
            assignee: None,
            priority: DEFAULT_PRIORITY,
            tags: None,
            metadata: None,
            blocked_by: Vec::new(),
        }
    }
}

impl MemberRequest for CreateTasks {
    const KIND: RequestKind = RequestKind::Write;
}

impl Decode for CreateTasks {
    fn decode(body: &Value) -> Result<Self> {
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
            let title = match present(obj, "title") {
                None => return Err(err(&f("title"), "is required")),
                Some(v) => title(v, &f("title"))?,
            };
            let description = present(obj, "description")
                .map(|v| text(v, &f("description")))
                .transpose()?;
            let client_id = match present(obj, "task_id") {
                None => None,
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
            let reference = match present(obj, "ref") {
                None => None,
                Some(v) => {
                    let r = non_empty_string(v, &f("ref"))?;
                    if !refs.insert(r.clone()) {
                        return Err(err(&f("ref"), format!("duplicate ref '{r}' in this call")));
                    }
                    Some(r)
                }
            };
            let blocked_by = match present(obj, "blocked_by") {
                None => Vec::new(),
                Some(Value::Array(list)) => blockers(list, &p)?,
                Some(_) => return Err(err(&f("blocked_by"), "must be an array")),
            };
            out.push(NewTask {
                task_id: client_id,
                reference,
                title,
                description,
                parent: present(obj, "parent_task_id")
                    .map(|v| task_id(v, &f("parent_task_id")))
                    .transpose()?,
                assignee: match obj.get("assignee") {
                    None => None,
                    Some(v) => optional_string(v, &f("assignee"))?,
                },
                priority: present(obj, "priority")
                    .map(|v| priority(v, &f("priority")))
                    .transpose()?
                    .unwrap_or(DEFAULT_PRIORITY),
                tags: present(obj, "tags")
                    .map(|v| tag_list(v, &f("tags")))
                    .transpose()?,
                metadata: present(obj, "metadata")
                    .map(|v| content_object(v, &f("metadata")))
                    .transpose()?,
                blocked_by,
            });
        }
        check_ref_graph(&out)?;
        Ok(CreateTasks { tasks: out })
    }
}

fn blockers(list: &[Value], item: &str) -> Result<Vec<BlockerRef>> {
    let mut out: Vec<BlockerRef> = Vec::with_capacity(list.len());
    for (j, b) in list.iter().enumerate() {
        let field = format!("{item}.blocked_by[{j}]");
        let bad = || err(&field, "must be a task UUID or a 'ref:<name>' string");
        let s = b.as_str().ok_or_else(bad)?;
        let blocker = match s.strip_prefix("ref:") {
            Some(name) if !name.is_empty() => BlockerRef::Ref(name.to_owned()),
            _ => BlockerRef::Task(s.parse().map_err(|_| bad())?),
        };
        if !out.contains(&blocker) {
            out.push(blocker);
        }
    }
    Ok(out)
}

impl CreateTasks {
    /// A managed org refuses client envelopes in any content field.
    pub fn check_content(&self, policy: ContentPolicy) -> Result<()> {
        if policy == ContentPolicy::ClientEncrypted {
            return Ok(());
        }
        for (i, t) in self.tasks.iter().enumerate() {
            check_text(Some(&t.title), || format!("tasks[{i}].title"))?;
            check_text(t.description.as_ref(), || format!("tasks[{i}].description"))?;
            check_object(t.metadata.as_ref(), || format!("tasks[{i}].metadata"))?;
        }
        Ok(())
    }
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
                        format!("ref:{name} names no item of this call"),
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
    pub note: Option<String>,
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
            "note" => u.note = optional_string(v, &field)?,
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
                    check_object(u.output.as_ref(), || format!("updates[{i}].output"))?;
                    check_object(u.metadata.as_ref(), || format!("updates[{i}].metadata"))?;
                }
                ContentPolicy::ClientEncrypted => {
                    if let Some(m) = u.metadata.as_mut() {
                        if let Some(envelope) = m.remove(ENVELOPE_KEY) {
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
    #[schemars(with = "Option<String>")]
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
        }
    }
}

impl MemberRequest for ClaimRequest {
    const KIND: RequestKind = RequestKind::Write;
}

impl Decode for ClaimRequest {
    fn decode(body: &Value) -> Result<Self> {
        let obj = optional_body(body)?;
        reject_unknown(obj, "", &["tags", "lease_seconds", "include_context"])?;
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
        })
    }
}

// ---- answers ----------------------------------------------------------------

/// `POST /tasks` answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CreateAnswer {
    pub created: usize,
    pub results: Vec<CreatedItem>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CreatedItem {
    #[serde(rename = "ref")]
    pub reference: Option<String>,
    pub task_id: TaskId,
    /// `pending`, or `blocked` while a blocker is live.
    pub status: TaskStatus,
    pub created_at: Timestamp,
}

/// `POST /tasks/update` answer; `partial` (HTTP 207) when any item failed.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct UpdateAnswer {
    /// How many items applied.
    pub updated: usize,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    pub results: Vec<UpdateResult>,
}

impl UpdateAnswer {
    pub fn new(results: Vec<UpdateResult>) -> Self {
        let updated = results
            .iter()
            .filter(|r| matches!(r, UpdateResult::Applied { .. }))
            .count();
        Self {
            updated,
            partial: updated < results.len(),
            results,
        }
    }
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum UpdateResult {
    Applied {
        task_id: TaskId,
        status: TaskStatus,
        updated_at: Timestamp,
    },
    Failed {
        task_id: TaskId,
        error: ItemError,
    },
}

/// Why one update item failed (the strings are fixed by the contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub enum ItemError {
    #[serde(rename = "Invalid status transition")]
    InvalidTransition,
    #[serde(rename = "assignee required")]
    AssigneeRequired,
    #[serde(rename = "lease lost")]
    LeaseLost,
    #[serde(rename = "task not found")]
    TaskNotFound,
}

/// A task as clients see it, content opened.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TaskView {
    pub task_id: TaskId,
    pub title: Text,
    pub description: Option<Text>,
    pub status: TaskStatus,
    pub priority: u8,
    pub assignee: Option<String>,
    pub tags: Vec<String>,
    /// `{}` when none was set.
    pub metadata: Object,
    pub output: Option<Object>,
    pub blocked_by: Vec<TaskId>,
    pub parent_task_id: Option<TaskId>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// While the task is leased.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseTerms>,
}

/// When a leased task's lease runs out, and its length.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub struct LeaseTerms {
    pub lease_expires_at: Timestamp,
    pub lease_seconds: u32,
}

/// A state event of a task's history.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TaskEvent {
    /// `null` for the creation event.
    pub from_status: Option<TaskStatus>,
    pub to_status: TaskStatus,
    pub agent_id: String,
    pub timestamp: Timestamp,
    pub note: Option<String>,
}

/// A blocker's status, as a dependency of the task that waits on it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Dependency {
    pub task_id: TaskId,
    pub status: TaskStatus,
}

/// A task from `POST /tasks/get`: with its dependencies, and its history
/// when it was the only id asked for.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TaskDetail {
    #[serde(flatten)]
    pub task: TaskView,
    pub dependencies: Vec<Dependency>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<TaskEvent>>,
}

/// `POST /tasks/get` answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct GetAnswer {
    pub tasks: Vec<TaskDetail>,
    pub count: usize,
    pub not_found: Vec<TaskId>,
}

/// The lean list item: unset fields are left out.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TaskSummary {
    pub task_id: TaskId,
    pub title: Text,
    pub status: TaskStatus,
    pub priority: u8,
    pub updated_at: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assignee: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blocked_by: Vec<TaskId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_task_id: Option<TaskId>,
}

/// A list item: lean, or the whole task with `full=true`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ListedTask {
    Lean(TaskSummary),
    Full(TaskView),
}

/// `GET /tasks` answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ListAnswer {
    pub tasks: Vec<ListedTask>,
    /// Pass as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// A claimed task: the task with its lease, and the briefing context.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ClaimedTask {
    #[serde(flatten)]
    pub task: TaskView,
    /// Fences this claim: send it with updates, which fail with `lease lost`
    /// once the lease is no longer this one.
    pub lease_id: Uuid,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<ClaimContext>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ClaimContext {
    /// The parent, its parent, and so on (up to three).
    pub parent_chain: Vec<ParentLink>,
    pub blockers: Vec<BlockerLink>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ParentLink {
    pub task_id: TaskId,
    pub title: Text,
    pub description: Option<Text>,
    pub status: TaskStatus,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct BlockerLink {
    pub task_id: TaskId,
    pub title: Text,
    pub status: TaskStatus,
    pub output: Option<Object>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn create(body: Value) -> Result<Vec<NewTask>> {
        CreateTasks::decode(&body).map(|c| c.tasks)
    }

    #[test]
    fn create_defaults_and_batch_bounds() {
        let items = create(json!({"tasks": [{"title": "a"}]})).unwrap();
        assert_eq!(items[0].priority, DEFAULT_PRIORITY);
        assert_eq!(items[0].tags, None);
        let empty = create(json!({"tasks": []})).unwrap_err();
        assert!(empty.0.starts_with("tasks:"));
        let many: Vec<_> = (0..26).map(|i| json!({"title": format!("t{i}")})).collect();
        assert!(create(json!({ "tasks": many })).is_err());
        assert_eq!(super::super::decode::MAX_BATCH, 25);
    }

    #[test]
    fn create_names_the_bad_field() {
        let e =
            create(json!({"tasks": [{"title": "a"}, {"title": "b", "priority": 6}]})).unwrap_err();
        assert!(e.0.starts_with("tasks[1].priority"), "{e}");
        let e = create(json!({"tasks": [{"priority": 1}]})).unwrap_err();
        assert!(e.0.contains("title"), "{e}");
        let e = create(json!({"tasks": [{"title": "a", "metadata": "x"}]})).unwrap_err();
        assert!(e.0.contains("metadata"), "{e}");
        let e = create(json!({"tasks": [{"title": "a", "colour": 1}]})).unwrap_err();
        assert!(e.0.contains("colour"), "{e}");
    }

    #[test]
    fn refs_resolve_forward_and_reject_cycles_and_dangling_names() {
        let ok = json!({"tasks": [
            {"title": "a", "blocked_by": ["ref:b"]},
            {"title": "b", "ref": "b"}
        ]});
        assert!(create(ok).is_ok());
        let cycle = json!({"tasks": [
            {"title": "a", "ref": "a", "blocked_by": ["ref:b"]},
            {"title": "b", "ref": "b", "blocked_by": ["ref:a"]}
        ]});
        assert!(create(cycle).unwrap_err().0.contains("cycle"));
        let dangling = json!({"tasks": [{"title": "a", "blocked_by": ["ref:zzz"]}]});
        assert!(create(dangling).unwrap_err().0.contains("ref:zzz"));
        let own = json!({"tasks": [{"title": "a", "ref": "a", "blocked_by": ["ref:a"]}]});
        assert!(create(own).is_err());
    }

    #[test]
    fn managed_orgs_refuse_client_envelopes() {
        let body = json!({"tasks": [{"title": {"__service_enc__": {"v": 1}}}]});
        let decoded = CreateTasks::decode(&body).unwrap();
        assert!(decoded.check_content(ContentPolicy::Managed).is_err());
        assert!(decoded
            .check_content(ContentPolicy::ClientEncrypted)
            .is_ok());
        let meta = json!({"tasks": [{"title": "t", "metadata": {"__service_enc__": {}}}]});
        let e = CreateTasks::decode(&meta)
            .unwrap()
            .check_content(ContentPolicy::Managed)
            .unwrap_err();
        assert!(e.0.starts_with("tasks[0].metadata"), "{e}");
        let other = json!({"tasks": [{"title": {"other": 1}}]});
        assert!(CreateTasks::decode(&other).unwrap_err().0.contains("title"));
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

    #[test]
    fn wire_names_follow_the_contract() {
        let failed = UpdateResult::Failed {
            task_id: TaskId(Uuid::nil()),
            error: ItemError::InvalidTransition,
        };
        assert_eq!(
            serde_json::to_value(failed).unwrap()["error"],
            "Invalid status transition"
        );
        assert_eq!(
            serde_json::to_value(TaskStatus::InProgress).unwrap(),
            "in_progress"
        );
    }
}
