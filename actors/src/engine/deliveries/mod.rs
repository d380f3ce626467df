//! The webhook delivery worker: one per server, off every request's path,
//! on a low-priority thread of its own (`background`), so a backlog of
//! deliveries takes the CPU claims leave and never the other way round.
//!
//! What it delivers is the org's event log itself (`store::events`): a
//! commit writes nothing for webhooks. Each endpoint has a cursor, and a
//! turn at an endpoint ([`turn`]) reads its org's events after it, sends
//! those the endpoint takes over a few streams (each task's in one, in
//! order; [`send`] signs and sends one), and one settle moves the cursor
//! through them, leaving an outbox row for each event that failed or
//! waits behind its task's earlier event. Due rows are read in bounded
//! batches and sent the same way, each settled when it ends.
//!
//! Settling: on SQLite through the group-commit writer
//! (`WriteOp::SettleDeliveries`), so this low-priority thread never holds
//! the one write lock nor invalidates the writer's page cache; on
//! PostgreSQL on the worker's own connection, since its tables are its own
//! and the writers' lanes need not wait for them. The worker's reads go
//! through a pool of its own (whose SQLite connection threads share its
//! priority).
//!
//! What it took and has not settled is in its [`ledger`], given back by a
//! guard's `Drop`, however a turn ends. On PostgreSQL, where every node's
//! worker reads the shared store, a worker also holds what it takes on
//! the database's clock (`store::webhooks::outbox`).
//!
//! The worker waits for work rather than polling for it: a commit that
//! gives it some (events of an org with an active endpoint, a test event)
//! rings the hub's `deliveries`, a turn that ends gives its room back, and
//! the one timer is for the soonest retry an outbox row waits for (on
//! PostgreSQL, or another worker's hold running out). So an idle server
//! reads nothing for webhooks. While the writers are busy with others'
//! work it trickles, paced by `writer_load` as the other background work.
//!
//! At least once: an event leaves the log's cursor or the outbox only
//! once its receiver answered 2xx to each of its types (or the endpoint is
//! disabled or deleted). An endpoint that answers 410, or whose event is
//! still failing after 24 hours, is disabled by its org's actor (on the
//! org's owner: the one writer of its endpoints), which also drops its
//! cursor and rows.

mod ledger;
mod send;
mod turn;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::writer_load::{Pacer, Pacing};
use super::{Engine, PeerOp};
use crate::background::Background;
use crate::domain::{OrgId, WebhookId};
use crate::error::EngineError;
use crate::store::{
    AfterAttempt, DueLog, DueRow, LoggedEvent, Settled, Store, StoreError, StoreOptions, Target,
    Turn, WriteBatch, WriteOp,
};
use crate::webhook_sender::{WebhookSender, DELIVERY_TIMEOUT};
use ledger::{Ledger, Taken};
use send::{Delivered, Entry};
use turn::{newest, Lane, LogTurn, Planned, Stream};

/// Entries and rows taken per look at the store, at most.
const READ: usize = 256;
/// Endpoints with events waiting looked at per look.
const LOGS_READ: i64 = 64;
/// Entries and rows per look: while the writers are busy with other work
/// (`writer_load`), at most 16 per 100 ms, a floor, so a server that stays
/// busy still delivers.
const PACING: Pacing = Pacing {
    step: READ,
    pause: Duration::ZERO,
    busy_step: 16,
    busy_pause: Duration::from_millis(100),
};
/// How soon to look again at something due that could not be taken (its
/// endpoint had no request to spare): not at once, so that is no spin.
const DUE_AGAIN: Duration = Duration::from_millis(50);
/// How soon to look again after the store failed a look: doubling up to
/// the last.
const FIRST_RETRY: Duration = Duration::from_millis(100);
const LAST_RETRY: Duration = Duration::from_secs(5);
/// How long a PostgreSQL worker holds what it took, on the database's
/// clock. A stream that could not finish its next entry before then
/// leaves it (and the rest) as rows, due at once.
const HOLD_MS: i64 = 60_000;
/// The longest one entry's deliveries take: each of its types may wait for
/// the whole timeout.
const ENTRY_AT_MOST_MS: i64 = 3 * DELIVERY_TIMEOUT.as_millis() as i64;
/// The worker's pool: reads only, one at a time.
const CONNECTIONS: u32 = 2;
/// How long the delivery log keeps an attempt, at most.
const KEEP_LOG_MS: i64 = 7 * 24 * 3_600_000;
const PRUNE_EVERY_MS: i64 = 3_600_000;

/// What the engine keeps of its delivery worker: its pool, closed at
/// shutdown (a SQLite connection left open keeps the WAL file), and how
/// many reads it has made of the store.
pub(super) struct DeliveryPool {
    store: Store,
    reads: AtomicU64,
}

impl DeliveryPool {
    pub(super) async fn close(&self) {
        self.store.close().await;
    }
}

impl Engine {
    /// Test hook: how many reads of the store the delivery worker has made.
    #[cfg(feature = "test-hooks")]
    pub fn delivery_reads(&self) -> u64 {
        (self.inner.deliveries.get()).map_or(0, |d| d.reads.load(Ordering::Relaxed))
    }
}

/// The worker's state, shared by its loop and its turns.
struct Worker {
    engine: Engine,
    sender: Arc<dyn WebhookSender>,
    /// Its own pool, opened from its thread.
    store: Store,
    pool: Arc<DeliveryPool>,
    /// The server's own runtime: what must not run at the worker's
    /// priority (an org actor it may start, the log's pruning) runs there.
    main: tokio::runtime::Handle,
    ledger: Arc<Ledger>,
    /// Batches the worker handed to the writers so far.
    own_batches: AtomicU64,
}

impl Engine {
    /// Starts the delivery worker on a low-priority thread of its own.
    pub(super) fn start_deliveries(
        &self,
        sender: Arc<dyn WebhookSender>,
        database_url: &str,
        options: &StoreOptions,
    ) -> Result<tokio::task::JoinHandle<()>, EngineError> {
        let background = Background::start("taskq-webhooks")?;
        let options = StoreOptions {
            max_connections: CONNECTIONS,
            ..options.clone()
        };
        let store = Store::connect_lazy(database_url, &options)?;
        let pool = Arc::new(DeliveryPool {
            store: store.clone(),
            reads: AtomicU64::new(0),
        });
        // Set once: one worker per engine.
        let _ = self.inner.deliveries.set(pool.clone());
        let worker = Arc::new(Worker {
            engine: self.clone(),
            sender,
            store,
            pool,
            main: tokio::runtime::Handle::current(),
            ledger: Arc::default(),
            own_batches: AtomicU64::new(0),
        });
        Ok(background.spawn(worker.run()))
    }
}

impl Worker {
    async fn run(self: Arc<Self>) {
        let mut pruned_at = 0;
        let mut retry = FIRST_RETRY;
        let mut pacer = Pacer::new(PACING);
        let hub = self.engine.inner.hub.clone();
        let mut clock_moves = hub.clock_moves();
        loop {
            let pace = pacer.pace(&self.engine, self.own_batches.load(Ordering::Relaxed));
            let looked = self.start_due(pace.limit).await;
            let now = self.engine.now();
            if now - pruned_at >= PRUNE_EVERY_MS {
                pruned_at = now;
                let engine = self.engine.clone();
                self.main
                    .spawn(async move { engine.prune_deliveries(now).await });
            }
            let wait = match looked {
                // As much as it could take: more may be waiting.
                Ok(started) if started >= pace.limit => {
                    Pacer::pause(pace).await;
                    continue;
                }
                Ok(_) => {
                    retry = FIRST_RETRY;
                    self.next_due(now).await
                }
                Err(e) => {
                    tracing::warn!(error = %e, "webhook deliveries: reading the outbox failed");
                    let wait = retry;
                    retry = (retry * 2).min(LAST_RETRY);
                    Some(wait)
                }
            };
            let prune_in = Duration::from_millis((pruned_at + PRUNE_EVERY_MS - now).max(0) as u64);
            let wait = wait.map_or(prune_in, |w| w.min(prune_in));
            tokio::select! {
                () = hub.deliveries() => {}
                () = self.ledger.given_back() => {}
                // A test moved the clock: a retry may be due.
                Ok(()) = clock_moves.changed() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// How long until something the worker could not take now may be
    /// due (`None`: only a commit or a turn's end brings more).
    async fn next_due(&self, now: i64) -> Option<Duration> {
        let (rows, endpoints) = (self.ledger.rows(), self.ledger.busy_endpoints());
        match self.read(self.store.next_delivery_in(now, &rows, &endpoints).await) {
            Ok(None) => None,
            Ok(Some(ms)) if ms <= 0 => Some(DUE_AGAIN),
            Ok(Some(ms)) => Some(Duration::from_millis(ms as u64)),
            Err(e) => {
                tracing::warn!(error = %e, "webhook deliveries: reading the outbox failed");
                Some(LAST_RETRY)
            }
        }
    }

    /// Starts turns at the endpoints with events waiting and at due rows,
    /// as many entries as there is room for, at most `limit`; answers how
    /// many it took.
    async fn start_due(self: &Arc<Self>, limit: usize) -> Result<usize, EngineError> {
        self.engine.check_store()?;
        let room = self.ledger.room().min(limit);
        let from_logs = self.start_logs(room).await?;
        Ok(from_logs + self.start_rows(room - from_logs).await?)
    }

    /// A read of the worker's, counted.
    fn read<T>(&self, result: Result<T, StoreError>) -> Result<T, EngineError> {
        self.pool.reads.fetch_add(1, Ordering::Relaxed);
        self.engine.stored(result)
    }

    /// Until when a turn taken now may send (PostgreSQL's hold, less the
    /// longest one entry takes), on the engine's clock.
    fn deadline(&self) -> Option<i64> {
        match self.store {
            Store::Postgres(..) => Some(self.engine.now() + HOLD_MS - ENTRY_AT_MOST_MS),
            Store::Sqlite(_) => None,
        }
    }

    /// Takes the endpoints whose org has events after their cursor and
    /// starts a turn at each, within `room` entries; answers how many
    /// entries it took.
    async fn start_logs(self: &Arc<Self>, room: usize) -> Result<usize, EngineError> {
        if room == 0 {
            return Ok(0);
        }
        let due = self.select_logs().await?;
        let mut planned = Vec::new();
        let mut left = room;
        let mut started = 0;
        for (log, target) in due {
            // Each endpoint's share of what is left, so one with a long
            // backlog does not take the whole room.
            let share = left.clamp(1, READ);
            let events = match self
                .store
                .org_events_after(log.org_id, log.cursor, share as i64)
                .await
            {
                // The endpoint waits at that row, and the others go on.
                Err(StoreError::Corrupt(what)) => {
                    tracing::error!(org_id = %log.org_id, webhook_id = %log.webhook_id,
                        "webhook deliveries: the event log does not read: {what}");
                    continue;
                }
                read => self.read(read)?,
            };
            let Some(plan) = self.plan_log(log, target, &events) else {
                continue;
            };
            let entries = plan.turn.entries.len();
            left = left.saturating_sub(entries);
            started += entries.max(1);
            planned.push(plan);
            if left == 0 {
                break;
            }
        }
        let waiting = self.waiting_tasks(&planned).await?;
        for plan in planned {
            let waiting = waiting.get(&plan.stream.webhook).cloned();
            tokio::spawn(self.clone().deliver_log(plan, waiting.unwrap_or_default()));
        }
        Ok(started)
    }

    /// The endpoints with events waiting that are active still, each with
    /// where its events go.
    async fn select_logs(&self) -> Result<Vec<(DueLog, Target)>, EngineError> {
        let skip = self.ledger.busy_endpoints();
        let due = self.read(self.store.take_due_logs(LOGS_READ, &skip, HOLD_MS).await)?;
        if due.is_empty() {
            return Ok(Vec::new());
        }
        let asked: Vec<_> = due.iter().map(|d| (d.org_id, d.webhook_id)).collect();
        let mut targets = self.read(self.store.webhook_targets(&asked).await)?;
        Ok(due
            .into_iter()
            .filter_map(|log| {
                // Deleted or disabled meanwhile: its cursor goes with it.
                let target = targets.remove(&log.webhook_id)?;
                target.active.then_some((log, target))
            })
            .collect())
    }

    /// The turn at an endpoint over `events` (its log after its cursor),
    /// with the requests it takes of the ledger; `None` when the endpoint
    /// has none to spare or its log is in a turn already.
    fn plan_log(&self, log: DueLog, target: Target, events: &[LoggedEvent]) -> Option<Planned> {
        let turn = LogTurn::new(log.cursor, events, &target.subscription);
        let streams = self
            .ledger
            .free_streams(log.webhook_id)
            .min(turn.entries.len());
        let taken = self
            .ledger
            .take_log(log.webhook_id, turn.entries.len(), streams)?;
        Some(Planned {
            stream: Stream {
                org: log.org_id,
                webhook: log.webhook_id,
                target,
                deadline: self.deadline(),
            },
            turn,
            taken,
        })
    }

    /// Of the planned turns' tasks, those with an earlier event waiting in
    /// an outbox row of their endpoint, by endpoint: one read for all.
    async fn waiting_tasks(
        &self,
        planned: &[Planned],
    ) -> Result<HashMap<WebhookId, HashSet<String>>, EngineError> {
        let asked: Vec<(WebhookId, Vec<&str>)> = planned
            .iter()
            .filter(|p| !p.turn.entries.is_empty())
            .map(|p| {
                let tasks = p.turn.entries.iter().map(|e| e.task_key.as_str());
                (p.stream.webhook, tasks.collect())
            })
            .collect();
        if asked.is_empty() {
            return Ok(HashMap::new());
        }
        self.read(self.store.waiting_webhook_tasks(&asked).await)
    }

    /// A turn at an endpoint's log: its entries over the streams it took,
    /// then one settle of the whole turn.
    async fn deliver_log(self: Arc<Self>, plan: Planned, waiting: HashSet<String>) {
        let Planned {
            stream,
            turn,
            taken,
        } = plan;
        let org = stream.org;
        let shared = Arc::new((stream, turn, waiting));
        let mut lanes = tokio::task::JoinSet::new();
        for lane in shared.1.lanes(taken.streams()) {
            let (worker, shared) = (self.clone(), shared.clone());
            lanes.spawn(async move {
                let (stream, turn, waiting) = &*shared;
                worker.deliver_lane(stream, turn, lane, waiting).await
            });
        }
        let mut done = Lane::default();
        while let Some(lane) = lanes.join_next().await {
            match lane {
                Ok(lane) => {
                    done.rows.extend(lane.rows);
                    done.log.extend(lane.log);
                    done.disable |= lane.disable;
                }
                // A stream that panicked: nothing of the turn is settled,
                // and its events are read again after the ledger lets go.
                Err(e) => {
                    tracing::error!(org_id = %org, error = %e, "a webhook delivery failed");
                    return;
                }
            }
        }
        let (stream, turn, _) = &*shared;
        let settled = Settled {
            webhook_id: stream.webhook,
            turn: turn.settled(done.rows),
            log: newest(done.log, crate::store::LOG_KEPT as usize),
        };
        self.settle(org, settled).await;
        if done.disable {
            self.disable(org, stream.webhook).await;
        }
        drop(taken);
    }

    /// Takes the due rows there is room for and starts streams to their
    /// endpoints; answers how many rows it took.
    async fn start_rows(self: &Arc<Self>, room: usize) -> Result<usize, EngineError> {
        if room == 0 {
            return Ok(0);
        }
        let now = self.engine.now();
        let skip = self.ledger.rows();
        let due = self.read(
            self.store
                .take_due_rows(now, room as i64, room as i64, &skip, HOLD_MS)
                .await,
        )?;
        let mut by_endpoint: HashMap<(OrgId, WebhookId), Vec<DueRow>> = HashMap::new();
        for row in due {
            by_endpoint
                .entry((row.org_id, row.webhook_id))
                .or_default()
                .push(row);
        }
        let asked: Vec<_> = by_endpoint.keys().copied().collect();
        let mut targets = self.read(self.store.webhook_targets(&asked).await)?;
        let mut started = 0;
        for ((org, webhook), rows) in by_endpoint {
            let target = targets.remove(&webhook);
            let streams = self.ledger.free_streams(webhook).min(rows.len());
            let mut split: Vec<Vec<DueRow>> = vec![Vec::new(); streams];
            for (i, row) in rows.into_iter().enumerate() {
                if streams > 0 {
                    split[i % streams].push(row);
                }
            }
            for rows in split {
                let ids = rows.iter().map(|r| r.outbox_id).collect();
                let Some(taken) = self.ledger.take_rows(webhook, ids) else {
                    continue;
                };
                started += rows.len();
                let stream = RowStream {
                    org,
                    webhook,
                    target: target.clone(),
                    deadline: self.deadline(),
                };
                tokio::spawn(self.clone().deliver_rows(stream, rows, taken));
            }
        }
        Ok(started)
    }

    /// One request at a time to one endpoint: each row's types not yet
    /// delivered, one after another, until one fails; each row settled as
    /// it ends.
    async fn deliver_rows(self: Arc<Self>, stream: RowStream, rows: Vec<DueRow>, taken: Taken) {
        let RowStream {
            org,
            webhook,
            target,
            deadline,
        } = stream;
        let mut disable = false;
        for row in rows {
            if disable || deadline.is_some_and(|d| self.engine.now() > d) {
                // Held no longer than this stream could keep it: taken again later.
                continue;
            }
            let Delivered {
                after,
                log,
                disable: gone,
            } = match target.as_ref().filter(|t| t.active) {
                Some(target) => self.deliver(org, webhook, target, &Entry::row(&row)).await,
                // The endpoint is gone or disabled: the row goes with it.
                None => Delivered {
                    after: AfterAttempt::Done,
                    log: Vec::new(),
                    disable: false,
                },
            };
            disable = gone;
            let settled = Settled {
                webhook_id: webhook,
                turn: Turn::Row {
                    outbox_id: row.outbox_id,
                    after,
                },
                log,
            };
            self.settle(org, settled).await;
        }
        if disable {
            self.disable(org, webhook).await;
        }
        drop(taken);
    }

    /// Tells the org's owner that the endpoint is to get nothing more.
    async fn disable(&self, org: OrgId, webhook: WebhookId) {
        tracing::info!(org_id = %org, webhook_id = %webhook, "webhook disabled");
        let op = PeerOp::DisableWebhook { org, webhook };
        let engine = self.engine.clone();
        // On the server's runtime: it may start the org's actor.
        let done = self.main.spawn(async move { engine.on_owner(op).await });
        if let Ok(Err(e)) = done.await {
            tracing::warn!(org_id = %org, error = %e, "disabling a webhook failed");
        }
    }

    /// Records a turn and waits until it is durable. One that is not
    /// recorded is taken again once its ledger entry is given back (and,
    /// on PostgreSQL, its hold runs out).
    async fn settle(&self, org: OrgId, settled: Settled) {
        let result = match &self.store {
            Store::Postgres(..) => self.store.settle_deliveries(org, &[settled]).await,
            Store::Sqlite(_) => {
                let batch = WriteBatch::new(org, vec![WriteOp::SettleDeliveries(vec![settled])]);
                self.own_batches.fetch_add(1, Ordering::Relaxed);
                match self.engine.inner.writers.reserve_waiting(org).await {
                    Ok(slot) => match slot.submit(batch).await {
                        Ok(result) => result,
                        Err(_) => Err(StoreError::WriterGone),
                    },
                    Err(e) => Err(e),
                }
            }
        };
        if let Err(e) = result {
            tracing::warn!(org_id = %org, error = %e, "recording a webhook delivery failed");
        }
    }
}

/// A stream of rows' endpoint (`None` once it is deleted).
struct RowStream {
    org: OrgId,
    webhook: WebhookId,
    target: Option<Target>,
    deadline: Option<i64>,
}

impl Engine {
    /// Forgets the delivery log's attempts older than it keeps (from the
    /// server's runtime and pool: a delete of many rows).
    async fn prune_deliveries(&self, now: i64) {
        if self.check_store().is_err() {
            return;
        }
        if let Err(e) = self
            .inner
            .store
            .prune_webhook_deliveries(now - KEEP_LOG_MS)
            .await
        {
            tracing::warn!(error = %e, "webhook deliveries: pruning the log failed");
        }
    }
}
