//! Task requests and their decoders: update, get, list, claim (create has
//! its own file).

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};
use uuid::Uuid;

use super::content::{
    check_note_bytes, check_object, check_object_bytes, check_text, check_text_bytes, note_schema,
    nullable_description_schema, title_schema, ContentPolicy, Text, ENVELOPE_KEY,
};
use super::create::MAX_DELAY_SECONDS;
use super::decode::{dedup, err, Result};
use super::{Decode, Object, Timestamp, NON_BLANK_NO_NUL_PATTERN, NON_BLANK_PATTERN, UUID_PATTERN};
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

// ---- update -----------------------------------------------------------------

/// `POST /tasks/update`: 1 to 25 items, each attempted in order.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateTasks {
    #[schemars(length(min = 1, max = 25))]
    pub updates: Vec<TaskUpdate>,
}

/// One task's changes. `Option<Option<_>>` tells "absent" from "null".
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    // An item fenced by a lease has its note checked by the org's actor,
    // after the lease: a stale lease answers `lease lost` first.
    "if" = {
        "properties": { "status": { "enum": ["completed", "failed", "canceled"] } },
        "required": ["status"],
        "not": { "properties": { "lease_id": { "type": "string" } }, "required": ["lease_id"] },
    },
    "then" = {
        "properties": { "note": { "not": { "type": "null" } } },
        "required": ["note"],
    },
    "not" = { "required": ["run_at", "delay_seconds"] },
))]
pub struct TaskUpdate {
    pub task_id: TaskId,
    #[serde(default)]
    #[schemars(with = "TaskStatus")]
    pub status: Option<TaskStatus>,
    #[serde(default)]
    #[schemars(schema_with = "title_schema")]
    pub title: Option<Text>,
    /// `null` clears it.
    #[serde(default, deserialize_with = "super::double_option")]
    #[schemars(schema_with = "nullable_description_schema")]
    pub description: Option<Option<Text>>,
    /// Required when the status is completed, failed or canceled; on an
    /// item with a `lease_id`, once the lease is known current (a stale
    /// lease answers `lease lost` first).
    #[serde(default)]
    #[schemars(schema_with = "note_schema")]
    pub note: Option<Text>,
    #[serde(default)]
    #[schemars(with = "Object")]
    pub output: Option<Object>,
    /// `null` clears it.
    #[serde(default, deserialize_with = "super::double_option")]
    #[schemars(length(min = 1), regex(pattern = NON_BLANK_PATTERN))]
    pub assignee: Option<Option<String>>,
    #[serde(default)]
    #[schemars(with = "u8", range(min = 1, max = 5))]
    pub priority: Option<u8>,
    /// Replaces the blockers.
    #[serde(default)]
    #[schemars(with = "Vec<TaskId>")]
    pub blocked_by: Option<Vec<TaskId>>,
    #[serde(default)]
    #[schemars(
        with = "Vec<String>",
        inner(length(min = 1), regex(pattern = NON_BLANK_NO_NUL_PATTERN))
    )]
    pub tags: Option<Vec<String>>,
    /// Merged into the task's metadata, key by key.
    #[serde(default)]
    #[schemars(with = "Object")]
    pub metadata: Option<Object>,
    /// Who the state event names (default: the key's name).
    #[serde(default)]
    #[schemars(length(min = 1), regex(pattern = NON_BLANK_NO_NUL_PATTERN))]
    pub agent_id: Option<String>,
    /// The claim's lease; when it is no longer current the item fails with `lease lost`.
    #[serde(default)]
    #[schemars(regex(pattern = UUID_PATTERN))]
    pub lease_id: Option<Uuid>,
    /// When it may be claimed (a pending task before then is waiting);
    /// `null`: at once. Not with `delay_seconds`.
    #[serde(default, deserialize_with = "super::double_option")]
    #[schemars(with = "Option<Timestamp>")]
    pub run_at: Option<Option<Timestamp>>,
    /// Seconds from now until it may be claimed. Not with `run_at`.
    #[serde(default)]
    #[schemars(range(min = 0, max = MAX_DELAY_SECONDS))]
    pub delay_seconds: Option<u32>,
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
            run_at: None,
            delay_seconds: None,
        }
    }

    /// When the item makes the task claimable: `Some(None)` at once,
    /// `Some(Some(t))` at `t`, `None` unchanged.
    pub fn due_at(&self, now: i64) -> Option<Option<i64>> {
        match (self.run_at, self.delay_seconds) {
            (Some(at), _) => Some(at.map(|t| t.0)),
            (None, Some(delay)) => Some(Some(now + i64::from(delay) * 1000)),
            (None, None) => None,
        }
    }
}

impl Decode for UpdateTasks {
    /// Sizes in bytes, repeats dropped.
    fn validate(&mut self) -> Result<()> {
        for (i, u) in self.updates.iter_mut().enumerate() {
            let f = |name: &str| format!("updates[{i}].{name}");
            if u.run_at.is_some() && u.delay_seconds.is_some() {
                return Err(err(
                    &f("delay_seconds"),
                    "run_at and delay_seconds cannot both be given",
                ));
            }
            check_text_bytes(u.title.as_ref(), || f("title"))?;
            check_text_bytes(u.description.as_ref().and_then(Option::as_ref), || {
                f("description")
            })?;
            check_note_bytes(u.note.as_ref(), || f("note"))?;
            check_object_bytes(u.output.as_ref(), || f("output"))?;
            check_object_bytes(u.metadata.as_ref(), || f("metadata"))?;
            if let Some(ids) = u.blocked_by.as_mut() {
                dedup(ids);
            }
            if let Some(tags) = u.tags.as_mut() {
                dedup(tags);
            }
        }
        Ok(())
    }
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
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetTasks {
    #[schemars(length(min = 1, max = 25))]
    pub task_ids: Vec<TaskId>,
}

impl Decode for GetTasks {
    fn validate(&mut self) -> Result<()> {
        dedup(&mut self.task_ids);
        Ok(())
    }
}

// ---- list -------------------------------------------------------------------

/// `GET /tasks`: filters, page size and cursor. Over HTTP the fields are
/// query parameters (`status` and `tags` comma-separated); a tool may send
/// them as JSON values.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTasks {
    /// Statuses to keep, comma-separated.
    #[serde(rename = "status", default, deserialize_with = "status_list")]
    #[schemars(with = "Option<String>", regex(pattern = STATUS_LIST_PATTERN))]
    pub statuses: Vec<TaskStatus>,
    #[serde(rename = "parent_task_id", default)]
    pub parent: Option<TaskId>,
    #[serde(default)]
    pub assignee: Option<String>,
    /// Tags, comma-separated; a task matches when it has any of them.
    #[serde(default, deserialize_with = "comma_list")]
    #[schemars(with = "Option<String>")]
    pub tags: Vec<String>,
    /// Keep priority <= this.
    #[serde(default)]
    #[schemars(range(min = 1, max = 5))]
    pub priority_max: Option<u8>,
    #[serde(default = "default_list_limit")]
    #[schemars(range(min = 1, max = 200))]
    pub limit: u32,
    /// `next_cursor` of the previous page: never empty (a first page is
    /// asked for without `cursor`).
    #[serde(default)]
    #[schemars(length(min = 1))]
    pub cursor: Option<String>,
    /// Whole tasks instead of lean items.
    #[serde(default)]
    pub full: bool,
    /// Only waiting tasks (pending with a `run_at` still ahead), or only
    /// the others.
    #[serde(default)]
    pub waiting: Option<bool>,
}

impl Decode for ListTasks {}

/// The items of a comma-separated list, trimmed, without blanks or
/// repeats, sorted (a cursor is bound to the query as a set).
fn comma_list<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Vec<String>, D::Error> {
    let mut items: Vec<String> = Option::<String>::deserialize(d)?
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    items.sort();
    items.dedup();
    Ok(items)
}

fn status_list<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Vec<TaskStatus>, D::Error> {
    let mut statuses = comma_list(d)?
        .iter()
        .map(|s| {
            TaskStatus::parse(s)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown status '{s}'")))
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    statuses.sort();
    statuses.dedup();
    Ok(statuses)
}

impl ListTasks {
    /// Whether a task with header `h` passes the filters at `now`: the same
    /// test the store's query makes of finished tasks (never waiting),
    /// made here of open ones.
    pub fn matches(&self, h: &crate::domain::TaskHeader, now: i64) -> bool {
        (self.statuses.is_empty() || self.statuses.contains(&h.status))
            && self.waiting.is_none_or(|w| w == is_waiting(h, now))
            && self.parent.is_none_or(|p| h.parent == Some(p))
            && self
                .assignee
                .as_ref()
                .is_none_or(|a| h.assignee.as_ref() == Some(a))
            && self.priority_max.is_none_or(|p| h.priority <= p)
            && (self.tags.is_empty() || h.tags.iter().any(|t| self.tags.contains(t)))
    }
}

/// Whether a task is waiting at `now`: pending, with a `run_at` ahead.
pub fn is_waiting(h: &crate::domain::TaskHeader, now: i64) -> bool {
    h.status == TaskStatus::Pending && h.run_at.is_some_and(|at| at > now)
}

// ---- claim ------------------------------------------------------------------

/// `POST /tasks/claim`: every field optional; an absent body is `{}`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    /// Claim only a task carrying any of these tags.
    #[serde(default)]
    #[schemars(inner(length(min = 1), regex(pattern = NON_BLANK_NO_NUL_PATTERN)))]
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
    #[schemars(range(min = 1, max = MAX_CLAIM_COUNT))]
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

impl Decode for ClaimRequest {
    const BODY_REQUIRED: bool = false;

    fn validate(&mut self) -> Result<()> {
        dedup(&mut self.tags);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::decode_query;
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
            run_at: None,
            retry: None,
            retries: 0,
            scheduled: None,
        };
        let q = |pairs: &[(&str, &str)]| {
            let params: Vec<(String, String)> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            decode_query::<ListTasks>(params).unwrap()
        };
        assert!(q(&[]).matches(&h, 0));
        assert!(q(&[("status", "pending,in_progress")]).matches(&h, 0));
        assert!(!q(&[("status", "pending")]).matches(&h, 0));
        assert!(q(&[("parent_task_id", &parent.to_string())]).matches(&h, 0));
        assert!(!q(&[("parent_task_id", &TaskId::new_v7().to_string())]).matches(&h, 0));
        assert!(q(&[("assignee", "ann")]).matches(&h, 0));
        assert!(!q(&[("assignee", "bob")]).matches(&h, 0));
        assert!(q(&[("priority_max", "2")]).matches(&h, 0));
        assert!(!q(&[("priority_max", "1")]).matches(&h, 0));
        assert!(q(&[("tags", "cpu,eu")]).matches(&h, 0));
        assert!(!q(&[("tags", "cpu")]).matches(&h, 0));
        let unassigned = crate::domain::TaskHeader {
            assignee: None,
            parent: None,
            ..h.clone()
        };
        assert!(!q(&[("assignee", "ann")]).matches(&unassigned, 0));
        assert!(!q(&[("parent_task_id", &parent.to_string())]).matches(&unassigned, 0));
        // Waiting: pending with a run_at still ahead at the time asked.
        let waiting = crate::domain::TaskHeader {
            status: TaskStatus::Pending,
            run_at: Some(100),
            ..unassigned
        };
        assert!(q(&[("waiting", "true")]).matches(&waiting, 99));
        assert!(!q(&[("waiting", "false")]).matches(&waiting, 99));
        assert!(!q(&[("waiting", "true")]).matches(&waiting, 100));
        assert!(q(&[("waiting", "false")]).matches(&waiting, 100));
        assert!(
            !q(&[("waiting", "true")]).matches(&h, 0),
            "only a pending task waits"
        );
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
        assert_eq!(claim(json!({})).unwrap().wait_seconds, 0);
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
        assert_eq!(claim(json!({})).unwrap().count, None);
        assert_eq!(claim(json!({})).unwrap().limit(), 1);
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
            claim(json!({})).unwrap().lease_seconds,
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
        assert!(decode_query::<ListTasks>(p("limit", "0")).is_err());
        assert!(decode_query::<ListTasks>(p("limit", "201")).is_err());
        assert_eq!(
            decode_query::<ListTasks>(p("limit", "200")).unwrap().limit,
            200
        );
        assert!(decode_query::<ListTasks>(p("status", "done")).is_err());
        assert!(decode_query::<ListTasks>(p("full", "yes")).is_err());
        // The schema says what a cursor is not: empty.
        let e = decode_query::<ListTasks>(p("cursor", "")).unwrap_err();
        assert_eq!(e.0, "cursor: must not be empty");
        assert_eq!(
            decode_query::<ListTasks>(p("cursor", "x"))
                .unwrap()
                .cursor
                .as_deref(),
            Some("x")
        );
        assert_eq!(
            decode_query::<ListTasks>(Vec::new()).unwrap().limit,
            DEFAULT_LIST_LIMIT
        );
        let q = ListTasks::decode(&json!({"limit": 5, "full": true, "status": "blocked,pending"}))
            .unwrap();
        assert_eq!((q.limit, q.full), (5, true));
        assert_eq!(q.statuses, vec![TaskStatus::Pending, TaskStatus::Blocked]);
    }
}
