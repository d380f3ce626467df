//! Signing in and out of the board.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use taskq_actors::EngineError;

use super::forms::Form;
use super::pages::{self, Login};
use super::{see_other, session, writer, AppState, BoardError};

fn login_form(status: StatusCode, error: Option<&'static str>) -> Response {
    let nonce = pages::nonce();
    let form = Login {
        nonce: nonce.clone(),
        css: pages::CSS,
        error,
    };
    pages::page(status, &nonce, &form)
}

/// `GET /board`: the sign-in form, or the board for a signed-in member.
pub async fn sign_in(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match session::current(&state.engine, &headers).await {
        Ok(Some(_)) => see_other("/board/tasks"),
        _ => login_form(StatusCode::OK, None),
    }
}

/// `POST /board/login` (form `api_key`): a working key opens a session and
/// goes to the board; the key itself is never stored or sent back.
pub async fn login(State(state): State<AppState>, body: Bytes) -> Result<Response, BoardError> {
    let form = Form::parse(&body)?;
    let key = form.text("api_key").unwrap_or_default();
    match state.engine.open_board_session(&key).await {
        Ok((id, _caller)) => {
            let mut response = see_other("/board/tasks");
            let (name, value) = session::set_cookie(&id, state.secure_cookies);
            response.headers_mut().insert(name, value);
            Ok(response)
        }
        Err(EngineError::InvalidApiKey) => Ok(login_form(
            StatusCode::UNAUTHORIZED,
            Some("invalid api key"),
        )),
        Err(EngineError::OrgSuspended) => Ok(login_form(
            StatusCode::FORBIDDEN,
            Some("organization suspended"),
        )),
        Err(e) => Err(e.into()),
    }
}

/// `POST /board/logout` (form `csrf`): ends the session on every node and
/// removes the cookie.
pub async fn logout(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, BoardError> {
    let form = Form::parse(&body)?;
    let session = writer(&state, &headers, &form).await?;
    state.engine.close_board_session(&session.id).await?;
    let mut response = see_other("/board");
    let (name, value) = session::clear_cookie(state.secure_cookies);
    response.headers_mut().insert(name, value);
    Ok(response)
}
