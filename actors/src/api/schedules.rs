//! Schedules (CONTRACT §9): the requests that manage an org's recurring
//! tasks and what they answer. A schedule's `task` is a create item, read
//! and checked as `POST /tasks` reads one, without the fields that belong
//! to one call (`task_id`, `ref`, `blocked_by`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::decode::Result;
use super::integers::Integers;
use super::{Decode, ItemPath, NewTask, Timestamp, ValidationError, NAME_PATTERN};
use crate::domain::schedule::{CronSpec, Zone};
use crate::domain::ScheduleId;

/// The paid feature of the schedule routes.
pub const SCHEDULES: &str = "schedules";

fn default_timezone() -> String {
    "UTC".to_owned()
}

fn default_active() -> bool {
    true
}

/// The fields of a create item a schedule's template may not have.
const NOT_IN_A_TEMPLATE: [&str; 3] = ["task_id", "ref", "blocked_by"];

/// `POST /schedules`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSchedule {
    /// Unique in the org.
    #[schemars(length(min = 1, max = 64), regex(pattern = NAME_PATTERN))]
    pub name: String,
    /// Five fields: minute hour day-of-month month day-of-week, each `*`,
    /// a number, a range, a step (`*/15`, `1-5/2`) or a list of those.
    #[schemars(length(min = 9, max = 200))]
    pub cron: String,
    /// An IANA time zone; ticks are its wall-clock times.
    #[serde(default = "default_timezone")]
    #[schemars(length(min = 1, max = 64))]
    pub timezone: String,
    /// The task each tick creates, as a `POST /tasks` item.
    #[schemars(schema_with = "template_schema")]
    pub task: Value,
    #[serde(default = "default_active")]
    pub active: bool,
}

/// `PATCH /schedules/{schedule_id}`: only the fields given change.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("minProperties" = 1))]
pub struct PatchSchedule {
    #[serde(default)]
    #[schemars(length(min = 9, max = 200))]
    pub cron: Option<String>,
    #[serde(default)]
    #[schemars(length(min = 1, max = 64))]
    pub timezone: Option<String>,
    #[serde(default)]
    #[schemars(schema_with = "template_schema")]
    pub task: Option<Value>,
    #[serde(default)]
    pub active: Option<bool>,
}

/// A create item without the fields of one call.
fn template_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let item = generator.subschema_for::<NewTask>();
    let forbidden: Vec<Value> = NOT_IN_A_TEMPLATE
        .iter()
        .map(|f| serde_json::json!({ "required": [f] }))
        .collect();
    schemars::json_schema!({
        "allOf": [item, { "not": { "anyOf": forbidden } }]
    })
}

/// The pattern and zone a request names, read: `cron` and `timezone`
/// refusals name those fields.
pub fn read_timing(cron: &str, timezone: &str) -> Result<(CronSpec, Zone)> {
    let cron = CronSpec::parse(cron).map_err(|e| field_error("cron", &e))?;
    let zone = Zone::parse(timezone).map_err(|e| field_error("timezone", &e))?;
    Ok((cron, zone))
}

/// A refusal of `field`, whose message may already name it.
fn field_error(field: &str, message: &str) -> ValidationError {
    let message = message
        .strip_prefix(&format!("{field}: "))
        .unwrap_or(message);
    ValidationError::field(field, message)
}

/// The create item a template holds, checked as `POST /tasks` checks its
/// items (its fields named `task.<field>`), without the fields of one call.
pub fn read_template(template: &Value) -> Result<NewTask> {
    // A template is a create item, read with JSON Schema's integers as one.
    let mut task: NewTask = serde_path_to_error::deserialize(Integers(template)).map_err(|e| {
        let field = match e.path().to_string() {
            // The template itself, not one of its fields.
            root if root == "." => "task".to_owned(),
            path => ItemPath::Template.field(&path),
        };
        ValidationError::field(field, e.into_inner().to_string())
    })?;
    check_template(&mut task)?;
    Ok(task)
}

fn check_template(task: &mut NewTask) -> Result<()> {
    if task.task_id.is_some() {
        return Err(ValidationError::field(
            ItemPath::Template.field("task_id"),
            "not allowed in a schedule",
        ));
    }
    if task.reference.is_some() {
        return Err(ValidationError::field(
            ItemPath::Template.field("ref"),
            "not allowed in a schedule",
        ));
    }
    if !task.blocked_by.is_empty() {
        return Err(ValidationError::field(
            ItemPath::Template.field("blocked_by"),
            "not allowed in a schedule",
        ));
    }
    task.check_item(ItemPath::Template)
}

impl Decode for CreateSchedule {
    fn validate(&mut self) -> Result<()> {
        self.name = self.name.trim().to_owned();
        read_timing(&self.cron, &self.timezone)?;
        read_template(&self.task).map(|_| ())
    }
}

impl Decode for PatchSchedule {
    fn validate(&mut self) -> Result<()> {
        if let Some(cron) = &self.cron {
            CronSpec::parse(cron).map_err(|e| field_error("cron", &e))?;
        }
        if let Some(zone) = &self.timezone {
            Zone::parse(zone).map_err(|e| field_error("timezone", &e))?;
        }
        if let Some(task) = &self.task {
            read_template(task)?;
        }
        Ok(())
    }
}

/// A schedule as clients see it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ScheduleView {
    pub schedule_id: ScheduleId,
    pub name: String,
    pub cron: String,
    pub timezone: String,
    /// The create item each tick creates its task from.
    pub task: Value,
    pub active: bool,
    /// The next tick, while it is active.
    pub next_run_at: Option<Timestamp>,
    /// The latest tick fired.
    pub last_run_at: Option<Timestamp>,
    /// Why the latest tick made no task, if it did not.
    pub last_error: Option<String>,
    pub created_by: String,
    pub created_at: Timestamp,
}

/// `GET /schedules`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ScheduleList {
    pub schedules: Vec<ScheduleView>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_template_takes_json_schema_integers_as_a_create_item_does() {
        let task = read_template(&json!({"title": "t", "priority": 2.0,
            "retry": {"max_retries": 2, "backoff_seconds": 544.0}}))
        .unwrap();
        assert_eq!(task.priority, 2);
        assert_eq!(task.retry.map(|r| r.backoff_seconds), Some(544));
        assert!(read_template(&json!({"title": "t", "priority": 2.5})).is_err());
    }

    #[test]
    fn a_schedule_reads_its_pattern_zone_and_template() {
        let s = CreateSchedule::decode(&json!({
            "name": " nightly audit ",
            "cron": "0 2 * * *",
            "task": {"title": "Audit the dependencies", "tags": ["ops"], "delay_seconds": 60},
        }))
        .unwrap();
        assert_eq!(
            (s.name.as_str(), s.timezone.as_str(), s.active),
            ("nightly audit", "UTC", true)
        );
        assert_eq!(read_template(&s.task).unwrap().delay_seconds, Some(60));
        let refused = |body: Value| CreateSchedule::decode(&body).unwrap_err().0;
        let base = |patch: Value| {
            let mut body = json!({"name": "n", "cron": "0 2 * * *", "task": {"title": "t"}});
            for (k, v) in patch.as_object().unwrap() {
                body[k] = v.clone();
            }
            body
        };
        assert!(refused(base(json!({"cron": "0 2 * * MON"}))).starts_with("cron: "));
        assert!(refused(base(json!({"cron": "* * * * * *"}))).starts_with("cron: "));
        assert!(refused(base(json!({"timezone": "Mars/Olympus"}))).starts_with("timezone: "));
        for (field, value) in [
            ("task_id", json!("0190a0c2-7f3e-7c1a-9b2d-3e4f5a6b7c8d")),
            ("ref", json!("r")),
            (
                "blocked_by",
                json!(["0190a0c2-7f3e-7c1a-9b2d-3e4f5a6b7c8d"]),
            ),
        ] {
            let e = refused(base(json!({"task": {"title": "t", field: value}})));
            assert!(e.starts_with(&format!("task.{field}: ")), "{e}");
        }
        let e = refused(base(json!({"task": {"title": "t", "priority": 9}})));
        assert!(e.starts_with("task.priority: "), "{e}");
        // The rules of a create item name the template's fields too.
        let e = refused(base(
            json!({"task": {"title": "t", "run_at": "2030-01-01T00:00:00Z",
                                             "delay_seconds": 5}}),
        ));
        assert_eq!(e, "task.delay_seconds: cannot be given with run_at");
        let e = refused(base(json!({"task": {"title": "t",
            "retry": {"max_retries": 1, "backoff_seconds": 60, "max_backoff_seconds": 30}}})));
        assert_eq!(
            e,
            "task.retry.max_backoff_seconds: must be at least backoff_seconds"
        );
        // A template that is not an object is refused as `task` itself.
        let e = refused(base(json!({"task": "t"})));
        assert!(e.starts_with("task: "), "{e}");
    }

    #[test]
    fn a_refused_pattern_is_named_cron_with_croner_s_reason() {
        for written in [
            "60 * * * *",
            "* * * * MON",
            "0 0 31 2 *",
            "@daily",
            "1,,2 * * * *",
        ] {
            let reason = CronSpec::parse(written).unwrap_err();
            assert_eq!(
                read_timing(written, "UTC").map(|_| ()),
                Err(ValidationError::field("cron", &reason)),
                "{written:?}"
            );
        }
    }

    #[test]
    fn a_patch_changes_at_least_one_field() {
        assert!(PatchSchedule::decode(&json!({})).is_err());
        let p = PatchSchedule::decode(&json!({"active": false})).unwrap();
        assert_eq!(p.active, Some(false));
        assert!(PatchSchedule::decode(&json!({"cron": "61 * * * *"}))
            .unwrap_err()
            .0
            .starts_with("cron: "));
    }
}
