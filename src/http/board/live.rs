//! What keeps the board's pages current without a reload or a poll.
//!
//! `GET /board/events` is the org's event stream (`GET /events`, CONTRACT
//! §10) for the session's caller: the same engine call, filters, resume by
//! `Last-Event-ID` and limits, since a browser's `EventSource` can send the
//! session cookie but no key. Its events carry ids and statuses only, so
//! the page asks for what to show: `GET /board/cards` answers the cards of
//! the tasks that changed, rendered and escaped here as the board renders
//! them, and only those the page's filters keep; a page redraws those
//! cards and its column counts, nothing else. A first page that holds
//! only the first tasks of its list says where it ends (`until`, the list
//! key of its last task): a changed task is on it when it sorts there,
//! which is the window its next page goes on from.
//!
//! A page is made after reading the org's newest event id
//! (`Engine::org_last_event_id`), which it opens its stream from: a change
//! committed between the page and its stream is replayed, not lost.

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use taskq_actors::api::{decode_query, GetAnswer, ListTasks, TaskView};
use taskq_actors::domain::order::ListKey;

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

/// The parameter saying where a first page of its list ends.
pub const UNTIL: &str = "until";

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
    let until = match params.iter().find(|(k, _)| k == UNTIL) {
        Some((_, text)) => Some(parse_until(text).ok_or(BoardError::BadForm)?),
        None => None,
    };
    let filters = params
        .into_iter()
        .filter(|(k, v)| FILTERS.contains(&k.as_str()) && !v.trim().is_empty())
        .collect();
    let filters: ListTasks = decode_query(filters).map_err(|_| BoardError::BadForm)?;
    let request = serde_json::json!({ "task_ids": ids });
    let found: GetAnswer = call(&state, &session.caller, GET_TASKS, Input::Body(request)).await?;
    let now = state.engine.now_ms();
    let cards = shown(&filters, until.as_ref(), &found, now);
    let nonce = pages::nonce();
    Ok(pages::page(StatusCode::OK, &nonce, &Cards { cards }))
}

/// The cards of the tasks found that the board's filters keep at `now`,
/// and that sort no later than `until` when the page ends there.
fn shown(filters: &ListTasks, until: Option<&ListKey>, found: &GetAnswer, now: i64) -> Vec<Card> {
    found
        .tasks
        .iter()
        .map(|detail| &detail.task)
        .filter(|task| filters.matches_view(task, now))
        .filter(|task| until.is_none_or(|until| list_key(task) <= *until))
        .map(|task| Card::at(task, now))
        .collect()
}

/// Where a task stands in list order.
pub fn list_key(t: &TaskView) -> ListKey {
    ListKey::new(t.status, t.priority, t.created_at.0, t.task_id)
}

/// A list key as a page carries it: `rank.priority.created_at.task_id`.
pub fn until_text(key: &ListKey) -> String {
    format!(
        "{}.{}.{}.{}",
        key.rank, key.priority, key.created_at, key.task_id
    )
}

fn parse_until(text: &str) -> Option<ListKey> {
    let mut parts = text.split('.');
    let key = ListKey {
        rank: parts.next()?.parse().ok()?,
        priority: parts.next()?.parse().ok()?,
        created_at: parts.next()?.parse().ok()?,
        task_id: parts.next()?.parse().ok()?,
    };
    parts.next().is_none().then_some(key)
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
        assert_eq!(ids(&shown(&filters(&[]), None, &found, now)), ['a', 'b']);
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
                ids(&shown(&filters(&query), None, &found, now)),
                kept,
                "{query:?}"
            );
        }
    }

    #[test]
    fn a_card_shows_its_run_at_only_while_it_is_ahead() {
        let now = 1_800_000_000_000;
        let cards = shown(&filters(&[]), None, &found(now), now);
        assert!(cards[0].run_at.is_some());
        assert_eq!(cards[1].run_at, None);
        let later = shown(&filters(&[]), None, &found(now), now + 120_000);
        assert_eq!(later[0].run_at, None);
    }

    #[test]
    fn a_first_page_keeps_only_the_cards_that_sort_where_it_ends() {
        let now = 1_800_000_000_000;
        let found = found(now);
        let a = list_key(&found.tasks[0].task);
        let b = list_key(&found.tasks[1].task);
        // Open work first: the pending task sorts before the completed one.
        assert!(a < b);
        let text = until_text(&a);
        assert_eq!(parse_until(&text), Some(a));
        assert_eq!(ids(&shown(&filters(&[]), Some(&a), &found, now)), ['a']);
        assert_eq!(
            ids(&shown(&filters(&[]), Some(&b), &found, now)),
            ['a', 'b']
        );
        for bad in [
            "",
            "0.3.1",
            "x.3.1.00000000-0000-7000-8000-00000000000a",
            &format!("{text}.1"),
        ] {
            assert_eq!(parse_until(bad), None, "{bad}");
        }
    }
}
