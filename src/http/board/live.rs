//! What keeps the board's pages current without a reload or a poll.
//!
//! `GET /board/events` is the org's event stream (`GET /events`, CONTRACT
//! §10) for the session's caller: the same engine call, filters, resume by
//! `Last-Event-ID` and limits, since a browser's `EventSource` can send the
//! session cookie but no key. Its events carry ids and statuses only, so
//! the page asks for what to show: `GET /board/cards` answers the cards of
//! the tasks that changed, rendered and escaped here as the board renders
//! them, and only those the page's filters keep; a page redraws those
//! cards and its column counts, nothing else.
//!
//! A page is made after reading the org's newest event id
//! (`Engine::org_last_event_id`), which it opens its stream from: a change
//! committed between the page and its stream is replayed, not lost.

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use taskq_actors::api::{decode_query, GetAnswer, ListTasks};

use super::super::operation::query_params;
use super::super::watch::stream_for;
use super::super::ApiError;
use super::calls::{call, Input, GET_TASKS};
use super::model::Card;
use super::pages::{self, Cards};
use super::{session, AppState, BoardError};

/// The filters of the board a card request carries (the rest of a list
/// query, paging and search, are the page's own).
const FILTERS: [&str; 4] = ["status", "tags", "assignee", "priority_max"];

/// The parameter naming the tasks whose cards are asked for.
const TASK_IDS: &str = "task_id";

/// Tasks per card request: what one `POST /tasks/get` takes.
pub const MAX_CARDS: usize = 25;

fn no_session() -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "sign in to the board first")
}

/// `GET /board/events`: the org's event stream for the signed-in member.
pub async fn events(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let Some(session) = session::current(&state.engine, &headers).await? else {
        return Err(no_session());
    };
    stream_for(&state, &session.caller, query.as_deref(), &headers).await
}

/// `GET /board/cards?task_id=a,b&status=...`: the cards of those tasks
/// that the org has and the filters keep, as a list (`ul#cards`); a task
/// missing from it is to leave the page.
pub async fn cards(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, BoardError> {
    let Some(session) = session::current(&state.engine, &headers).await? else {
        return Err(no_session().into());
    };
    let params = query_params(query.as_deref())?;
    let ids: Vec<String> = params
        .iter()
        .filter(|(k, _)| k == TASK_IDS)
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .collect();
    if ids.is_empty() || ids.len() > MAX_CARDS {
        return Err(BoardError::BadForm);
    }
    let filters = params
        .into_iter()
        .filter(|(k, v)| FILTERS.contains(&k.as_str()) && !v.trim().is_empty())
        .collect();
    let filters: ListTasks = decode_query(filters).map_err(|_| BoardError::BadForm)?;
    let request = serde_json::json!({ "task_ids": ids });
    let found: GetAnswer = call(&state, &session.caller, GET_TASKS, Input::Body(request)).await?;
    let now = state.engine.now_ms();
    let cards = shown(&filters, &found, now);
    let nonce = pages::nonce();
    Ok(pages::page(StatusCode::OK, &nonce, &Cards { cards }))
}

/// The cards of the tasks found that the board's filters keep at `now`.
fn shown(filters: &ListTasks, found: &GetAnswer, now: i64) -> Vec<Card> {
    found
        .tasks
        .iter()
        .map(|detail| &detail.task)
        .filter(|task| filters.matches_view(task, now))
        .map(|task| Card::at(task, now))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn filters(pairs: &[(&str, &str)]) -> ListTasks {
        decode_query(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
        .unwrap()
    }

    fn found(now: i64) -> GetAnswer {
        let task = |id: &str, status: &str, priority: u8, tags: &[&str], run_at: Option<i64>| {
            json!({
                "task_id": id, "title": format!("task {id}"), "description": null,
                "status": status, "priority": priority, "assignee": "ann@example.com",
                "tags": tags, "metadata": {}, "output": null, "blocked_by": [],
                "parent_task_id": null,
                "created_at": taskq_actors::clock::format_ms(now - 1000),
                "updated_at": taskq_actors::clock::format_ms(now - 1000),
                "attempts": 0, "max_attempts": 3, "lease": null,
                "run_at": run_at.map(taskq_actors::clock::format_ms),
                "retries": 0, "dependencies": [],
            })
        };
        serde_json::from_value(json!({ "tasks": [
            task("00000000-0000-7000-8000-00000000000a", "pending", 1, &["api"], Some(now + 60_000)),
            task("00000000-0000-7000-8000-00000000000b", "completed", 4, &["ui"], Some(now - 60_000)),
        ], "count": 2, "not_found": [] }))
        .expect("a get answer")
    }

    fn ids(cards: &[Card]) -> Vec<char> {
        cards.iter().map(|c| c.id.chars().last().unwrap()).collect()
    }

    #[test]
    fn a_changed_task_keeps_its_card_only_where_the_filters_list_it() {
        let now = 1_800_000_000_000;
        let found = found(now);
        assert_eq!(ids(&shown(&filters(&[]), &found, now)), ['a', 'b']);
        for (query, kept) in [
            (vec![("status", "pending")], vec!['a']),
            (vec![("status", "completed,failed")], vec!['b']),
            (vec![("tags", "ui,docs")], vec!['b']),
            (vec![("priority_max", "2")], vec!['a']),
            (vec![("assignee", "ann@example.com")], vec!['a', 'b']),
            (vec![("assignee", "bob@example.com")], vec![]),
            (vec![("status", "pending"), ("tags", "ui")], vec![]),
        ] {
            assert_eq!(
                ids(&shown(&filters(&query), &found, now)),
                kept,
                "{query:?}"
            );
        }
    }

    #[test]
    fn a_card_shows_its_run_at_only_while_it_is_ahead() {
        let now = 1_800_000_000_000;
        let cards = shown(&filters(&[]), &found(now), now);
        assert!(cards[0].run_at.is_some());
        assert_eq!(cards[1].run_at, None);
        let later = shown(&filters(&[]), &found(now), now + 120_000);
        assert_eq!(later[0].run_at, None);
    }
}
