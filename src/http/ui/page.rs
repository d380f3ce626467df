//! The operator page's HTML: the login form and the dashboard, rendered
//! from `OperatorStats`, with a small inline script that polls
//! `/admin/stats` and updates the same elements in place.
//!
//! Every figure sits in an element named by `data-stat` (engine-wide) or by
//! `data-org` on its row and `data-field` on its cell, and the script writes
//! the same text the server renders, so a reader (or a test) can find them.
//! Every text that comes from the store (org names, error texts) is
//! escaped here and set with `textContent` by the script. No external
//! asset: the page works offline; styles and script carry the response's
//! CSP nonce.

use std::fmt::Write as _;

use taskq_actors::api::{OperatorStats, OrgStats};

/// How often the page asks for fresh figures.
const REFRESH_MS: u32 = 1500;

/// Escapes text for HTML content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = r#"
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d2330; background: #f4f6f9; }
header { display: flex; align-items: center; gap: 1.5em; padding: .8em 1.5em; background: #1d2330; color: #fff; }
header h1 { font-size: 1.1em; margin: 0; }
header .live { font-size: .9em; opacity: .85; }
header form { margin-left: auto; }
main { padding: 1em 1.5em; }
section.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(210px, 1fr)); gap: .8em; margin-bottom: 1.2em; }
.card { background: #fff; border: 1px solid #d8dde6; border-radius: 6px; padding: .6em .8em; }
.card h2 { font-size: .8em; text-transform: uppercase; letter-spacing: .04em; color: #5a6478; margin: 0 0 .4em; }
.card dl { display: grid; grid-template-columns: max-content auto; gap: .15em .8em; margin: 0; }
.card.wide { grid-column: span 2; }
.card dt { color: #5a6478; white-space: nowrap; }
.card dd { margin: 0; text-align: right; font-variant-numeric: tabular-nums; font-weight: 600; }
.error { color: #a12020; font-weight: 400; word-break: break-word; }
table { border-collapse: collapse; width: 100%; background: #fff; border: 1px solid #d8dde6; }
th, td { padding: .35em .6em; border-bottom: 1px solid #e6e9ef; text-align: right; }
th { background: #eef1f6; font-size: .85em; color: #3a4356; }
th.text, td.text { text-align: left; }
td { font-variant-numeric: tabular-nums; }
td .id { display: block; color: #7a8497; font-size: .8em; font-family: ui-monospace, monospace; }
tr.stopped td[data-field=actor_alive] { color: #7a8497; }
tr.alive td[data-field=actor_alive] { color: #176b2c; }
.login { max-width: 360px; margin: 12vh auto; background: #fff; border: 1px solid #d8dde6; border-radius: 6px; padding: 1.5em; }
.login input { width: 100%; box-sizing: border-box; padding: .5em; margin: .5em 0 1em; }
button { padding: .45em 1em; cursor: pointer; }
.bad { color: #a12020; }
"#;

/// The login form; `error` is shown above it.
pub fn login(nonce: &str, error: Option<&str>) -> String {
    let error = error
        .map(|e| format!(r#"<p class="bad" id="login-error">{}</p>"#, escape(e)))
        .unwrap_or_default();
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>taskq operator: sign in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style nonce="{nonce}">{STYLE}</style></head>
<body><form class="login" id="login" method="post" action="/admin/ui/login">
<h1>taskq operator</h1>{error}
<label for="token">Operator token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<button id="sign-in" type="submit">Sign in</button>
</form></body></html>
"#
    )
}

/// A float the way the script writes it: two decimals.
fn fixed(v: f64) -> String {
    format!("{v:.2}")
}

fn or_dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "—".to_owned())
}

/// The engine-wide figures: card, `data-stat` path, label and text; the
/// script reads the same paths from the JSON (`.2` suffix: two decimals).
type Figure = (&'static str, &'static str, &'static str, String);

fn global_fields(s: &OperatorStats) -> Vec<Figure> {
    let w = &s.writer;
    let a = &s.actors;
    vec![
        (
            "Actors",
            "actors.alive",
            "org actors alive",
            a.alive.to_string(),
        ),
        ("Actors", "actors.spawned", "spawned", a.spawned.to_string()),
        (
            "Actors",
            "actors.restarts",
            "restarts",
            a.restarts.to_string(),
        ),
        (
            "Actors",
            "actors.idle_stops",
            "idle stops",
            a.idle_stops.to_string(),
        ),
        (
            "Last restart",
            "actors.last_restart.org_id",
            "org",
            or_dash(a.last_restart.as_ref().map(|r| r.org_id.to_string())),
        ),
        (
            "Last restart",
            "actors.last_restart.at",
            "at",
            or_dash(
                a.last_restart
                    .as_ref()
                    .map(|r| taskq_actors::clock::format_ms(r.at.0)),
            ),
        ),
        (
            "Last restart",
            "actors.last_restart.error",
            "error",
            or_dash(a.last_restart.as_ref().map(|r| r.error.clone())),
        ),
        ("Writer", "writer.commits", "commits", w.commits.to_string()),
        ("Writer", "writer.batches", "batches", w.batches.to_string()),
        ("Writer", "writer.rows", "rows", w.rows.to_string()),
        (
            "Writer",
            "writer.failed_commits",
            "failed commits",
            w.failed_commits.to_string(),
        ),
        (
            "Writer",
            "writer.queued",
            "batches queued",
            w.queued.to_string(),
        ),
        (
            "Writer",
            "writer.last.batches",
            "last commit: batches",
            or_dash(w.last.as_ref().map(|c| c.batches.to_string())),
        ),
        (
            "Writer",
            "writer.last.rows",
            "last commit: rows",
            or_dash(w.last.as_ref().map(|c| c.rows.to_string())),
        ),
        (
            "Writer",
            "writer.last.latency_ms.2",
            "last commit: ms",
            or_dash(w.last.as_ref().map(|c| fixed(c.latency_ms))),
        ),
        (
            "Recent commits",
            "writer.window_commits",
            "commits in window",
            w.window_commits.to_string(),
        ),
        (
            "Recent commits",
            "writer.batches_per_commit_mean.2",
            "batches/commit mean",
            fixed(w.batches_per_commit_mean),
        ),
        (
            "Recent commits",
            "writer.batches_per_commit_max",
            "batches/commit max",
            w.batches_per_commit_max.to_string(),
        ),
        (
            "Recent commits",
            "writer.rows_per_commit_mean.2",
            "rows/commit mean",
            fixed(w.rows_per_commit_mean),
        ),
        (
            "Recent commits",
            "writer.rows_per_commit_max",
            "rows/commit max",
            w.rows_per_commit_max.to_string(),
        ),
        (
            "Recent commits",
            "writer.latency_ms_p50.2",
            "commit ms p50",
            fixed(w.latency_ms_p50),
        ),
        (
            "Recent commits",
            "writer.latency_ms_p99.2",
            "commit ms p99",
            fixed(w.latency_ms_p99),
        ),
        (
            "Recent commits",
            "writer.latency_ms_max.2",
            "commit ms max",
            fixed(w.latency_ms_max),
        ),
        (
            "Limits",
            "refusals_total",
            "refusals (429)",
            s.refusals_total.to_string(),
        ),
        (
            "Limits",
            "orgs.length",
            "orgs listed",
            s.orgs.len().to_string(),
        ),
    ]
}

/// The per-org columns: header, `data-field`, and whether it is text.
const ORG_COLUMNS: [(&str, &str, bool); 18] = [
    ("Org", "name", true),
    ("Tier", "tier", true),
    ("Actor", "actor_alive", true),
    ("Pending", "pending", false),
    ("In progress", "in_progress", false),
    ("Blocked", "blocked", false),
    ("Paused", "paused", false),
    ("Feedback", "feedback", false),
    ("Leases", "leases", false),
    ("Expiring ≤60 s", "leases_expiring", false),
    ("Waiting claims", "waiting_claims", false),
    ("Restarts", "restarts", false),
    ("Last restart", "last_restart_at", true),
    ("Last error", "last_restart_error", true),
    ("429s", "refusals", false),
    ("Stored tasks", "stored_tasks", false),
    ("Stored events", "stored_events", false),
    ("Retention", "retention_days", true),
];

/// One org figure as text; the script's `orgText` is its twin.
fn org_text(o: &OrgStats, field: &str) -> String {
    let count = |f: fn(&taskq_actors::api::OpenTaskCounts) -> usize| {
        or_dash(o.tasks.as_ref().map(|t| f(t).to_string()))
    };
    match field {
        "name" => o.name.clone(),
        "tier" => o.tier.as_str().to_owned(),
        "actor_alive" => if o.actor_alive { "alive" } else { "stopped" }.to_owned(),
        "pending" => count(|t| t.pending),
        "in_progress" => count(|t| t.in_progress),
        "blocked" => count(|t| t.blocked),
        "paused" => count(|t| t.paused),
        "feedback" => count(|t| t.feedback),
        "leases" => o.leases.to_string(),
        "leases_expiring" => {
            let plus = if o.leases_expiring_exact { "" } else { "+" };
            format!("{}{plus}", o.leases_expiring)
        }
        "waiting_claims" => o.waiting_claims.to_string(),
        "restarts" => o.restarts.to_string(),
        "last_restart_at" => or_dash(
            o.last_restart_at
                .map(|t| taskq_actors::clock::format_ms(t.0)),
        ),
        "last_restart_error" => or_dash(o.last_restart_error.clone()),
        "refusals" => o.refusals.to_string(),
        "stored_tasks" => or_dash(o.stored.map(|s| s.counts.tasks.to_string())),
        "stored_events" => or_dash(o.stored.map(|s| s.counts.events.to_string())),
        "retention_days" => match o.retention_days {
            Some(days) => format!("{days} days"),
            None => "forever".to_owned(),
        },
        _ => String::new(),
    }
}

fn org_row(out: &mut String, o: &OrgStats) {
    let class = if o.actor_alive { "alive" } else { "stopped" };
    let _ = write!(
        out,
        r#"<tr data-org="{}" class="{class}">"#,
        escape(&o.org_id.to_string())
    );
    for (_, field, text) in ORG_COLUMNS {
        let value = escape(&org_text(o, field));
        let class = match (field, text) {
            ("last_restart_error", _) => r#" class="text error""#,
            (_, true) => r#" class="text""#,
            _ => "",
        };
        if field == "name" {
            let _ = write!(
                out,
                r#"<td{class}><span data-field="name">{value}</span><span class="id">{}</span></td>"#,
                escape(&o.org_id.to_string())
            );
        } else {
            let _ = write!(out, r#"<td{class} data-field="{field}">{value}</td>"#);
        }
    }
    out.push_str("</tr>\n");
}

/// The dashboard with the figures of `stats`.
pub fn dashboard(nonce: &str, stats: &OperatorStats) -> String {
    let mut cards = String::new();
    let mut current = "";
    for (group, path, label, value) in global_fields(stats) {
        if group != current {
            if !current.is_empty() {
                cards.push_str("</dl></div>\n");
            }
            let wide = if group == "Last restart" { " wide" } else { "" };
            let _ = write!(
                cards,
                r#"<div class="card{wide}"><h2>{}</h2><dl>"#,
                escape(group)
            );
            current = group;
        }
        let class = if path.ends_with(".error") {
            r#" class="error""#
        } else {
            ""
        };
        let _ = write!(
            cards,
            r#"<dt>{}</dt><dd{class} data-stat="{path}">{}</dd>"#,
            escape(label),
            escape(&value)
        );
    }
    cards.push_str("</dl></div>\n");

    let mut head = String::new();
    for (title, _, text) in ORG_COLUMNS {
        let class = if text { r#" class="text""# } else { "" };
        let _ = write!(head, "<th{class}>{}</th>", escape(title));
    }
    let mut rows = String::new();
    for o in &stats.orgs {
        org_row(&mut rows, o);
    }
    let generated = escape(&taskq_actors::clock::format_ms(stats.generated_at.0));
    let store = if stats.store_up { "up" } else { "DOWN" };
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>taskq operator</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style nonce="{nonce}">{STYLE}</style></head>
<body data-refreshes="0">
<header><h1>taskq operator</h1>
<span class="live">store <b data-stat="store_up">{store}</b> · {backend} · updated <span data-stat="generated_at">{generated}</span> · <span id="live-state">live</span></span>
<form method="post" action="/admin/ui/logout"><button id="logout" type="submit">Sign out</button></form></header>
<main>
<section class="cards">
{cards}</section>
<table id="orgs"><thead><tr>{head}</tr></thead>
<tbody>
{rows}</tbody></table>
<p>Orgs whose actor has not run since the server started are not listed. Leases expiring: within the next {window} s.</p>
</main>
<script nonce="{nonce}">{SCRIPT}</script>
</body></html>
"#,
        backend = escape(stats.backend),
        window = stats.expiring_window_seconds,
        SCRIPT = script(),
    )
}

fn script() -> String {
    let fields: Vec<String> = ORG_COLUMNS
        .iter()
        .map(|(_, f, text)| format!("[{f:?},{text}]"))
        .collect();
    SCRIPT_TEMPLATE
        .replace("__REFRESH_MS__", &REFRESH_MS.to_string())
        .replace("__COLUMNS__", &fields.join(","))
}

/// The page's script: polls, then writes each figure's text where the
/// server put it. Text only (`textContent`), never markup.
const SCRIPT_TEMPLATE: &str = r##"
"use strict";
(function () {
  const COLUMNS = [__COLUMNS__];
  const dash = "\u2014";
  function at(obj, path) {
    let v = obj;
    for (const key of path.split(".")) {
      if (v === null || v === undefined) return null;
      v = key === "length" && Array.isArray(v) ? v.length : v[key];
    }
    return v === undefined ? null : v;
  }
  function statText(stats, path) {
    if (path === "store_up") return stats.store_up ? "up" : "DOWN";
    const decimals = path.endsWith(".2");
    const v = at(stats, decimals ? path.slice(0, -2) : path);
    if (v === null) return dash;
    return decimals ? Number(v).toFixed(2) : String(v);
  }
  function orgText(o, field) {
    switch (field) {
      case "actor_alive": return o.actor_alive ? "alive" : "stopped";
      case "pending": case "in_progress": case "blocked": case "paused": case "feedback":
        return o.tasks === null ? dash : String(o.tasks[field]);
      case "leases_expiring": return String(o.leases_expiring) + (o.leases_expiring_exact ? "" : "+");
      case "last_restart_at": case "last_restart_error":
        return o[field] === null ? dash : String(o[field]);
      case "stored_tasks": return o.stored === null ? dash : String(o.stored.tasks);
      case "stored_events": return o.stored === null ? dash : String(o.stored.events);
      case "retention_days": return o.retention_days === null ? "forever" : o.retention_days + " days";
      default: return String(o[field]);
    }
  }
  function newRow(o) {
    const tr = document.createElement("tr");
    tr.dataset.org = o.org_id;
    for (const [field, text] of COLUMNS) {
      const td = document.createElement("td");
      if (text) td.className = field === "last_restart_error" ? "text error" : "text";
      if (field === "name") {
        const name = document.createElement("span");
        name.dataset.field = "name";
        const id = document.createElement("span");
        id.className = "id";
        id.textContent = o.org_id;
        td.append(name, id);
      } else {
        td.dataset.field = field;
      }
      tr.append(td);
    }
    return tr;
  }
  function render(stats) {
    for (const el of document.querySelectorAll("[data-stat]")) {
      const text = statText(stats, el.dataset.stat);
      if (el.textContent !== text) el.textContent = text;
    }
    const body = document.querySelector("#orgs tbody");
    const rows = new Map();
    for (const tr of body.querySelectorAll("tr[data-org]")) rows.set(tr.dataset.org, tr);
    let previous = null;
    for (const o of stats.orgs) {
      let tr = rows.get(o.org_id);
      rows.delete(o.org_id);
      if (!tr) tr = newRow(o);
      const wanted = previous ? previous.nextSibling : body.firstChild;
      if (tr !== wanted) body.insertBefore(tr, wanted);
      tr.className = o.actor_alive ? "alive" : "stopped";
      for (const [field] of COLUMNS) {
        const cell = tr.querySelector('[data-field="' + field + '"]');
        const text = orgText(o, field);
        if (cell.textContent !== text) cell.textContent = text;
      }
      previous = tr;
    }
    for (const tr of rows.values()) tr.remove();
  }
  const state = document.getElementById("live-state");
  async function refresh() {
    try {
      const response = await fetch("/admin/stats", { credentials: "same-origin", headers: { accept: "application/json" } });
      if (response.status === 401) {
        state.textContent = "signed out: reload to sign in";
        return;
      }
      if (!response.ok) throw new Error("HTTP " + response.status);
      render(await response.json());
      state.textContent = "live";
      document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes) + 1);
    } catch (e) {
      state.textContent = "not updating (" + e.message + ")";
    }
    setTimeout(refresh, __REFRESH_MS__);
  }
  setTimeout(refresh, __REFRESH_MS__);
})();
"##;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape(r#"<script>alert("x" & 'y')</script>"#),
            "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;"
        );
    }
}
