//! The board's forms as the API's requests.
//!
//! A form is only translated: each field becomes the request field of the
//! same name, as the text the member typed (a priority that is not a
//! number stays a string, for the operation to refuse as the API does).
//! Empty fields are left out, except where emptiness means something
//! (`tags` on the task's own form clears them, as `tags: []` does).

use serde_json::{json, Map, Value};

use super::super::extract::query_pairs;
use super::BoardError;

/// A decoded `application/x-www-form-urlencoded` body.
pub struct Form(Vec<(String, String)>);

impl Form {
    pub fn parse(body: &[u8]) -> Result<Form, BoardError> {
        let text = std::str::from_utf8(body).map_err(|_| BoardError::BadForm)?;
        query_pairs(text).map(Form).map_err(|_| BoardError::BadForm)
    }

    /// A field's value as sent.
    pub fn raw(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// A field's value, trimmed; `None` when absent or blank.
    pub fn text(&self, name: &str) -> Option<String> {
        self.raw(name)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    }
}

/// A list typed as items separated by commas (a tag may hold spaces).
pub fn list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Task ids separated by commas or spaces.
pub fn ids(text: &str) -> Vec<String> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A number if it is one, else the text as typed.
pub fn number(text: String) -> Value {
    text.parse::<i64>()
        .map(Value::from)
        .unwrap_or(Value::String(text))
}

/// `POST /tasks` with the one task of the board's form.
pub fn create_task(form: &Form) -> Value {
    let mut item = Map::new();
    item.insert(
        "title".into(),
        Value::String(form.raw("title").unwrap_or_default().to_owned()),
    );
    if let Some(d) = form.text("description") {
        item.insert("description".into(), Value::String(d));
    }
    if let Some(p) = form.text("priority") {
        item.insert("priority".into(), number(p));
    }
    if let Some(a) = form.text("assignee") {
        item.insert("assignee".into(), Value::String(a));
    }
    if let Some(t) = form.text("tags") {
        item.insert("tags".into(), json!(list(&t)));
    }
    if let Some(b) = form.text("blocked_by") {
        item.insert("blocked_by".into(), json!(ids(&b)));
    }
    json!({ "tasks": [item] })
}

/// `POST /tasks/update` with one item for `task_id` from a task form.
pub fn update_task(task_id: &str, form: &Form) -> Value {
    let mut item = Map::new();
    item.insert("task_id".into(), Value::String(task_id.to_owned()));
    for field in ["status", "note", "assignee"] {
        if let Some(v) = form.text(field) {
            item.insert(field.into(), Value::String(v));
        }
    }
    if let Some(p) = form.text("priority") {
        item.insert("priority".into(), number(p));
    }
    // The form that edits fields always says what the tags are.
    if form.raw("fields").is_some() {
        item.insert(
            "tags".into(),
            json!(list(form.raw("tags").unwrap_or_default())),
        );
    }
    json!({ "updates": [item] })
}

/// `POST /tags` with the one tag of the board's form.
pub fn create_tag(form: &Form) -> Value {
    let mut item = Map::new();
    item.insert(
        "name".into(),
        Value::String(form.raw("name").unwrap_or_default().trim().to_owned()),
    );
    if let Some(d) = form.text("description") {
        item.insert("description".into(), Value::String(d));
    }
    json!({ "tags": [item] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_become_the_api_requests() {
        let form =
            Form::parse(b"title=Ship+it&priority=2&tags=a%2C+b+c&blocked_by=x+y&description=")
                .unwrap();
        assert_eq!(
            create_task(&form),
            json!({"tasks": [{"title": "Ship it", "priority": 2, "tags": ["a", "b c"], "blocked_by": ["x", "y"]}]})
        );
        let form = Form::parse(b"status=canceled&note=no&assignee=").unwrap();
        assert_eq!(
            update_task("t", &form),
            json!({"updates": [{"task_id": "t", "status": "canceled", "note": "no"}]})
        );
        let form = Form::parse(b"fields=1&tags=&priority=x").unwrap();
        assert_eq!(
            update_task("t", &form),
            json!({"updates": [{"task_id": "t", "priority": "x", "tags": []}]})
        );
    }
}
