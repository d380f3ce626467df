//! The other views: agents and their leases, reports as charts, and the
//! org's tags, members and teams (with the one admin form: a new tag).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use taskq_actors::api::{
    Headline, Insights as InsightsReport, InsightsAnswer, StandupAnswer, StandupReport,
    Unavailable, INSIGHTS_WINDOW_DAYS,
};
use taskq_actors::{EngineError, ErrorCode};

use super::calls::{
    call, Input, CREATE_TAGS, GET_INSIGHTS, GET_STANDUP, LIST_KEYS, LIST_MEMBERS, LIST_TAGS,
    LIST_TASKS, LIST_TEAMS,
};
use super::forms::{self, Form};
use super::model::Card;
use super::pages::{self, Agents, Holder, Insights, InsightsView, Lease, Org, StandupView};
use super::svg::BarChart;
use super::times::{self, When};
use super::{chrome, see_other, signed_in, writer, AppState, BoardError};

/// Leased tasks looked through for the agents page.
const LEASES_SCAN: usize = 200;

fn yes_no(yes: bool) -> &'static str {
    if yes {
        "yes"
    } else {
        "no"
    }
}

/// `GET /board/agents`: who holds which leases, until when; and the keys
/// of the signed-in member.
pub async fn agents(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, BoardError> {
    let session = signed_in(&state, &headers).await?;
    let caller = &session.caller;
    let query = vec![
        ("status".to_owned(), "in_progress".to_owned()),
        ("full".to_owned(), "true".to_owned()),
        ("limit".to_owned(), LEASES_SCAN.to_string()),
    ];
    let listed = call(&state, caller, LIST_TASKS, Input::Query(query)).await?;
    let capped = listed.next_cursor.is_some();
    let mut holders: Vec<Holder> = Vec::new();
    for task in listed.tasks.iter().map(Card::from) {
        let name = match task.assignee {
            Some(name) => name,
            None => "(nobody)".to_owned(),
        };
        let lease = Lease {
            id: task.id,
            title: task.title,
            priority: task.priority,
            expires: task.lease_expires_at,
        };
        match holders.iter_mut().find(|h| h.name == name) {
            Some(h) => h.leases.push(lease),
            None => holders.push(Holder {
                name,
                leases: vec![lease],
            }),
        }
    }
    holders.sort_by(|a, b| a.name.cmp(&b.name));
    let keys = call(&state, caller, LIST_KEYS, Input::None)
        .await?
        .keys
        .into_iter()
        .map(|k| (k.name, When::utc(k.created_at), yes_no(k.active)))
        .collect();
    let chrome = chrome(&state, &session, "agents");
    let nonce = chrome.nonce.clone();
    Ok(pages::page(
        StatusCode::OK,
        &nonce,
        &Agents {
            chrome,
            holders,
            capped,
            scan: LEASES_SCAN,
            keys,
        },
    ))
}

/// A report's answer as a page shows it: the report, or why there is
/// none. Only a plan without the feature is a reason; any other refusal
/// or failure is the page's.
enum Shown<T> {
    Report(T),
    Unavailable(String),
}

fn shown<R, T>(
    answer: Result<R, EngineError>,
    report: impl FnOnce(R) -> Result<T, Unavailable>,
) -> Result<Shown<T>, EngineError> {
    match answer {
        Ok(answer) => Ok(match report(answer) {
            Ok(report) => Shown::Report(report),
            Err(why) => Shown::Unavailable(format!("Not available yet ({}).", why.reason)),
        }),
        Err(e) if e.code() == ErrorCode::UpgradeRequired => Ok(Shown::Unavailable(e.body().error)),
        Err(e) => Err(e),
    }
}

impl<T> Shown<T> {
    fn split(self) -> (Option<T>, Option<String>) {
        match self {
            Shown::Report(report) => (Some(report), None),
            Shown::Unavailable(why) => (None, Some(why)),
        }
    }
}

fn insights_view(v: &InsightsReport) -> InsightsView {
    let cycle = &v.cycle_times;
    // Without a completed task there is no cycle time to draw.
    let cycle_hours: Vec<(&str, f64)> = [
        ("p50", cycle.p50_hours),
        ("p90", cycle.p90_hours),
        ("mean", cycle.mean_hours),
    ]
    .into_iter()
    .filter_map(|(label, hours)| Some((label, hours?)))
    .collect();
    let unit = times::unit_for(cycle_hours.iter().map(|(_, h)| *h).fold(0.0, f64::max));
    let cycle_bars: Vec<(String, f64)> = cycle_hours
        .into_iter()
        .map(|(label, hours)| (label.to_owned(), hours * unit.per_hour))
        .collect();
    let rates: Vec<(String, f64)> = v
        .failure_rates
        .iter()
        .map(|r| (r.tag.clone(), r.rate * 100.0))
        .collect();
    InsightsView {
        computed_at: When::utc(v.computed_at),
        window_days: v.window_days,
        since_created: v.window_days < INSIGHTS_WINDOW_DAYS,
        completed: v.throughput.completed,
        failed: v.throughput.failed,
        per_day: format!("{:.1}", v.throughput.per_day),
        stuck: v.stuck.count,
        churning: v.churning.count,
        charts: vec![
            BarChart::new(
                &format!("Cycle time ({}): median, 90th percentile, mean", unit.name),
                &cycle_bars,
                times::figure,
            ),
            BarChart::new("Failure rate by tag (%)", &rates, |p| format!("{p:.0}%")).when_empty(
                if v.throughput.completed + v.throughput.failed == 0 {
                    "No data yet"
                } else {
                    "No task failed in the window"
                },
            ),
        ],
    }
}

fn standup_view(v: &StandupReport) -> StandupView {
    // Oldest first: the history is newest first, the current report last.
    let reports: Vec<(&str, &Headline)> = v
        .history
        .iter()
        .rev()
        .map(|r| (r.period.as_str(), &r.headline))
        .chain([(v.period.as_str(), &v.headline)])
        .collect();
    let per = |figure: fn(&Headline) -> u64| -> Vec<(String, f64)> {
        reports
            .iter()
            .map(|(period, headline)| ((*period).to_owned(), figure(headline) as f64))
            .collect()
    };
    let h = &v.headline;
    StandupView {
        headline: format!(
            "{} {}: {} completed, {} failed, {} open, {} stuck",
            v.cadence.as_str(),
            v.period,
            h.completed,
            h.failed,
            h.open,
            h.stuck_count
        ),
        body: v.body.clone(),
        charts: vec![
            BarChart::new(
                "Throughput: completed per period",
                &per(|h| h.completed),
                |n| format!("{n:.0}"),
            ),
            BarChart::new("Failed per period", &per(|h| h.failed), |n| {
                format!("{n:.0}")
            }),
        ],
    }
}

/// `GET /board/insights`: insights and the latest standup as charts, once
/// computed (paid plans).
pub async fn insights(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, BoardError> {
    let session = signed_in(&state, &headers).await?;
    let caller = &session.caller;
    let insights = call(&state, caller, GET_INSIGHTS, Input::Query(vec![])).await;
    let (insights, insights_unavailable) = shown(insights, |answer| match answer {
        InsightsAnswer::Report(report) => Ok(insights_view(&report)),
        InsightsAnswer::Unavailable(why) => Err(why),
    })?
    .split();
    let daily = vec![("cadence".to_owned(), "daily".to_owned())];
    let standup = call(&state, caller, GET_STANDUP, Input::Query(daily)).await;
    let (standup, standup_unavailable) = shown(standup, |answer| match answer {
        StandupAnswer::Report(report) => Ok(standup_view(&report)),
        StandupAnswer::Unavailable(why) => Err(why),
    })?
    .split();
    let chrome = chrome(&state, &session, "insights");
    let nonce = chrome.nonce.clone();
    let page = Insights {
        chrome,
        insights_unavailable,
        standup_unavailable,
        insights,
        standup,
    };
    Ok(pages::page(StatusCode::OK, &nonce, &page))
}

/// `GET /board/org`: tags, members, teams (teams on paid plans).
pub async fn org(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, BoardError> {
    let session = signed_in(&state, &headers).await?;
    let caller = &session.caller;
    let tags = call(&state, caller, LIST_TAGS, Input::None).await?;
    let members = call(&state, caller, LIST_MEMBERS, Input::None).await?;
    let teams = call(&state, caller, LIST_TEAMS, Input::None).await;
    let (teams, teams_unavailable) = shown(teams, Ok)?.split();
    let chrome = chrome(&state, &session, "org");
    let nonce = chrome.nonce.clone();
    let page = Org {
        chrome,
        tags: tags
            .into_iter()
            .map(|t| {
                (
                    t.name,
                    yes_no(t.strict),
                    yes_no(t.is_default),
                    t.description,
                )
            })
            .collect(),
        members: members
            .into_iter()
            .map(|m| {
                let tags = [m.profile_tags, m.team_tags].concat().join(", ");
                (m.email, m.role.as_str(), tags, yes_no(m.seated))
            })
            .collect(),
        teams_unavailable,
        teams: teams
            .into_iter()
            .flatten()
            .map(|t| (t.name, t.tags.join(", "), t.description))
            .collect(),
    };
    Ok(pages::page(StatusCode::OK, &nonce, &page))
}

/// `POST /board/tags`: adds the form's tag (`POST /tags`, admins and
/// owners; the operation refuses anyone else).
pub async fn create_tag(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, BoardError> {
    let form = Form::parse(&body)?;
    let session = writer(&state, &headers, &form).await?;
    let request = Input::Body(forms::create_tag(&form));
    call(&state, &session.caller, CREATE_TAGS, request).await?;
    Ok(see_other("/board/org"))
}
