//! `GET /board/cards?ids=…`: the cards of a few tasks, as the board's
//! columns show them, for a page that the board's stream told which of
//! its cards changed. It answers those that still belong on the page
//! (the page's own filters come along in the query), each in its status,
//! so the page moves them to their column and drops the others, instead
//! of fetching itself whole. The tasks are read through `POST /tasks/get`,
//! counted as reads like every other fetch of the board.

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use taskq_actors::api::TaskDetail;
use taskq_actors::BOARD_MAX_IDS as MAX_IDS;

use super::super::extract::query_pairs;
use super::forms;
use super::model::Card;
use super::pages::{self, Cards, Filters};
use super::tasks::{filters_of, get_tasks};
use super::{signed_in, AppState, BoardError};

/// Ids one `POST /tasks/get` takes.
const GET_MAX: usize = 25;

pub async fn cards(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, BoardError> {
    let session = signed_in(&state, &headers).await?;
    let pairs = query_pairs(query.as_deref().unwrap_or("")).map_err(|_| BoardError::BadForm)?;
    let filters = filters_of(&pairs);
    let ids = pairs
        .iter()
        .find(|(k, _)| k == "ids")
        .map(|(_, v)| forms::list(v))
        .unwrap_or_default();
    if ids.is_empty() || ids.len() > MAX_IDS {
        return Err(BoardError::BadForm);
    }
    let now = state.engine.board_now();
    let mut cards = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(GET_MAX) {
        let found = get_tasks(&state, &session, chunk).await?;
        cards.extend(
            found
                .iter()
                .map(|detail| card(detail, now))
                .filter(|c| keeps(&filters, c)),
        );
    }
    let nonce = pages::nonce();
    Ok(pages::page(StatusCode::OK, &nonce, &Cards { cards }))
}

/// A whole task as a column's card: its `run_at` only while it waits, as
/// the list's lean items carry it.
fn card(detail: &TaskDetail, now: i64) -> Card {
    let task = &detail.task;
    let mut card = Card::from(task);
    card.run_at = task
        .run_at
        .filter(|at| at.0 > now && task.status == taskq_actors::domain::TaskStatus::Pending)
        .map(super::times::When::utc);
    card
}

/// Whether the page's filters keep the card, as `GET /tasks` applies them:
/// one of the statuses, one of the tags, the assignee, the priority up to.
fn keeps(filters: &Filters, card: &Card) -> bool {
    let listed = |list: &str| forms::list(list);
    let statuses = listed(&filters.status);
    let tags = listed(&filters.tags);
    (statuses.is_empty() || statuses.iter().any(|s| s == card.status.as_str()))
        && (tags.is_empty() || tags.iter().any(|t| card.tags.contains(t)))
        && (filters.assignee.is_empty() || card.assignee.as_deref() == Some(&filters.assignee))
        && filters
            .priority_max
            .parse::<u8>()
            .map_or(true, |max| card.priority <= max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskq_actors::domain::TaskStatus;

    fn card(status: TaskStatus, priority: u8, tags: &[&str], assignee: Option<&str>) -> Card {
        Card {
            id: "a".into(),
            title: "t".into(),
            status,
            priority,
            assignee: assignee.map(str::to_owned),
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            blocked_by: Vec::new(),
            lease_expires_at: None,
            run_at: None,
        }
    }

    #[test]
    fn the_pages_filters_keep_the_cards_the_list_would() {
        let any = Filters::default();
        let c = card(TaskStatus::InProgress, 3, &["api", "ui"], Some("dana"));
        assert!(keeps(&any, &c));
        let with = |f: fn(&mut Filters)| {
            let mut filters = Filters::default();
            f(&mut filters);
            keeps(&filters, &c)
        };
        assert!(with(|f| f.status = "in_progress".into()));
        assert!(with(|f| f.status = "pending,in_progress".into()));
        assert!(!with(|f| f.status = "pending".into()));
        assert!(with(|f| f.tags = "docs,ui".into()));
        assert!(!with(|f| f.tags = "docs".into()));
        assert!(with(|f| f.assignee = "dana".into()));
        assert!(!with(|f| f.assignee = "eve".into()));
        assert!(with(|f| f.priority_max = "3".into()));
        assert!(!with(|f| f.priority_max = "2".into()));
    }
}
