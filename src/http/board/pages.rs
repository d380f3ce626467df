//! The board's pages: one askama template each (under `templates/`),
//! which escape every value by default, and the headers every page is
//! served with.
//!
//! The Content-Security-Policy admits the board's own stylesheet and its
//! one script, both inline under the response's nonce, requests to this
//! origin, and nothing else: no other inline script or style, no other
//! origin, no plugin, no frame.

use askama::Template;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use taskq_actors::domain::mark::ChangeMark;
use taskq_actors::domain::TaskStatus;

use super::model::{Column, Found, Task};
use super::svg::{BarChart, Graph};
use super::times::When;

/// The priorities a form offers.
pub const PRIORITIES: [u8; 5] = [1, 2, 3, 4, 5];

/// The board's stylesheet and script, served inline under the page's nonce.
pub const CSS: &str = include_str!("assets/board.css");
pub const JS: &str = include_str!("assets/board.js");

/// What every page around its content needs.
pub struct Chrome {
    pub nonce: String,
    pub css: &'static str,
    pub js: &'static str,
    pub signed_in: bool,
    pub csrf: String,
    pub email: String,
    pub role: &'static str,
    pub is_admin: bool,
    /// Which part of the board the page belongs to.
    pub nav: &'static str,
    /// The org's change mark when the page was made (the script polls for
    /// another); none on a page without a session.
    pub mark: Option<ChangeMark>,
}

impl Chrome {
    /// For a page shown without a session (a refusal).
    pub fn anonymous() -> Chrome {
        Chrome {
            nonce: nonce(),
            css: CSS,
            js: JS,
            signed_in: false,
            csrf: String::new(),
            email: String::new(),
            role: "",
            is_admin: false,
            nav: "",
            mark: None,
        }
    }
}

pub use crate::http::html::{html, nonce};

/// Renders a template as a page.
pub fn page<T: Template>(status: StatusCode, nonce: &str, template: &T) -> Response {
    match template.render() {
        Ok(body) => html(status, nonce, body),
        Err(e) => {
            tracing::error!(error = %e, "a board page did not render");
            (StatusCode::INTERNAL_SERVER_ERROR, "the page did not render").into_response()
        }
    }
}

/// Every status with its label, in the list's order.
pub fn status_options() -> Vec<(TaskStatus, &'static str)> {
    TaskStatus::ALL
        .into_iter()
        .map(|s| (s, super::model::status_label(s)))
        .collect()
}

#[derive(Template)]
#[template(path = "login.html")]
pub struct Login {
    pub nonce: String,
    pub css: &'static str,
    pub error: Option<&'static str>,
}

#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub chrome: Chrome,
    pub heading: &'static str,
    pub message: String,
    pub back: String,
}

/// The filters of the board, as the form shows them.
#[derive(Default)]
pub struct Filters {
    pub status: String,
    pub tags: String,
    pub assignee: String,
    pub priority_max: String,
    pub q: String,
}

pub struct Search {
    /// Why search by meaning is off for the org.
    pub unavailable: Option<String>,
    pub found: Vec<Found>,
}

#[derive(Template)]
#[template(path = "tasks.html")]
pub struct Tasks {
    pub chrome: Chrome,
    pub filters: Filters,
    pub statuses: Vec<(TaskStatus, &'static str)>,
    pub priorities: [u8; 5],
    pub open_create: bool,
    /// Whether the org's tasks can be searched by meaning (an embedder,
    /// and content the server can read): else no search box is offered.
    pub search_offered: bool,
    pub search: Option<Search>,
    pub columns: Vec<Column>,
    pub shown: usize,
    pub first_page: Option<String>,
    pub next_page: Option<String>,
}

/// Cards alone, for a page to swap in (`GET /board/cards`).
#[derive(Template)]
#[template(path = "cards.html")]
pub struct Cards {
    pub cards: Vec<super::model::Card>,
}

#[derive(Template)]
#[template(path = "task.html")]
pub struct TaskPage {
    pub chrome: Chrome,
    pub task: Task,
    pub tags_text: String,
    pub statuses: Vec<(TaskStatus, &'static str)>,
    pub priorities: [u8; 5],
    pub has_graph: bool,
    pub graph: Graph,
    pub node_w: u32,
    pub node_h: u32,
    pub dependents_capped: bool,
    pub dependents_scan: usize,
}

/// A lease as the agents page shows it.
pub struct Lease {
    pub id: String,
    pub title: String,
    pub priority: u8,
    pub expires: Option<When>,
}

/// An agent (a key name or a member) and the leases it holds.
pub struct Holder {
    pub name: String,
    pub leases: Vec<Lease>,
}

#[derive(Template)]
#[template(path = "agents.html")]
pub struct Agents {
    pub chrome: Chrome,
    pub holders: Vec<Holder>,
    pub capped: bool,
    pub scan: usize,
    /// Name, created, active.
    pub keys: Vec<(String, When, &'static str)>,
}

pub struct InsightsView {
    pub computed_at: When,
    /// The days the figures cover: the last thirty, or those since the
    /// org was created when it is younger.
    pub window_days: u32,
    pub since_created: bool,
    pub completed: u64,
    pub failed: u64,
    pub per_day: String,
    pub stuck: u64,
    pub churning: u64,
    pub charts: Vec<BarChart>,
}

pub struct StandupView {
    pub headline: String,
    pub body: String,
    pub charts: Vec<BarChart>,
}

#[derive(Template)]
#[template(path = "insights.html")]
pub struct Insights {
    pub chrome: Chrome,
    pub insights: Option<InsightsView>,
    pub insights_unavailable: Option<String>,
    pub standup: Option<StandupView>,
    pub standup_unavailable: Option<String>,
}

#[derive(Template)]
#[template(path = "org.html")]
pub struct Org {
    pub chrome: Chrome,
    /// Name, strict, default, description.
    pub tags: Vec<(String, &'static str, &'static str, Option<String>)>,
    /// Email, role, tags, seated.
    pub members: Vec<(String, &'static str, String, &'static str)>,
    /// Name, tags, description.
    pub teams: Vec<(String, String, Option<String>)>,
    pub teams_unavailable: Option<String>,
}
