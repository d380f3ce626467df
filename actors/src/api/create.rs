//! `POST /tasks`: the create request, its decoder, and the rules of a
//! call's `ref:` graph.

use std::collections::{HashMap, HashSet};

use schemars::JsonSchema;
use serde_json::Value;

use super::content::{check_object, check_text, content_object, text, title, ContentPolicy, Text};
use super::decode::{
    batch, err, field_path, non_empty_string, optional_string, present, reject_unknown, Result,
};
use super::tasks::{priority, tag_list, task_id, DEFAULT_PRIORITY};
use super::{Decode, MemberRequest, Object, RequestKind};
use crate::domain::lease::{DEFAULT_MAX_ATTEMPTS, MAX_MAX_ATTEMPTS};
use crate::domain::TaskId;

fn default_priority() -> u8 {
    DEFAULT_PRIORITY
}

fn default_max_attempts() -> u8 {
    DEFAULT_MAX_ATTEMPTS
}

/// `POST /tasks`: 1 to 25 tasks, created together or not at all.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
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
            "pattern": "^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|ref:.+)$",
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
    /// How many leases may run out before the task is failed with the note
    /// `max attempts reached`.
    #[serde(default = "default_max_attempts")]
    #[schemars(range(min = 1, max = 100))]
    pub max_attempts: u8,
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
                &p,
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
                    "max_attempts",
                ],
            )?;
            let f = |name: &str| field_path(&p, name);
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
                max_attempts: match present(obj, "max_attempts") {
                    None => DEFAULT_MAX_ATTEMPTS,
                    Some(v) => match v.as_u64() {
                        Some(n @ 1..) if n <= u64::from(MAX_MAX_ATTEMPTS) => n as u8,
                        _ => {
                            return Err(err(
                                &f("max_attempts"),
                                format!("must be an integer from 1 to {MAX_MAX_ATTEMPTS}"),
                            ))
                        }
                    },
                },
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
}
