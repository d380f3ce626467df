//! The board: web pages for the members who work beside the agents
//! (CONTRACT.md §8). Sign-in with an API key (`/board`, `/board/login`,
//! `/board/logout`), the tasks by status with filters, search and paging
//! (`/board/tasks`), one task with its history, dependency graph and lease
//! (`/board/tasks/{task_id}`), agents and their leases, reports as charts,
//! and the org's tags, members and teams; plus `/board/live`, the stream
//! (or the change mark) that keeps the pages current, and `/board/cards`,
//! the few cards a page fetches when the stream names them.
//!
//! The board adds no rule of its own: every read and write is the API
//! operation of the same name, called through the operation table for the
//! caller that the session's key resolves to now (`calls`). What it adds is
//! the browser's side of safety: a session cookie instead of the key
//! (`session`), a CSRF token on every write (`csrf`), templates that escape
//! every field and isolate its direction (`pages`, `templates/`), and a
//! Content-Security-Policy that lets nothing run but the page's own script.
//!
//! Where things are: `access` sign-in and sign-out, `session` the cookie,
//! `csrf` the forms' tokens, `calls` every read and write through the
//! table, `forms` forms as the API's requests, `model` answers as what the
//! pages show, `tasks` and `reports` the views, `svg` the graph's and
//! charts' geometry, `times` times and durations as people read them,
//! `live` the stream and the mark, `cards` the changed cards, `lists` a
//! page's list shared by the org's boards, `pages` and `templates/` the
//! askama pages, `assets/` the inline stylesheet and script.

mod access;
mod calls;
mod cards;
mod csrf;
mod forms;
mod lists;
mod live;
mod model;
mod pages;
mod reports;
mod schedules;
mod session;
mod svg;
mod tasks;
mod times;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::operation::{Access, Operation};
use super::{ApiError, AppState};
use session::Session;

pub use lists::SharedLists;
pub use live::LiveMark;
pub use session::session_id;

/// Why a board request is not answered with its page.
#[derive(Debug)]
pub enum BoardError {
    /// The operation's own refusal or failure (its status and message).
    Api(ApiError),
    /// A page without a session: the sign-in form follows.
    SignIn,
    /// A write without the session or without its CSRF token.
    Refused,
    /// A form that is not `application/x-www-form-urlencoded` UTF-8.
    BadForm,
    /// A task that the caller's org does not have.
    NotFound,
}

impl From<ApiError> for BoardError {
    fn from(e: ApiError) -> Self {
        BoardError::Api(e)
    }
}

impl From<taskq_actors::EngineError> for BoardError {
    fn from(e: taskq_actors::EngineError) -> Self {
        BoardError::Api(e.into())
    }
}

/// A redirect after a form (or to the sign-in form).
pub fn see_other(to: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(location) = HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

impl IntoResponse for BoardError {
    fn into_response(self) -> Response {
        let (status, heading, message) = match &self {
            BoardError::SignIn => return see_other("/board"),
            BoardError::Refused => (
                StatusCode::FORBIDDEN,
                "Refused",
                "A change from the board needs your session and the form's token. \
                 Reload the page and try again."
                    .to_owned(),
            ),
            BoardError::BadForm => (
                StatusCode::BAD_REQUEST,
                "Not understood",
                "The form could not be read.".to_owned(),
            ),
            BoardError::NotFound => (StatusCode::NOT_FOUND, "Not found", "task not found".into()),
            BoardError::Api(e) => {
                let (status, message) = e.status_and_message();
                let heading = match status {
                    StatusCode::NOT_FOUND => "Not found",
                    StatusCode::FORBIDDEN => "Not allowed",
                    StatusCode::TOO_MANY_REQUESTS => "Too many requests",
                    s if s.is_server_error() => "Unavailable",
                    _ => "Not done",
                };
                (status, heading, message.to_owned())
            }
        };
        let chrome = pages::Chrome::anonymous();
        let nonce = chrome.nonce.clone();
        pages::page(
            status,
            &nonce,
            &pages::ErrorPage {
                chrome,
                heading,
                message,
                back: "/board/tasks".into(),
            },
        )
    }
}

/// The signed-in member of a page request; without one, the sign-in form.
async fn signed_in(state: &AppState, headers: &HeaderMap) -> Result<Session, BoardError> {
    session::current(&state.engine, headers)
        .await?
        .ok_or(BoardError::SignIn)
}

/// The signed-in member of a write, whose form carries the session's CSRF
/// token; anything less is refused before anything is called.
async fn writer(
    state: &AppState,
    headers: &HeaderMap,
    form: &forms::Form,
) -> Result<Session, BoardError> {
    let Some(session) = session::current(&state.engine, headers).await? else {
        return Err(BoardError::Refused);
    };
    match form.raw(csrf::FIELD) {
        Some(token) if csrf::matches(&session.id, token) => Ok(session),
        _ => Err(BoardError::Refused),
    }
}

/// The chrome of a signed-in page.
fn chrome(state: &AppState, session: &Session, nav: &'static str) -> pages::Chrome {
    let role = session.caller.role;
    pages::Chrome {
        nonce: pages::nonce(),
        css: pages::CSS,
        js: pages::JS,
        signed_in: true,
        csrf: csrf::token(&session.id),
        email: session.caller.email.clone(),
        role: role.as_str(),
        is_admin: matches!(
            role,
            taskq_actors::domain::account::Role::Admin | taskq_actors::domain::account::Role::Owner
        ),
        nav,
        mark: Some(state.engine.org_change_mark(session.caller.org_id)),
    }
}

/// Answers documented as pages: every refusal of the board is a page.
fn page_answers(operation: Operation) -> Operation {
    operation
        .html(400, "The form or the request was not understood")
        .html(
            403,
            "Refused: no session or no CSRF token, or the caller's role or plan does not allow it",
        )
        .html(404, "Not found")
        .html(409, "The change did not apply (its reason is on the page)")
        .html(429, "A limit of the org was reached")
}

/// The board's routes, as entries of the operation table. Every one acts
/// for the member of the browser's session, when there is one.
pub fn operations() -> Vec<Operation> {
    let pages = vec![
        Operation::get("/board")
            .doc("board_sign_in", "board", "The board's sign-in form")
            .html(200, "The form")
            .empty(303, "Already signed in: the board follows")
            .handler(access::sign_in),
        Operation::post("/board/login")
            .doc(
                "board_login",
                "board",
                "Sign in to the board with an API key (form `api_key`)",
            )
            .empty(
                303,
                "Signed in: the session cookie is set and the board follows",
            )
            .html(400, "The form could not be read")
            .html(401, "A wrong key: the form again, with an error")
            .html(403, "The org is suspended")
            .handler(access::login),
        page_answers(
            Operation::post("/board/logout")
                .doc(
                    "board_logout",
                    "board",
                    "End the board's session (form `csrf`)",
                )
                .empty(
                    303,
                    "Signed out: the cookie is cleared and the sign-in form follows",
                ),
        )
        .handler(access::logout),
        Operation::get("/board/live")
            .doc(
                "board_live",
                "board",
                "The org's change mark; with `Accept: text/event-stream`, the board's stream of `changed` events (at most one each 500 ms: the mark, the changed tasks' ids, the open tasks per status)",
            )
            .query_of::<live::LiveQuery>()
            .answer::<LiveMark>(200, "The mark; it changes whenever the org's open tasks do")
            .errors(&[401])
            .handler(live::mark),
        page_answers(
            Operation::get("/board/tasks")
                .doc(
                    "board_tasks",
                    "board",
                    "The org's tasks by status, with filters, search and paging",
                )
                .html(200, "The board")
                .empty(303, "No session: the sign-in form follows"),
        )
        .handler(tasks::board),
        page_answers(
            Operation::get("/board/cards")
                .doc(
                    "board_cards",
                    "board",
                    "The cards of up to 100 tasks (`ids`, comma-separated) that the page's filters (same query) keep, as the board shows them",
                )
                .html(200, "The cards")
                .empty(303, "No session: the sign-in form follows"),
        )
        .handler(cards::cards),
        page_answers(
            Operation::post("/board/tasks")
                .doc(
                    "board_create_task",
                    "board",
                    "Create a task from the board's form (with `csrf`)",
                )
                .empty(303, "Created: its page follows"),
        )
        .handler(tasks::create),
        page_answers(
            Operation::get("/board/tasks/{task_id}")
                .doc(
                    "board_task",
                    "board",
                    "One task: content, history, dependency graph and lease",
                )
                .html(200, "The task's page")
                .empty(303, "No session: the sign-in form follows"),
        )
        .handler(tasks::task),
        page_answers(
            Operation::post("/board/tasks/{task_id}/update")
                .doc(
                    "board_update_task",
                    "board",
                    "Change a task from its page's forms (with `csrf`)",
                )
                .empty(303, "Applied: the task's page follows"),
        )
        .handler(tasks::update),
        page_answers(
            Operation::get("/board/agents")
                .doc(
                    "board_agents",
                    "board",
                    "The agents holding leases, and the member's keys",
                )
                .html(200, "The page")
                .empty(303, "No session: the sign-in form follows"),
        )
        .handler(reports::agents),
        page_answers(
            Operation::get("/board/insights")
                .doc("board_insights", "board", "Insights and standups as charts")
                .html(200, "The page")
                .empty(303, "No session: the sign-in form follows"),
        )
        .handler(reports::insights),
        page_answers(
            Operation::get("/board/org")
                .doc("board_org", "board", "The org's tags, members and teams")
                .html(200, "The page")
                .empty(303, "No session: the sign-in form follows"),
        )
        .handler(reports::org),
        page_answers(
            Operation::post("/board/tags")
                .doc(
                    "board_create_tag",
                    "board",
                    "Add a tag from the board's form (with `csrf`; admins and owners)",
                )
                .empty(303, "Added: the page follows"),
        )
        .handler(reports::create_tag),
        page_answers(
            Operation::get("/board/schedules")
                .doc(
                    "board_schedules",
                    "board",
                    "The org's schedules: next and last run, last error, and their forms (admins and owners, paid plans)",
                )
                .html(200, "The page")
                .empty(303, "No session: the sign-in form follows"),
        )
        .handler(schedules::page),
        page_answers(
            Operation::post("/board/schedules")
                .doc(
                    "board_create_schedule",
                    "board",
                    "Create a schedule from the board's form (with `csrf`)",
                )
                .empty(303, "Created: the schedules follow"),
        )
        .handler(schedules::create),
        page_answers(
            Operation::post("/board/schedules/{schedule_id}/update")
                .doc(
                    "board_update_schedule",
                    "board",
                    "Pause (`active=false`) or resume (`active=true`) a schedule (with `csrf`)",
                )
                .empty(303, "Applied: the schedules follow"),
        )
        .handler(schedules::update),
        page_answers(
            Operation::post("/board/schedules/{schedule_id}/delete")
                .doc(
                    "board_delete_schedule",
                    "board",
                    "Delete a schedule (with `csrf`); its tasks stay",
                )
                .empty(303, "Deleted: the schedules follow"),
        )
        .handler(schedules::delete),
    ];
    pages
        .into_iter()
        .map(|page| page.access(Access::BoardSession))
        .collect()
}
