//! `POST /tasks`: the create request, its decoder, and the rules of a
//! call's `ref:` graph.

use std::collections::{HashMap, HashSet};

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::content::{
    check_object, check_object_bytes, check_text, check_text_bytes, description_schema,
    title_schema, ContentPolicy, Text,
};
use super::decode::{dedup, err, Result};
use super::tasks::DEFAULT_PRIORITY;
use super::{Decode, Object, Timestamp, NON_BLANK_NO_NUL_PATTERN, NON_BLANK_PATTERN};
use crate::domain::lease::{DEFAULT_MAX_ATTEMPTS, MAX_MAX_ATTEMPTS};
use crate::domain::retry::{
    RetryPolicy, DEFAULT_BACKOFF_SECONDS, DEFAULT_MAX_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS,
    MAX_MAX_BACKOFF_SECONDS, MAX_RETRIES,
};
use crate::domain::TaskId;

fn default_priority() -> u8 {
    DEFAULT_PRIORITY
}

fn default_max_attempts() -> u8 {
    DEFAULT_MAX_ATTEMPTS
}

/// `POST /tasks`: 1 to 25 tasks, created together or not at all.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = create_example())]
pub struct CreateTasks {
    #[schemars(length(min = 1, max = 25))]
    pub tasks: Vec<NewTask>,
}

/// Two tasks, the second waiting on the first.
fn create_example() -> Value {
    serde_json::json!({ "tasks": [
        { "ref": "report", "title": "Write the report", "priority": 2 },
        { "title": "Review the report", "blocked_by": ["ref:report"] },
    ]})
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
            "pattern": BLOCKER_PATTERN,
            "description": "a task UUID, or `ref:<name>` naming another item of the same call"
        })
    }
}

/// A task UUID (either case), or `ref:` and a name.
const BLOCKER_PATTERN: &str =
    "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|ref:.+)$";

/// A canonical UUID as a client mints one: lowercase and hyphenated.
const LOWERCASE_UUID_PATTERN: &str =
    "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";

impl<'de> Deserialize<'de> for BlockerRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.strip_prefix("ref:") {
            Some(name) if !name.is_empty() => Ok(BlockerRef::Ref(name.to_owned())),
            _ => s.parse().map(BlockerRef::Task).map_err(|()| {
                serde::de::Error::custom("must be a task UUID or a 'ref:<name>' string")
            }),
        }
    }
}

/// One task to create.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("not" = { "required": ["run_at", "delay_seconds"] }))]
pub struct NewTask {
    /// A client-minted id (canonical lowercase UUID), which makes retries safe.
    #[serde(default)]
    #[schemars(regex(pattern = LOWERCASE_UUID_PATTERN))]
    pub task_id: Option<TaskId>,
    /// A name other items of this call use in `blocked_by` as `ref:<name>`.
    #[serde(rename = "ref", default)]
    #[schemars(length(min = 1), regex(pattern = NON_BLANK_PATTERN))]
    pub reference: Option<String>,
    #[schemars(schema_with = "title_schema")]
    pub title: Text,
    #[serde(default)]
    #[schemars(schema_with = "description_schema")]
    pub description: Option<Text>,
    #[serde(rename = "parent_task_id", default)]
    pub parent: Option<TaskId>,
    /// A member's email or the name of one of the org's keys.
    #[serde(default)]
    #[schemars(length(min = 1), regex(pattern = NON_BLANK_PATTERN))]
    pub assignee: Option<String>,
    /// 1 is most urgent.
    #[serde(default = "default_priority")]
    #[schemars(range(min = 1, max = 5))]
    pub priority: u8,
    /// Absent: the org's default tags; `[]`: no tags.
    #[serde(default)]
    #[schemars(inner(length(min = 1), regex(pattern = NON_BLANK_NO_NUL_PATTERN)))]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    pub metadata: Option<Object>,
    #[serde(default)]
    pub blocked_by: Vec<BlockerRef>,
    /// How many leases may run out before the task is failed with the note
    /// `max attempts reached`.
    #[serde(default = "default_max_attempts")]
    #[schemars(range(min = 1, max = MAX_MAX_ATTEMPTS))]
    pub max_attempts: u8,
    /// When it may first be claimed; until then it is waiting (still
    /// `pending`, skipped by claims). Not with `delay_seconds`.
    #[serde(default)]
    pub run_at: Option<Timestamp>,
    /// Seconds from now until it may first be claimed. Not with `run_at`.
    #[serde(default)]
    #[schemars(range(min = 0, max = MAX_DELAY_SECONDS))]
    pub delay_seconds: Option<u32>,
    /// Failures (by an update) retried with backoff while retries are left.
    #[serde(default)]
    pub retry: Option<RetryRequest>,
}

/// The longest `delay_seconds`: a year.
pub const MAX_DELAY_SECONDS: u32 = 31_536_000;

fn default_backoff_seconds() -> u32 {
    DEFAULT_BACKOFF_SECONDS
}

/// A create item's retry policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryRequest {
    /// Failures retried before one fails the task (and its dependents).
    #[schemars(range(min = 0, max = MAX_RETRIES))]
    pub max_retries: u8,
    /// The wait before the first retry; each next one doubles it.
    #[serde(default = "default_backoff_seconds")]
    #[schemars(range(min = 1, max = MAX_BACKOFF_SECONDS))]
    pub backoff_seconds: u32,
    /// The longest wait, at least `backoff_seconds` (default 3600, or
    /// `backoff_seconds` when that is longer).
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_MAX_BACKOFF_SECONDS))]
    pub max_backoff_seconds: Option<u32>,
}

impl RetryRequest {
    /// The policy a task is created with; `None` when the cap is shorter
    /// than the first wait.
    pub fn policy(&self) -> Option<RetryPolicy> {
        let cap = self
            .max_backoff_seconds
            .unwrap_or(DEFAULT_MAX_BACKOFF_SECONDS.max(self.backoff_seconds));
        (cap >= self.backoff_seconds).then_some(RetryPolicy {
            max_retries: self.max_retries,
            backoff_seconds: self.backoff_seconds,
            max_backoff_seconds: cap,
        })
    }
}

/// When a task with `run_at` or `delay_seconds` (at most one) created or
/// updated at `now` may be claimed.
pub fn due_at(run_at: Option<Timestamp>, delay_seconds: Option<u32>, now: i64) -> Option<i64> {
    match (run_at, delay_seconds) {
        (Some(at), _) => Some(at.0),
        (None, Some(delay)) => Some(now + i64::from(delay) * 1000),
        (None, None) => None,
    }
}

/// Where a create item stands in its request, for the fields its refusals
/// name: `tasks[i].title` in a `POST /tasks` call, `task.title` in a
/// schedule's template (and in the refusal of a tick made from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemPath {
    InCall(usize),
    Template,
}

impl ItemPath {
    pub fn field(self, name: &str) -> String {
        match self {
            Self::InCall(i) => format!("tasks[{i}].{name}"),
            Self::Template => format!("task.{name}"),
        }
    }
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
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            run_at: None,
            delay_seconds: None,
            retry: None,
        }
    }

    /// The rules of one item, whatever request holds it: timing and retry
    /// consistent, sizes in bytes; repeated tags and blockers dropped.
    pub fn check_item(&mut self, at: ItemPath) -> Result<()> {
        let f = |name: &str| at.field(name);
        if self.run_at.is_some() && self.delay_seconds.is_some() {
            return Err(err(
                &f("delay_seconds"),
                "run_at and delay_seconds cannot both be given",
            ));
        }
        if self.retry.is_some_and(|r| r.policy().is_none()) {
            return Err(err(
                &f("retry.max_backoff_seconds"),
                "must be at least backoff_seconds",
            ));
        }
        check_text_bytes(Some(&self.title), || f("title"))?;
        check_text_bytes(self.description.as_ref(), || f("description"))?;
        check_object_bytes(self.metadata.as_ref(), || f("metadata"))?;
        if let Some(tags) = self.tags.as_mut() {
            dedup(tags);
        }
        dedup(&mut self.blocked_by);
        Ok(())
    }

    /// A managed org refuses client envelopes in any content field.
    pub fn check_content(&self, policy: ContentPolicy, at: ItemPath) -> Result<()> {
        if policy == ContentPolicy::ClientEncrypted {
            return Ok(());
        }
        check_text(Some(&self.title), || at.field("title"))?;
        check_text(self.description.as_ref(), || at.field("description"))?;
        check_object(self.metadata.as_ref(), || at.field("metadata"))
    }
}

impl Decode for CreateTasks {
    /// Ids and refs unique within the call, sizes in bytes, repeats
    /// dropped, and a `ref:` graph without cycles or dangling names.
    fn validate(&mut self) -> Result<()> {
        let mut refs = HashSet::new();
        let mut ids = HashSet::new();
        for (i, t) in self.tasks.iter_mut().enumerate() {
            let f = |name: &str| format!("tasks[{i}].{name}");
            if let Some(id) = t.task_id {
                if !ids.insert(id) {
                    return Err(err(&f("task_id"), "appears twice in this call"));
                }
            }
            if let Some(r) = &t.reference {
                if !refs.insert(r.clone()) {
                    return Err(err(&f("ref"), format!("duplicate ref '{r}' in this call")));
                }
            }
            t.check_item(ItemPath::InCall(i))?;
        }
        check_ref_graph(&self.tasks)
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
        let decoded = CreateTasks::decode(&body).unwrap().tasks.remove(0);
        let at = ItemPath::InCall(0);
        assert!(decoded.check_content(ContentPolicy::Managed, at).is_err());
        assert!(decoded
            .check_content(ContentPolicy::ClientEncrypted, at)
            .is_ok());
        let meta = json!({"tasks": [{"title": "t", "metadata": {"__service_enc__": {}}}]});
        let item = CreateTasks::decode(&meta).unwrap().tasks.remove(0);
        let e = item.check_content(ContentPolicy::Managed, at).unwrap_err();
        assert!(e.0.starts_with("tasks[0].metadata"), "{e}");
        let e = item
            .check_content(ContentPolicy::Managed, ItemPath::Template)
            .unwrap_err();
        assert!(e.0.starts_with("task.metadata: "), "{e}");
        let other = json!({"tasks": [{"title": {"other": 1}}]});
        assert!(CreateTasks::decode(&other).unwrap_err().0.contains("title"));
    }
}
