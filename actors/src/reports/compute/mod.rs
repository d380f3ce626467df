//! The report writer: reads an org's history from the store, computes its
//! reports with the pure functions beside this module, words labels,
//! runbooks and standups through the language model when one is configured
//! (the built-in templates otherwise, or when it fails), and stores each
//! report sealed with the org's data key.
//!
//! It never asks an org actor for anything, so computing a report never
//! holds a claim up; the reports actor calls it one org at a time.

use std::collections::HashMap;
use std::sync::Arc;

use dashmap::DashMap;
use serde::Serialize;

mod standups;

use super::cluster::{self, Item};
use super::insights::{self, WINDOW_DAYS};
use super::stored::{applies, centroid, open, seal, StoredRunbook};
use super::wording::{self, Source};
use crate::api::{FailureCluster, Insights, ReportKind, Runbook, Text, Timestamp, RUNBOOK_SOURCES};
use crate::background::Background;
use crate::clock::Clock;
use crate::crypto::OrgCipher;
use crate::directory::{OrgDirectory, OrgEntry};
use crate::domain::history::TaskHistory;
use crate::domain::{OrgId, StoredTask, TaskId, TaskStatus};
use crate::error::EngineError;
use crate::llm::{ChatMessage, ChatModel};
use crate::meaning::Meaning;
use crate::store::{ReportKey, Store, StoreOptions};
use crate::views;

pub const DAY_MS: i64 = 24 * 60 * 60 * 1000;
/// History read for a computation: the previous month's standup and the
/// runbooks' window.
const HISTORY_MS: i64 = 92 * DAY_MS;
/// Runbooks are distilled from tasks completed this far back.
const RUNBOOK_WINDOW_MS: i64 = 90 * DAY_MS;
/// Completed tasks a cluster needs to become a runbook, and failed tasks
/// to become a failure cluster.
const RUNBOOK_MIN_MEMBERS: usize = 3;
const FAILURE_CLUSTER_MIN_MEMBERS: usize = 2;
const MAX_RUNBOOKS: usize = 20;
const MAX_FAILURE_CLUSTERS: usize = 10;
/// Sources a runbook is written from.
const RUNBOOK_WRITE_SOURCES: usize = 15;
/// Titles listed in a standup body or a label prompt.
const STANDUP_TITLES: usize = 30;
const LABEL_TITLES: usize = 20;
/// Connections of the reports' own pool.
const WORK_CONNECTIONS: u32 = 2;
/// Orgs whose runbooks are kept in memory for claims and the planner.
const CACHED_ORGS: usize = 1_024;
/// The reports of one computation, sealed, written together at its end.
#[derive(Default)]
struct Written(Vec<(ReportKey, Vec<u8>)>);

impl Written {
    fn add<T: Serialize>(&mut self, entry: &OrgEntry, key: ReportKey, report: &T) {
        let sealed = seal(&entry.cipher, &key, report);
        self.0.push((key, sealed));
    }
}

/// Plain text of a title or description; an envelope has none.
fn plain(text: Option<Text>) -> Option<String> {
    match text {
        Some(Text::Plain(s)) => Some(s),
        _ => None,
    }
}

/// An output as one line of text: its `summary` or `result` when that is a
/// string, else its compact JSON.
fn output_text(output: Option<crate::api::Object>) -> Option<String> {
    let output = output?;
    for field in ["summary", "result", "text", "answer"] {
        if let Some(serde_json::Value::String(s)) = output.get(field) {
            return Some(s.clone());
        }
    }
    Some(serde_json::Value::Object(output).to_string())
}

fn round(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}

pub struct Reporter {
    /// The server's store: reads for the routes and the schedule.
    pub(crate) store: Store,
    /// A pool of its own, made on the reports thread: what computations read
    /// and write through.
    work: Store,
    pub(crate) directory: Arc<OrgDirectory>,
    pub(crate) meaning: Option<Arc<Meaning>>,
    pub(crate) chat: Option<Arc<dyn ChatModel>>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Each org's runbooks, for claim context and the planner; filled when
    /// they are computed or first read.
    runbooks: DashMap<OrgId, Arc<Vec<StoredRunbook>>>,
    background: Background,
    /// Several nodes: which node computes each org's scheduled reports.
    pub(crate) cluster: std::sync::OnceLock<Arc<crate::cluster::Cluster>>,
}

impl Reporter {
    /// Starts the reports thread and its pool (`database_url`, a couple of
    /// connections, each opened from that thread when first used).
    pub async fn start(
        store: Store,
        database_url: &str,
        options: &StoreOptions,
        directory: Arc<OrgDirectory>,
        meaning: Option<Arc<Meaning>>,
        chat: Option<Arc<dyn ChatModel>>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, EngineError> {
        let background = Background::start("taskq-reports")?;
        let options = StoreOptions {
            max_connections: WORK_CONNECTIONS,
            ..options.clone()
        };
        let work = Store::connect_lazy(database_url, &options)?;
        Ok(Self {
            store,
            work,
            directory,
            meaning,
            chat,
            clock,
            runbooks: DashMap::new(),
            cluster: std::sync::OnceLock::new(),
            background,
        })
    }

    /// Closes the reports' own pool (at shutdown).
    pub async fn close(&self) {
        self.work.close().await;
    }

    /// [`Reporter::compute`] on the reports thread.
    pub async fn compute_in_background(
        self: &Arc<Self>,
        org: OrgId,
        kinds: Vec<ReportKind>,
        scheduled: bool,
    ) -> Result<Vec<ReportKind>, EngineError> {
        let reporter = self.clone();
        self.background
            .run(async move { reporter.compute(org, &kinds, scheduled).await })
            .await?
    }

    /// Computes and stores the reports of `kinds` that apply to the org;
    /// answers those computed.
    pub async fn compute(
        &self,
        org: OrgId,
        kinds: &[ReportKind],
        scheduled: bool,
    ) -> Result<Vec<ReportKind>, EngineError> {
        let entry = self.directory.get(org).await?;
        let kinds: Vec<ReportKind> = kinds
            .iter()
            .copied()
            .filter(|k| applies(*k, entry.record.tier, entry.record.encryption))
            .collect();
        if kinds.is_empty() {
            return Ok(kinds);
        }
        let now = self.clock.now_ms();
        let histories = self.work.task_histories(org, now - HISTORY_MS).await?;
        let mut written = Written::default();
        let mut new_runbooks = None;
        for kind in &kinds {
            match kind {
                ReportKind::Insights => {
                    let report = insights::insights(&histories, now, entry.record.created_at);
                    written.add(
                        &entry,
                        ReportKey::single(ReportKind::Insights.as_str()),
                        &report,
                    );
                }
                ReportKind::FailureClusters => {
                    let clusters = self.failure_clusters(org, &entry, &histories, now).await?;
                    written.add(
                        &entry,
                        ReportKey::single(ReportKind::FailureClusters.as_str()),
                        &clusters,
                    );
                }
                ReportKind::Runbooks => {
                    let runbooks = self.distil_runbooks(org, &entry, &histories, now).await?;
                    written.add(
                        &entry,
                        ReportKey::single(ReportKind::Runbooks.as_str()),
                        &runbooks,
                    );
                    new_runbooks = Some(runbooks);
                }
                ReportKind::Standup => {
                    self.standups(org, &entry, &histories, now, scheduled, &mut written)
                        .await?;
                }
            }
        }
        self.work.put_reports(org, now, &written.0).await?;
        // Orgs whose runbooks are in use get the new ones; the others are
        // read when first needed.
        if let Some(runbooks) = new_runbooks {
            if self.runbooks.contains_key(&org) {
                self.cache_runbooks(org, Arc::new(runbooks));
            }
        }
        Ok(kinds)
    }

    /// The org's stored insights, if computed.
    pub async fn insights(
        &self,
        org: OrgId,
        cipher: &OrgCipher,
    ) -> Result<Option<Insights>, EngineError> {
        let key = ReportKey::single(ReportKind::Insights.as_str());
        let Some(stored) = self.store.report(org, &key).await? else {
            return Ok(None);
        };
        open(cipher, &key, &stored.body).map(Some)
    }

    pub async fn failure_clusters_of(
        &self,
        org: OrgId,
        cipher: &OrgCipher,
    ) -> Result<Option<Vec<FailureCluster>>, EngineError> {
        let key = ReportKey::single(ReportKind::FailureClusters.as_str());
        let Some(stored) = self.store.report(org, &key).await? else {
            return Ok(None);
        };
        open(cipher, &key, &stored.body).map(Some)
    }

    /// Drops the org's cached runbooks: another node owns the org now and
    /// may compute new ones.
    pub fn forget(&self, org: OrgId) {
        self.runbooks.remove(&org);
    }

    /// Whether this node computes the org's scheduled reports: the node
    /// the cluster chooses for it, or this one when it is alone.
    pub fn schedules(&self, org: OrgId) -> bool {
        self.cluster
            .get()
            .is_none_or(|c| c.trusted() && c.desired(org).is_none_or(|d| d.node_id == c.node_id()))
    }

    /// The org's runbooks, from the cache or the store.
    pub async fn runbooks_of(
        &self,
        org: OrgId,
        cipher: &OrgCipher,
    ) -> Result<Arc<Vec<StoredRunbook>>, EngineError> {
        if let Some(cached) = self.runbooks.get(&org) {
            return Ok(cached.clone());
        }
        let key = ReportKey::single(ReportKind::Runbooks.as_str());
        let runbooks: Vec<StoredRunbook> = match self.store.report(org, &key).await? {
            Some(stored) => open(cipher, &key, &stored.body)?,
            None => Vec::new(),
        };
        let runbooks = Arc::new(runbooks);
        self.cache_runbooks(org, runbooks.clone());
        Ok(runbooks)
    }

    /// Keeps an org's runbooks in memory, at most `CACHED_ORGS` orgs' worth
    /// (another org's are dropped to make room; they are read again when
    /// next needed).
    fn cache_runbooks(&self, org: OrgId, runbooks: Arc<Vec<StoredRunbook>>) {
        self.runbooks.insert(org, runbooks);
        if self.runbooks.len() > CACHED_ORGS {
            let other = self.runbooks.iter().map(|e| *e.key()).find(|o| *o != org);
            if let Some(other) = other {
                self.runbooks.remove(&other);
            }
        }
    }

    /// The org's runbooks if they are in memory; never waits.
    pub fn runbooks_now(&self, org: OrgId) -> Option<Arc<Vec<StoredRunbook>>> {
        self.runbooks.get(&org).map(|r| r.clone())
    }

    /// Reads tasks' content and vectors for clustering.
    async fn items(
        &self,
        org: OrgId,
        entry: &OrgEntry,
        tasks: &[&TaskHistory],
    ) -> Result<(Vec<Item>, HashMap<TaskId, StoredTask>), EngineError> {
        let ids: Vec<TaskId> = tasks.iter().map(|t| t.task_id).collect();
        let mut stored = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(500) {
            for t in self.work.tasks(org, chunk).await? {
                stored.insert(t.header.task_id, t);
            }
        }
        let mut vectors = match &self.meaning {
            Some(m) => m.vectors(org, &ids).await.unwrap_or_default(),
            None => HashMap::new(),
        };
        let mut items = Vec::with_capacity(tasks.len());
        for t in tasks {
            let Some(s) = stored.get(&t.task_id) else {
                continue;
            };
            let Some(title) = plain(Some(views::title(&entry.cipher, s)?)) else {
                continue;
            };
            items.push(Item {
                task_id: t.task_id,
                at: t.finished_at().unwrap_or(t.updated_at),
                title,
                tags: t.tags.clone(),
                vector: vectors.remove(&t.task_id),
            });
        }
        Ok((items, stored))
    }

    async fn ask(&self, messages: Vec<ChatMessage>) -> Option<String> {
        let chat = self.chat.as_ref()?;
        match chat.complete(messages).await {
            Ok(answer) => Some(answer),
            Err(e) => {
                tracing::warn!(error = %e, "report written from its template");
                None
            }
        }
    }

    async fn label(&self, items: &[Item], members: &[usize]) -> String {
        let titles: Vec<String> = members
            .iter()
            .take(LABEL_TITLES)
            .map(|&i| items[i].title.clone())
            .collect();
        if self.chat.is_some() {
            if let Some(label) = self
                .ask(wording::label_prompt(&titles))
                .await
                .and_then(|a| wording::read_label(&a))
            {
                return label;
            }
        }
        wording::template_label(items, members)
    }

    async fn failure_clusters(
        &self,
        org: OrgId,
        entry: &OrgEntry,
        histories: &[TaskHistory],
        now: i64,
    ) -> Result<Vec<FailureCluster>, EngineError> {
        let since = now - i64::from(WINDOW_DAYS) * DAY_MS;
        let failed: Vec<&TaskHistory> = histories
            .iter()
            .filter(|t| t.status == TaskStatus::Failed)
            .filter(|t| t.finished_at().is_some_and(|at| at >= since && at <= now))
            .collect();
        let total = failed.len();
        let (items, _) = self.items(org, entry, &failed).await?;
        let groups = cluster::cluster(&items, FAILURE_CLUSTER_MIN_MEMBERS);
        let mut clusters = Vec::new();
        for members in groups.into_iter().take(MAX_FAILURE_CLUSTERS) {
            clusters.push(FailureCluster {
                label: self.label(&items, &members).await,
                count: members.len() as u64,
                share_pct: round(members.len() as f64 * 100.0 / total.max(1) as f64, 1),
            });
        }
        Ok(clusters)
    }

    async fn distil_runbooks(
        &self,
        org: OrgId,
        entry: &OrgEntry,
        histories: &[TaskHistory],
        now: i64,
    ) -> Result<Vec<StoredRunbook>, EngineError> {
        let since = now - RUNBOOK_WINDOW_MS;
        let completed: Vec<&TaskHistory> = histories
            .iter()
            .filter(|t| t.status == TaskStatus::Completed)
            .filter(|t| t.finished_at().is_some_and(|at| at >= since && at <= now))
            .collect();
        let (items, stored) = self.items(org, entry, &completed).await?;
        let mut runbooks = Vec::new();
        let clusters = cluster::cluster(&items, RUNBOOK_MIN_MEMBERS);
        for members in clusters.into_iter().take(MAX_RUNBOOKS) {
            let mut sources = Vec::new();
            for &i in members.iter().take(RUNBOOK_WRITE_SOURCES) {
                let item = &items[i];
                let Some(t) = stored.get(&item.task_id) else {
                    continue;
                };
                sources.push(Source {
                    task_id: item.task_id,
                    title: item.title.clone(),
                    description: plain(views::description(&entry.cipher, t)?),
                    output: output_text(views::output(&entry.cipher, t)?),
                });
            }
            let label = wording::template_label(&items, &members);
            let written = match self.chat.is_some() {
                true => self
                    .ask(wording::runbook_prompt(&label, &sources))
                    .await
                    .and_then(|a| wording::read_runbook(&a)),
                false => None,
            };
            let (topic, body) =
                written.unwrap_or_else(|| wording::template_runbook(&label, &sources));
            let vectors: Vec<&Vec<f32>> = members
                .iter()
                .filter_map(|&i| items[i].vector.as_ref())
                .collect();
            let centroid = if vectors.len() == members.len() {
                centroid(vectors.into_iter())
            } else {
                None
            };
            runbooks.push(StoredRunbook {
                runbook: Runbook {
                    runbook_id: uuid::Uuid::now_v7().to_string(),
                    topic,
                    body,
                    computed_at: Timestamp(now),
                    member_count: members.len() as u64,
                    source_task_ids: members
                        .iter()
                        .take(RUNBOOK_SOURCES)
                        .map(|&i| items[i].task_id)
                        .collect(),
                },
                centroid,
                terms: shared_terms(&items, &members),
            });
        }
        Ok(runbooks)
    }
}

/// Terms (title words and `tag:` entries) carried by at least half of a
/// cluster's members.
fn shared_terms(items: &[Item], members: &[usize]) -> Vec<String> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for &i in members {
        for term in cluster::terms(&items[i].title, &items[i].tags) {
            *counts.entry(term).or_default() += 1;
        }
    }
    let mut shared: Vec<String> = counts
        .into_iter()
        .filter(|(_, n)| n * 2 >= members.len())
        .map(|(t, _)| t)
        .collect();
    shared.sort();
    shared
}
