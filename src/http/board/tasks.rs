//! The tasks: the board of columns, one task's page, and their forms.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::json;
use taskq_actors::api::{ItemError, SearchAnswer, TaskDetail, UpdateResult};
use taskq_actors::domain::mark::ChangeMark;

use super::super::extract::query_pairs;
use super::calls::{call, Input, CREATE_TASKS, GET_TASKS, LIST_TASKS, SEARCH_TASKS, UPDATE_TASKS};
use super::forms::{self, Form};
use super::lists::{self, Listed};
use super::model::{self, Card, Found, Scope, Task};
use super::pages::{self, Filters, Search, TaskPage, Tasks, PRIORITIES};
use super::svg::{Graph, GraphTask, NODE_H, NODE_W};
use super::{chrome, see_other, signed_in, writer, AppState, BoardError};

/// Tasks on one page of the board.
const PAGE: usize = 200;
/// Search results shown.
const FOUND: usize = 25;
/// Tasks looked through for a task's dependents.
const DEPENDENTS_SCAN: usize = 200;

/// What a query value or a path segment keeps unencoded (RFC 3986's
/// unreserved characters).
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

fn enc(s: &str) -> String {
    utf8_percent_encode(s, UNRESERVED).to_string()
}

fn value(pairs: &[(String, String)], name: &str) -> String {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default()
}

/// The board's filters in a query.
pub(super) fn filters_of(pairs: &[(String, String)]) -> Filters {
    Filters {
        status: value(pairs, "status"),
        tags: forms::list(&value(pairs, "tags")).join(","),
        assignee: value(pairs, "assignee"),
        priority_max: value(pairs, "priority_max"),
        q: value(pairs, "q"),
    }
}

/// `GET /board/tasks`: the org's tasks in columns by status, open work
/// first; filtered, searched by meaning, a page at a time.
pub async fn board(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, BoardError> {
    let session = signed_in(&state, &headers).await?;
    let pairs = query_pairs(query.as_deref().unwrap_or("")).map_err(|_| BoardError::BadForm)?;
    let filters = filters_of(&pairs);
    let cursor = value(&pairs, "cursor");
    // The list's own parameters, and the board's link to the same filters.
    let mut list = vec![("limit".to_owned(), PAGE.to_string())];
    let mut link = String::new();
    for (name, value) in [
        ("status", &filters.status),
        ("tags", &filters.tags),
        ("assignee", &filters.assignee),
        ("priority_max", &filters.priority_max),
    ] {
        if !value.is_empty() {
            list.push((name.to_owned(), value.clone()));
            link.push_str(&format!("{name}={}&", enc(value)));
        }
    }
    if !filters.q.is_empty() {
        link.push_str(&format!("q={}&", enc(&filters.q)));
    }
    if !cursor.is_empty() {
        list.push(("cursor".to_owned(), cursor.clone()));
    }
    let caller = &session.caller;
    let listed = listed(&state, caller, list, lists::wanted(&headers)).await?;
    let cards = listed.cards.clone();
    let search_off = state.engine.search_unavailable(caller).await?;
    let search = match (filters.q.is_empty(), &search_off) {
        (true, _) => None,
        (false, Some(why)) => Some(Search {
            unavailable: Some(why.reason.clone().into_owned()),
            found: Vec::new(),
        }),
        (false, None) => {
            let request = json!({ "query": filters.q, "limit": FOUND });
            Some(
                match call(&state, caller, SEARCH_TASKS, Input::Body(request)).await? {
                    SearchAnswer::Results { results } => Search {
                        unavailable: None,
                        found: results.iter().map(Found::from).collect(),
                    },
                    SearchAnswer::Unavailable(why) => Search {
                        unavailable: Some(why.reason.into_owned()),
                        found: Vec::new(),
                    },
                },
            )
        }
    };
    let next_page = listed
        .next_cursor
        .as_deref()
        .map(|c| format!("/board/tasks?{link}cursor={}", enc(c)));
    let first_page = (!cursor.is_empty()).then(|| format!("/board/tasks?{link}"));
    let scope = Scope {
        statuses: forms::list(&filters.status),
        narrowed: !(filters.tags.is_empty()
            && filters.assignee.is_empty()
            && filters.priority_max.is_empty()),
        whole: cursor.is_empty() && listed.next_cursor.is_none(),
    };
    let counts = state.engine.org_open_counts(caller.org_id);
    let chrome = chrome(&state, &session, "tasks");
    let nonce = chrome.nonce.clone();
    Ok(pages::page(
        StatusCode::OK,
        &nonce,
        &Tasks {
            chrome,
            filters,
            statuses: pages::status_options(),
            priorities: PRIORITIES,
            open_create: cards.is_empty(),
            search_offered: search_off.is_none(),
            search,
            shown: cards.len(),
            columns: model::columns(cards, counts, &scope),
            first_page,
            next_page,
        },
    ))
}

/// The tasks a page lists: for a fetch after a notice (`wanted`), a list
/// another board of the org read since that notice, if there is one; else
/// read now through `GET /tasks`, and kept for the boards that fetch after
/// it.
async fn listed(
    state: &AppState,
    caller: &taskq_actors::Caller,
    query: Vec<(String, String)>,
    wanted: Option<ChangeMark>,
) -> Result<Arc<Listed>, BoardError> {
    let org = caller.org_id;
    let key = query
        .iter()
        .map(|(name, value)| format!("{}={}&", enc(name), enc(value)))
        .collect::<String>();
    if let Some(shared) = wanted.and_then(|w| state.board_lists.get(org, &key, w)) {
        state.engine.admit_read(caller).await?;
        return Ok(shared);
    }
    // Read before the list: the notices up to it named only what is
    // committed by now.
    let read_after = state.engine.board_noticed_mark(org);
    let answer = call(state, caller, LIST_TASKS, Input::Query(query)).await?;
    let listed = Arc::new(Listed {
        cards: answer.tasks.iter().map(Card::from).collect(),
        next_cursor: answer.next_cursor,
    });
    if let Some(read_after) = read_after {
        state
            .board_lists
            .put(org, key, read_after, Arc::clone(&listed));
    }
    Ok(listed)
}

/// `POST /board/tasks`: creates the form's task (`POST /tasks`) and shows it.
pub async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, BoardError> {
    let form = Form::parse(&body)?;
    let session = writer(&state, &headers, &form).await?;
    let request = forms::create_task(&form);
    let created = call(&state, &session.caller, CREATE_TASKS, Input::Body(request)).await?;
    match created.results.first() {
        Some(task) => Ok(see_other(&format!("/board/tasks/{}", task.task_id))),
        None => Ok(see_other("/board/tasks")),
    }
}

/// Tasks by id through `POST /tasks/get`: those the org has.
pub(super) async fn get_tasks(
    state: &AppState,
    session: &super::Session,
    ids: &[String],
) -> Result<Vec<TaskDetail>, BoardError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let request = json!({ "task_ids": ids });
    let found = call(state, &session.caller, GET_TASKS, Input::Body(request)).await?;
    Ok(found.tasks)
}

/// `GET /board/tasks/{task_id}`: the task, its history as a timeline, its
/// blockers and dependents as a graph, its lease, and the forms that
/// change it. Another org's task is not found, as on the API.
pub async fn task(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(task_id): Path<String>,
) -> Result<Response, BoardError> {
    let session = signed_in(&state, &headers).await?;
    let found = get_tasks(&state, &session, std::slice::from_ref(&task_id)).await?;
    let Some(detail) = found.first() else {
        return Err(BoardError::NotFound);
    };
    let task = Task::from(detail);
    // The blockers' titles (the task lists only their ids and statuses).
    let blocker_ids: Vec<String> = task.dependencies.iter().map(|(id, _)| id.clone()).collect();
    let blockers: Vec<GraphTask> = get_tasks(&state, &session, &blocker_ids)
        .await?
        .iter()
        .map(|b| {
            let b = &b.task;
            (b.task_id.to_string(), model::text(&b.title), b.status)
        })
        .collect();
    // Its dependents: the tasks whose blockers name it, among the first of
    // the list (open work first, so every blocked dependent while the list
    // holds fewer open tasks than that).
    let list = vec![("limit".to_owned(), DEPENDENTS_SCAN.to_string())];
    let listed = call(&state, &session.caller, LIST_TASKS, Input::Query(list)).await?;
    let dependents: Vec<GraphTask> = listed
        .tasks
        .iter()
        .map(Card::from)
        .filter(|c| c.blocked_by.contains(&task.id))
        .map(|c| (c.id, c.title, c.status))
        .collect();
    let dependents_capped = listed.next_cursor.is_some();
    let has_graph = !blockers.is_empty() || !dependents.is_empty();
    let graph = Graph::new(
        (task.id.clone(), task.title.clone(), task.status),
        blockers,
        dependents,
    );
    let chrome = chrome(&state, &session, "tasks");
    let nonce = chrome.nonce.clone();
    Ok(pages::page(
        StatusCode::OK,
        &nonce,
        &TaskPage {
            chrome,
            tags_text: task.tags.join(", "),
            task,
            statuses: pages::status_options(),
            priorities: PRIORITIES,
            has_graph,
            graph,
            node_w: NODE_W,
            node_h: NODE_H,
            dependents_capped,
            dependents_scan: DEPENDENTS_SCAN,
        },
    ))
}

/// `POST /board/tasks/{task_id}/update`: one item of `POST /tasks/update`
/// from the task's forms; an item that fails says why on a page (409).
pub async fn update(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(task_id): Path<String>,
    body: Bytes,
) -> Result<Response, BoardError> {
    let form = Form::parse(&body)?;
    let session = writer(&state, &headers, &form).await?;
    let request = forms::update_task(&task_id, &form);
    let updated = call(&state, &session.caller, UPDATE_TASKS, Input::Body(request)).await?;
    if let Some(UpdateResult::Failed { error, .. }) = updated.results.first() {
        let status = match error {
            ItemError::TaskNotFound => StatusCode::NOT_FOUND,
            ItemError::InvalidTransition | ItemError::AssigneeRequired | ItemError::LeaseLost => {
                StatusCode::CONFLICT
            }
        };
        return Err(BoardError::Api(super::ApiError::new(
            status,
            error.as_str(),
        )));
    }
    Ok(see_other(&format!("/board/tasks/{}", enc(&task_id))))
}
