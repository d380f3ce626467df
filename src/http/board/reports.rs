//! The other views: agents and their leases, reports as charts, and the
//! org's tags, members and teams (with the one admin form: a new tag).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::Value;

use super::calls::{call, Answer, Input};
use super::forms::{self, Form};
use super::model::text;
use super::pages::{self, Agents, Holder, Insights, InsightsView, Lease, Org, StandupView};
use super::svg::BarChart;
use super::{chrome, see_other, signed_in, writer, AppState, BoardError};

/// Leased tasks looked through for the agents page.
const LEASES_SCAN: usize = 200;

fn items(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

/// The text of a list of strings.
fn joined(v: &Value) -> String {
    items(v).iter().map(text).collect::<Vec<_>>().join(", ")
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
    let Answer { body, .. } =
        call(&state, caller, "list_tasks", vec![], Input::Query(query)).await?;
    let capped = !body["next_cursor"].is_null();
    let mut holders: Vec<Holder> = Vec::new();
    for t in items(&body["tasks"]) {
        let name = t["assignee"].as_str().unwrap_or("(nobody)").to_owned();
        let lease = Lease {
            id: text(&t["task_id"]),
            title: text(&t["title"]),
            priority: t["priority"].as_u64().unwrap_or(3),
            expires: t["lease_expires_at"].as_str().map(str::to_owned),
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
    let Answer { body, .. } = call(&state, caller, "list_keys", vec![], Input::None).await?;
    let keys = items(&body["keys"])
        .iter()
        .map(|k| {
            (
                text(&k["name"]),
                text(&k["created_at"]),
                if k["active"] == true { "yes" } else { "no" }.to_owned(),
            )
        })
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

/// Why a report is not shown: the operation's refusal (a plan without
/// it) or its `{available: false, reason}`.
fn unavailable(answer: &Result<Answer, super::ApiError>) -> Option<String> {
    match answer {
        Err(e) => Some(e.status_and_message().1.to_owned()),
        Ok(a) if a.body["available"] == false => {
            Some(format!("Not available yet ({}).", text(&a.body["reason"])))
        }
        Ok(_) => None,
    }
}

fn insights_view(v: &Value) -> InsightsView {
    let hours = |x: &Value| x.as_f64().unwrap_or(0.0);
    let cycle = &v["cycle_times"];
    let rates: Vec<(String, f64)> = items(&v["failure_rates"])
        .iter()
        .map(|r| (text(&r["tag"]), r["rate"].as_f64().unwrap_or(0.0) * 100.0))
        .collect();
    let throughput = &v["throughput"];
    InsightsView {
        computed_at: text(&v["computed_at"]),
        window_days: v["window_days"].as_u64().unwrap_or(0),
        completed: throughput["completed"].as_u64().unwrap_or(0),
        failed: throughput["failed"].as_u64().unwrap_or(0),
        per_day: format!("{:.1}", throughput["per_day"].as_f64().unwrap_or(0.0)),
        stuck: v["stuck"]["count"].as_u64().unwrap_or(0),
        churning: v["churning"]["count"].as_u64().unwrap_or(0),
        charts: vec![
            BarChart::new(
                "Cycle time (hours): median, 90th percentile, mean",
                &[
                    ("p50".into(), hours(&cycle["p50_hours"])),
                    ("p90".into(), hours(&cycle["p90_hours"])),
                    ("mean".into(), hours(&cycle["mean_hours"])),
                ],
                |h| format!("{h:.1}"),
            ),
            BarChart::new("Failure rate by tag (%)", &rates, |p| format!("{p:.0}%")),
        ],
    }
}

fn standup_view(v: &Value) -> StandupView {
    // Oldest first: the history is newest first, the current report last.
    let mut reports: Vec<&Value> = v["history"]
        .as_array()
        .map(|a| a.iter().rev().collect())
        .unwrap_or_default();
    reports.push(v);
    let per = |field: &str| -> Vec<(String, f64)> {
        reports
            .iter()
            .map(|r| {
                (
                    text(&r["period"]),
                    r["headline"][field].as_f64().unwrap_or(0.0),
                )
            })
            .collect()
    };
    let h = &v["headline"];
    StandupView {
        headline: format!(
            "{} {}: {} completed, {} failed, {} open, {} stuck",
            text(&v["cadence"]),
            text(&v["period"]),
            h["completed"],
            h["failed"],
            h["open"],
            h["stuck_count"]
        ),
        body: text(&v["body"]),
        charts: vec![
            BarChart::new("Throughput: completed per period", &per("completed"), |n| {
                format!("{n:.0}")
            }),
            BarChart::new("Failed per period", &per("failed"), |n| format!("{n:.0}")),
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
    let insights = call(&state, caller, "get_insights", vec![], Input::Query(vec![])).await;
    let daily = vec![("cadence".to_owned(), "daily".to_owned())];
    let standup = call(&state, caller, "get_standup", vec![], Input::Query(daily)).await;
    let chrome = chrome(&state, &session, "insights");
    let nonce = chrome.nonce.clone();
    let page = Insights {
        chrome,
        insights_unavailable: unavailable(&insights),
        standup_unavailable: unavailable(&standup),
        insights: insights
            .ok()
            .filter(|a| a.body["available"] != false)
            .map(|a| insights_view(&a.body)),
        standup: standup
            .ok()
            .filter(|a| a.body["available"] != false)
            .map(|a| standup_view(&a.body)),
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
    let Answer { body: tags, .. } = call(&state, caller, "list_tags", vec![], Input::None).await?;
    let Answer { body: members, .. } =
        call(&state, caller, "list_members", vec![], Input::None).await?;
    let teams = call(&state, caller, "list_teams", vec![], Input::None).await;
    let yes_no = |v: &Value| if *v == true { "yes" } else { "no" }.to_owned();
    let chrome = chrome(&state, &session, "org");
    let nonce = chrome.nonce.clone();
    let page = Org {
        chrome,
        tags: items(&tags)
            .iter()
            .map(|t| {
                (
                    text(&t["name"]),
                    yes_no(&t["strict"]),
                    yes_no(&t["default"]),
                    text(&t["description"]),
                )
            })
            .collect(),
        members: items(&members)
            .iter()
            .map(|m| {
                let mut tags = items(&m["profile_tags"]);
                tags.extend(items(&m["team_tags"]));
                (
                    text(&m["email"]),
                    text(&m["role"]),
                    joined(&Value::Array(tags)),
                    yes_no(&m["seated"]),
                )
            })
            .collect(),
        teams_unavailable: teams
            .as_ref()
            .err()
            .map(|e| e.status_and_message().1.to_owned()),
        teams: teams
            .map(|a| items(&a.body))
            .unwrap_or_default()
            .iter()
            .map(|t| {
                (
                    text(&t["name"]),
                    joined(&t["tags"]),
                    text(&t["description"]),
                )
            })
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
    call(
        &state,
        &session.caller,
        "create_tags",
        vec![],
        Input::Body(forms::create_tag(&form)),
    )
    .await?;
    Ok(see_other("/board/org"))
}
