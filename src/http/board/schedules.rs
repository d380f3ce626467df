//! The schedules view: the org's schedules with their next and last run
//! and last error, and the forms that create, pause, resume and delete one.
//! Each is the API operation of the same name (`calls`), so the board
//! manages schedules exactly as an admin's key does, and a member or a free
//! plan sees the operation's refusal as a note on the page.

use askama::Template;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Map, Value};
use taskq_actors::api::ScheduleView;
use taskq_actors::ErrorCode;

use super::calls::{
    call, Input, CREATE_SCHEDULE, DELETE_SCHEDULE, LIST_SCHEDULES, UPDATE_SCHEDULE,
};
use super::forms::{self, Form};
use super::pages::{self, Chrome};
use super::times::When;
use super::{chrome, see_other, signed_in, writer, AppState, BoardError};

/// One schedule as the page shows it.
pub struct Row {
    pub id: String,
    pub name: String,
    pub cron: String,
    pub timezone: String,
    pub title: String,
    pub active: bool,
    /// In the schedule's own zone.
    pub next_run_at: Option<When>,
    pub last_run_at: Option<When>,
    pub last_error: Option<String>,
}

impl From<ScheduleView> for Row {
    fn from(s: ScheduleView) -> Row {
        Row {
            id: s.schedule_id.to_string(),
            name: s.name,
            cron: s.cron,
            title: s.task["title"].as_str().unwrap_or_default().to_owned(),
            active: s.active,
            next_run_at: s.next_run_at.map(|at| When::in_zone(at, &s.timezone)),
            last_run_at: s.last_run_at.map(|at| When::in_zone(at, &s.timezone)),
            timezone: s.timezone,
            last_error: s.last_error,
        }
    }
}

#[derive(Template)]
#[template(path = "schedules.html")]
pub struct Schedules {
    pub chrome: Chrome,
    pub schedules: Vec<Row>,
    /// Why the org's schedules cannot be shown to this member (the plan or
    /// the role), as the operation said it.
    pub unavailable: Option<String>,
}

/// `GET /board/schedules`.
pub async fn page(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, BoardError> {
    let session = signed_in(&state, &headers).await?;
    let listed = call(&state, &session.caller, LIST_SCHEDULES, Input::None).await;
    let (schedules, unavailable) = match listed {
        Ok(list) => (list.schedules.into_iter().map(Row::from).collect(), None),
        Err(e) if matches!(e.code(), ErrorCode::UpgradeRequired | ErrorCode::Forbidden) => {
            (Vec::new(), Some(e.body().error))
        }
        Err(e) => return Err(e.into()),
    };
    let chrome = chrome(&state, &session, "schedules");
    let nonce = chrome.nonce.clone();
    let page = Schedules {
        chrome,
        schedules,
        unavailable,
    };
    Ok(pages::page(StatusCode::OK, &nonce, &page))
}

/// `POST /create_schedule`'s request from the board's form: the schedule
/// and the title, priority and tags of the task each tick creates.
fn create_request(form: &Form) -> Value {
    let mut task = Map::new();
    task.insert(
        "title".into(),
        Value::String(form.raw("title").unwrap_or_default().to_owned()),
    );
    if let Some(p) = form.text("priority") {
        task.insert("priority".into(), forms::number(p));
    }
    if let Some(t) = form.text("tags") {
        task.insert("tags".into(), json!(forms::list(&t)));
    }
    let mut body = json!({
        "name": form.raw("name").unwrap_or_default(),
        "cron": form.raw("cron").unwrap_or_default(),
        "task": task,
    });
    if let Some(zone) = form.text("timezone") {
        body["timezone"] = Value::String(zone);
    }
    body
}

/// `POST /board/schedules`: creates the form's schedule.
pub async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, BoardError> {
    let form = Form::parse(&body)?;
    let session = writer(&state, &headers, &form).await?;
    let request = Input::Body(create_request(&form));
    call(&state, &session.caller, CREATE_SCHEDULE, request).await?;
    Ok(see_other("/board/schedules"))
}

/// `POST /board/schedules/{schedule_id}/update`: pauses (`active=false`)
/// or resumes (`active=true`) it.
pub async fn update(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, BoardError> {
    let form = Form::parse(&body)?;
    let session = writer(&state, &headers, &form).await?;
    let active = match form.raw("active") {
        Some("true") => true,
        Some("false") => false,
        _ => return Err(BoardError::BadForm),
    };
    let request = Input::At(vec![id], json!({ "active": active }));
    call(&state, &session.caller, UPDATE_SCHEDULE, request).await?;
    Ok(see_other("/board/schedules"))
}

/// `POST /board/schedules/{schedule_id}/delete`.
pub async fn delete(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, BoardError> {
    let form = Form::parse(&body)?;
    let session = writer(&state, &headers, &form).await?;
    let request = Input::At(vec![id], json!({}));
    call(&state, &session.caller, DELETE_SCHEDULE, request).await?;
    Ok(see_other("/board/schedules"))
}
