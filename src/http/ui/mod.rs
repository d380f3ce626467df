//! The operator page: `GET /admin/ui` (the login form, or the dashboard
//! for a signed-in operator), `POST /admin/ui/login` and `/admin/ui/logout`,
//! and `GET /admin/stats`, the figures the page polls (operator token or
//! page session).
//!
//! The engine assembles the figures (`Engine::operator_stats`); this module
//! renders them. Only the form and the dashboard are HTML: every refusal is
//! JSON like the rest of the API. Each HTML answer carries a
//! Content-Security-Policy that allows its own inline style and script (by
//! a per-response nonce), requests to this origin, and nothing else.

mod page;
pub(super) mod session;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use taskq_actors::api::OperatorStats;

use super::error::{ApiError, TOO_MANY_WRONG_TOKENS};
use super::extract::{query_pairs, OperatorOrSession};
use super::lockout::{Client, Refused};
use super::AppState;

use super::html::{html, nonce};

/// The operator token, or 404 as for every `/admin` route when none is set.
fn operator_token(state: &AppState) -> Result<&str, ApiError> {
    state
        .admin_token
        .as_deref()
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "not found"))
}

/// A redirect to the page after a form was handled.
fn back_to_page() -> Response {
    (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, HeaderValue::from_static("/admin/ui"))],
    )
        .into_response()
}

/// `GET /admin/ui`: the dashboard, or the login form (401) without a
/// session.
pub async fn page(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    operator_token(&state)?;
    let nonce = nonce();
    if !session::is_valid(&state.engine, &headers).await? {
        return Ok(html(
            StatusCode::UNAUTHORIZED,
            &nonce,
            page::login(&nonce, None),
        ));
    }
    let stats = state.engine.operator_stats().await;
    Ok(html(
        StatusCode::OK,
        &nonce,
        page::dashboard(&nonce, &stats),
    ))
}

/// The sign-in form's fields.
#[derive(schemars::JsonSchema)]
#[allow(dead_code)] // only its schema is used; the form is read by `login`
pub struct LoginForm {
    /// The operator token.
    token: String,
}

/// `POST /admin/ui/login` (form `token=...`): the right token opens a
/// session and goes back to the page; a wrong one shows the form again.
pub async fn login(
    State(state): State<AppState>,
    Client(client): Client,
    body: Bytes,
) -> Result<Response, ApiError> {
    let expected = operator_token(&state)?;
    let form =
        std::str::from_utf8(&body).map_err(|_| ApiError::bad_request("the form must be UTF-8"))?;
    let given = query_pairs(form)?
        .into_iter()
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v)
        .unwrap_or_default();
    if let Err(refused) = state.operator_attempts.check(client, &given, expected) {
        let nonce = nonce();
        return Ok(match refused {
            Refused::WrongToken => html(
                StatusCode::UNAUTHORIZED,
                &nonce,
                page::login(&nonce, Some("invalid operator token")),
            ),
            Refused::TooMany { retry_after } => {
                let mut form = html(
                    StatusCode::TOO_MANY_REQUESTS,
                    &nonce,
                    page::login(&nonce, Some(TOO_MANY_WRONG_TOKENS)),
                );
                form.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
                form
            }
        });
    }
    let id = state.engine.open_operator_session().await?;
    let mut response = back_to_page();
    let (name, value) = session::set_cookie(&id, state.secure_cookies);
    response.headers_mut().insert(name, value);
    Ok(response)
}

/// `POST /admin/ui/logout`: ends the session and removes the cookie.
pub async fn logout(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    operator_token(&state)?;
    session::close(&state.engine, &headers).await?;
    let mut response = back_to_page();
    let (name, value) = session::clear_cookie(state.secure_cookies);
    response.headers_mut().insert(name, value);
    Ok(response)
}

/// `GET /admin/stats`: the operator's figures.
pub async fn stats(State(state): State<AppState>, _: OperatorOrSession) -> Json<OperatorStats> {
    Json(state.engine.operator_stats().await)
}
