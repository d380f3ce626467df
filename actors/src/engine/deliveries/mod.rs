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

use super::writer_load::WriterLoad;
use super::{Engine, PeerOp};
use crate::background::Background;
use crate::domain::OrgId;
use crate::error::EngineError;
use crate::store::{
    AfterAttempt, DueRow, Settled, Store, StoreError, StoreOptions, Target, Turn, WriteBatch,
    WriteOp,
};
use crate::webhook_sender::{WebhookSender, DELIVERY_TIMEOUT};
use ledger::{Ledger, Taken};
use send::{Delivered, Entry};
use turn::{newest, Lane, LogTurn};

/// Entries and rows taken per look at the store, at most.
const READ: usize = 256;
/// Endpoints with events waiting looked at per look.
const LOGS_READ: i64 = 64;
/// While the writers are busy with other work (`writer_load`), at most this many
/// entries and rows per [`BUSY_POLL`]: a floor, so a server that stays
/// busy still delivers.
const TRICKLE: usize = 16;
const BUSY_POLL: Duration = Duration::from_millis(100);
/// How soon a worker that found nothing looks again: at first soon, then
/// less and less often while nothing comes, so an idle server spends next
/// to nothing on it.
const FIRST_IDLE_POLL: Duration = Duration::from_millis(100);
const LAST_IDLE_POLL: Duration = Duration::from_secs(1);
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

/// The worker's state, shared by its loop and its turns.
struct Worker {
    engine: Engine,
    sender: Arc<dyn WebhookSender>,
    /// Its own pool, opened from its thread.
    store: Store,
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
        let worker = Arc::new(Worker {
            engine: self.clone(),
            sender,
            store: Store::connect_lazy(database_url, &options)?,
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
        let mut idle = FIRST_IDLE_POLL;
        let mut load = WriterLoad::default();
        loop {
            let busy = load.busy_now(&self.engine, self.own_batches.load(Ordering::Relaxed));
            let limit = if busy { TRICKLE } else { READ };
            let started = match self.start_due(limit).await {
                Ok(started) => started,
                Err(e) => {
                    tracing::warn!(error = %e, "webhook deliveries: reading the outbox failed");
                    0
                }
            };
            let now = self.engine.now();
            if now - pruned_at >= PRUNE_EVERY_MS {
                pruned_at = now;
                let engine = self.engine.clone();
                self.main
                    .spawn(async move { engine.prune_deliveries(now).await });
            }
            if busy {
                tokio::time::sleep(BUSY_POLL).await;
            } else if started == 0 {
                tokio::select! {
                    _ = self.ledger.given_back() => {}
                    _ = tokio::time::sleep(idle) => idle = (idle * 2).min(LAST_IDLE_POLL),
                }
            } else {
                idle = FIRST_IDLE_POLL;
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

    fn read<T>(&self, result: Result<T, StoreError>) -> Result<T, EngineError> {
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
        let skip = self.ledger.busy_endpoints();
        let due = self.read(self.store.take_due_logs(LOGS_READ, &skip, HOLD_MS).await)?;
        let mut left = room;
        let mut started = 0;
        for log in due {
            let Ok(org) = log.org_id.parse::<OrgId>() else {
                continue;
            };
            let target = self.read(self.store.webhook_target(org, &log.webhook_id).await)?;
            let Some(target) = target.filter(|t| t.active) else {
                // Deleted or disabled meanwhile: its cursor goes with it.
                continue;
            };
            // Each endpoint's share of what is left, so one with a long
            // backlog does not take the whole room.
            let share = left.clamp(1, READ);
            let events = self.read(
                self.store
                    .org_events_after(org, log.cursor, share as i64)
                    .await,
            )?;
            let turn = LogTurn::new(log.cursor, &events, &target.subscription);
            let streams = self
                .ledger
                .free_streams(&log.webhook_id)
                .min(turn.entries.len());
            let Some(taken) = self
                .ledger
                .take_log(&log.webhook_id, turn.entries.len(), streams)
            else {
                continue;
            };
            let tasks: Vec<&str> = turn.entries.iter().map(|e| e.task_key.as_str()).collect();
            let waiting = if tasks.is_empty() {
                HashSet::new()
            } else {
                self.read(
                    self.store
                        .waiting_webhook_tasks(&log.webhook_id, &tasks)
                        .await,
                )?
            };
            left = left.saturating_sub(turn.entries.len());
            started += turn.entries.len().max(1);
            let stream = Stream {
                org,
                webhook: log.webhook_id,
                target,
                deadline: self.deadline(),
            };
            tokio::spawn(self.clone().deliver_log(stream, turn, waiting, taken));
            if left == 0 {
                break;
            }
        }
        Ok(started)
    }

    /// A turn at an endpoint's log: its entries over the streams it took,
    /// then one settle of the whole turn.
    async fn deliver_log(
        self: Arc<Self>,
        stream: Stream,
        turn: LogTurn,
        waiting: HashSet<String>,
        taken: Taken,
    ) {
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
            webhook_id: stream.webhook.clone(),
            turn: turn.settled(done.rows),
            log: newest(done.log, crate::store::LOG_KEPT as usize),
        };
        self.settle(org, settled).await;
        if done.disable {
            self.disable(org, &stream.webhook).await;
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
        let mut by_endpoint: HashMap<String, Vec<DueRow>> = HashMap::new();
        for row in due {
            by_endpoint
                .entry(row.webhook_id.clone())
                .or_default()
                .push(row);
        }
        let mut started = 0;
        for (webhook, rows) in by_endpoint {
            let Some(org) = rows.first().and_then(|r| r.org_id.parse::<OrgId>().ok()) else {
                continue;
            };
            let target = self.read(self.store.webhook_target(org, &webhook).await)?;
            let streams = self.ledger.free_streams(&webhook).min(rows.len());
            let mut split: Vec<Vec<DueRow>> = vec![Vec::new(); streams];
            for (i, row) in rows.into_iter().enumerate() {
                if streams > 0 {
                    split[i % streams].push(row);
                }
            }
            for rows in split {
                let ids = rows.iter().map(|r| r.outbox_id).collect();
                let Some(taken) = self.ledger.take_rows(&webhook, ids) else {
                    continue;
                };
                started += rows.len();
                let stream = RowStream {
                    org,
                    webhook: webhook.clone(),
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
            } = match (target.as_ref().filter(|t| t.active), Entry::row(&row)) {
                (Some(target), Some(entry)) => self.deliver(org, &webhook, target, &entry).await,
                // The endpoint is gone or disabled: the row goes with it.
                (None, _) => Delivered {
                    after: AfterAttempt::Done,
                    log: Vec::new(),
                    disable: false,
                },
                (Some(_), None) => {
                    tracing::warn!(org_id = %org, outbox_id = row.outbox_id,
                        "an outbox row names an unknown event type or status: dropped");
                    Delivered {
                        after: AfterAttempt::Done,
                        log: Vec::new(),
                        disable: false,
                    }
                }
            };
            disable = gone;
            let settled = Settled {
                webhook_id: webhook.clone(),
                turn: Turn::Row {
                    outbox_id: row.outbox_id,
                    after,
                },
                log,
            };
            self.settle(org, settled).await;
        }
        if disable {
            self.disable(org, &webhook).await;
        }
        drop(taken);
    }

    /// Tells the org's owner that the endpoint is to get nothing more.
    async fn disable(&self, org: OrgId, webhook: &str) {
        tracing::info!(org_id = %org, webhook_id = %webhook, "webhook disabled");
        let op = PeerOp::DisableWebhook {
            org,
            webhook: webhook.to_owned(),
        };
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

/// A turn's endpoint, and until when it may send (PostgreSQL).
struct Stream {
    org: OrgId,
    webhook: String,
    target: Target,
    deadline: Option<i64>,
}

/// A stream of rows' endpoint (`None` once it is deleted).
struct RowStream {
    org: OrgId,
    webhook: String,
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
