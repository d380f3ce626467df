//! Latency at scale: a server embedding through the bench's bag-of-words
//! endpoint, one org filled with `tasks` tasks, then searches alone and
//! under load (see the parent module for what the figures mean).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::ensure;
use serde::Serialize;

use super::endpoint::LocalEndpoint;
use super::{bootstrap_one_org, ms, wait_for_index, EvalSet, BATCH};
use crate::api::{AgentApi, Routes};
use crate::bootstrap::Admin;
use crate::report::{op_report, OpReport};
use crate::server::Server;
use crate::stats::{AgentOutcome, Op, OpStats, Phase};
use crate::BenchArgs;

/// Results asked for: what an agent gets by default.
const SCALE_LIMIT: u8 = 3;
/// How long a fill may take to be embedded: the index's own work grows
/// with its size even when the embedder is free.
const SCALE_EMBED_TIMEOUT: Duration = Duration::from_secs(1_800);
/// Pause after a failed request, so a dead server is not hammered.
const BAG_OF_WORDS_MODEL: &str = "bench-bag-of-words";

#[derive(Serialize)]
pub(super) struct Scale {
    tasks: u64,
    /// Always the bag-of-words endpoint: latencies leave model time out.
    embedder: &'static str,
    /// The creates: batches of 25, `--concurrency` in flight.
    fill: OpReport,
    fill_secs: f64,
    /// From the first create until the index held every task created.
    embedded_secs: f64,
    index_tasks: u64,
    index_bytes: u64,
    bytes_per_task: f64,
    /// The server's resident memory once the index was full.
    server_rss_kb: Option<u64>,
    /// One agent, each evaluation query once.
    alone: OpReport,
    /// `alone`'s p50 plus the builtin relevance phase's (the model
    /// embedding a query): a builtin server's search at this size.
    builtin_estimate_p50_ms: Option<f64>,
    /// `--agents` agents for `--duration` seconds.
    search: OpReport,
}

impl Scale {
    pub(super) fn estimate_builtin(&mut self, builtin_p50_ms: Option<f64>) {
        self.builtin_estimate_p50_ms = builtin_p50_ms.zip(self.alone.p50_ms).map(|(a, b)| a + b);
    }

    pub(super) fn error_samples(&self) -> [(&'static str, &Vec<String>); 3] {
        [
            ("fill", &self.fill.error_samples),
            ("search", &self.alone.error_samples),
            ("search", &self.search.error_samples),
        ]
    }
}

pub(super) async fn scale_run(
    args: &BenchArgs,
    eval: &Arc<EvalSet>,
    bag_of_words: &LocalEndpoint,
    tasks: u64,
) -> anyhow::Result<Scale> {
    eprintln!("[search] {tasks} tasks, embedded by the bench's bag of words");
    let env = [
        ("TASKQ_EMBEDDINGS", bag_of_words.url().to_owned()),
        ("TASKQ_EMBEDDINGS_MODEL", BAG_OF_WORDS_MODEL.to_owned()),
    ];
    let server = Server::start_with_env(args, &env).await?;
    let measured = measure_scale(args, eval, &server, tasks).await;
    if let Err(e) = server.stop(measured.is_err()).await {
        eprintln!("warning: stopping the server: {e:#}");
    }
    measured
}

async fn measure_scale(
    args: &BenchArgs,
    eval: &Arc<EvalSet>,
    server: &Server,
    tasks: u64,
) -> anyhow::Result<Scale> {
    let base = server.process.url();
    let admin = Admin::new(base, &server.token, args.concurrency)?;
    let agents = bootstrap_one_org(&admin, args, args.agents).await?;
    let routes = Routes::new(base)?;

    let batches = tasks.div_ceil(BATCH);
    let next_batch = Arc::new(AtomicU64::new(0));
    let mut phase = Phase::start("fill", "tasks");
    let fill_started = phase.started;
    for worker in 0..args.concurrency.min(batches as usize) {
        let api = AgentApi::new(&routes, &agents[worker % agents.len()].key)?;
        let next_batch = next_batch.clone();
        let eval = eval.clone();
        let progress = phase.progress.clone();
        phase.tasks.spawn(async move {
            let mut outcome = AgentOutcome::default();
            loop {
                let batch = next_batch.fetch_add(1, Ordering::Relaxed);
                if batch >= batches {
                    break;
                }
                let first = batch * BATCH;
                let count = BATCH.min(tasks - first);
                let new: Vec<(String, String)> = (first..first + count)
                    .map(|n| generated_task(&eval, n))
                    .collect();
                outcome
                    .record(
                        Op::Create,
                        &progress,
                        api.create_described(&new).await.map(|(_, latency)| latency),
                        count,
                    )
                    .await;
            }
            outcome
        });
    }
    let mut filled = phase.finish().await?;
    let fill = op_report(
        Op::Create,
        "fill",
        std::mem::take(filled.stats.op(Op::Create)),
        filled.wall,
    );
    ensure!(fill.items > 0, "no task of the fill was created");
    let gauges = wait_for_index(&admin, fill.items, SCALE_EMBED_TIMEOUT).await?;
    let embedded_secs = fill_started.elapsed().as_secs_f64();
    eprintln!(
        "[search] {} tasks embedded {embedded_secs:.1} s after the fill began",
        gauges.index_tasks
    );
    let server_rss_kb = server.process.rss_kb().await;

    let api = AgentApi::new(&routes, &agents[0].key)?;
    let mut stats = OpStats::default();
    let started = Instant::now();
    for query in &eval.queries {
        match api.search(&query.query, SCALE_LIMIT).await {
            Ok((_, latency)) => stats.ok(latency, 1),
            Err(e) => stats.err(e),
        }
    }
    let alone = op_report(Op::Search, "alone", stats, started.elapsed());

    let mut phase = Phase::start("search", "searches");
    let deadline = phase.started + Duration::from_secs(args.duration);
    for (n, agent) in agents.iter().enumerate() {
        let api = AgentApi::new(&routes, &agent.key)?;
        let eval = eval.clone();
        let progress = phase.progress.clone();
        phase.tasks.spawn(async move {
            let mut outcome = AgentOutcome::default();
            // Agents start at different queries, so they do not ask in step.
            let mut next = n * 7;
            while Instant::now() < deadline {
                let query = &eval.queries[next % eval.queries.len()].query;
                next += 1;
                outcome
                    .record(
                        Op::Search,
                        &progress,
                        api.search(query, SCALE_LIMIT)
                            .await
                            .map(|(_, latency)| latency),
                        1,
                    )
                    .await;
            }
            outcome
        });
    }
    let mut searched = phase.finish().await?;
    let search = op_report(
        Op::Search,
        "search",
        std::mem::take(searched.stats.op(Op::Search)),
        searched.wall,
    );

    Ok(Scale {
        tasks,
        embedder: "bag-of-words endpoint (no model time)",
        fill_secs: filled.wall.as_secs_f64(),
        fill,
        embedded_secs,
        index_tasks: gauges.index_tasks,
        index_bytes: gauges.index_bytes,
        bytes_per_task: gauges.index_bytes as f64 / gauges.index_tasks.max(1) as f64,
        server_rss_kb,
        alone,
        builtin_estimate_p50_ms: None,
        search,
    })
}

/// Task `n` of a fill: the first half of one corpus title, the second half
/// of another, and `n`, so titles differ but read like real ones; and a
/// corpus description.
fn generated_task(eval: &EvalSet, n: u64) -> (String, String) {
    let corpus = &eval.corpus;
    let len = corpus.len() as u64;
    let pick = |i: u64| &corpus[(i % len) as usize];
    let head: Vec<&str> = pick(n).title.split_whitespace().collect();
    let tail: Vec<&str> = pick(n / len + n * 7 + 3).title.split_whitespace().collect();
    let title = format!(
        "{} {} (#{n})",
        head[..head.len().div_ceil(2)].join(" "),
        tail[tail.len() / 2..].join(" ")
    );
    (title, pick(n * 13 + 1).description.clone())
}

/// The two tables: the index, then search latency.
pub(super) fn render(scale: &[Scale]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "search at scale: one org, embedded by a bag-of-words endpoint, so the \
         latencies below EXCLUDE model time"
    );
    let _ = writeln!(
        out,
        "{:>8} {:>7} {:>10} {:>7} {:>9}",
        "tasks", "fill_s", "embedded_s", "B/task", "rss"
    );
    for s in scale {
        let _ = writeln!(
            out,
            "{:>8} {:>7.1} {:>10.1} {:>7.0} {:>9}",
            s.tasks,
            s.fill_secs,
            s.embedded_secs,
            s.bytes_per_task,
            s.server_rss_kb.map_or_else(
                || "?".to_owned(),
                |kb| format!("{:.0} MiB", kb as f64 / 1024.0)
            ),
        );
    }
    let _ = writeln!(
        out,
        "fill: batches of 25; embedded_s: first create until the index held them all\n"
    );
    let _ = writeln!(
        out,
        "{:>8} {:>9} {:>9} {:>10} | {:>8} {:>8} {:>7} {:>7} {:>7} {:>6}",
        "tasks",
        "alone_p50",
        "alone_p99",
        "builtin~",
        "searches",
        "per_sec",
        "p50_ms",
        "p99_ms",
        "max_ms",
        "errors"
    );
    for s in scale {
        let _ = writeln!(
            out,
            "{:>8} {:>9} {:>9} {:>10} | {:>8} {:>8.1} {:>7} {:>7} {:>7} {:>6}",
            s.tasks,
            ms(s.alone.p50_ms),
            ms(s.alone.p99_ms),
            ms(s.builtin_estimate_p50_ms),
            s.search.count,
            s.search.per_sec,
            ms(s.search.p50_ms),
            ms(s.search.p99_ms),
            ms(s.search.max_ms),
            s.fill.errors + s.alone.errors + s.search.errors
        );
    }
    let _ = writeln!(
        out,
        "limit 3, in ms. alone: one agent, each query once; builtin~: alone p50 + the \
         builtin p50 above (its query embedding), an estimate of a builtin server's \
         search at that size; right of |: all agents at once for the duration"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_titles_differ() {
        let eval: EvalSet = serde_json::from_str(super::super::EVAL_SET).unwrap();
        let titles: std::collections::HashSet<String> =
            (0..1_000).map(|n| generated_task(&eval, n).0).collect();
        assert_eq!(titles.len(), 1_000);
    }
}
