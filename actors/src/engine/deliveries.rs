//! The webhook delivery worker: one per server, off every request's path,
//! on a low-priority thread of its own (`background`), so a backlog of
//! deliveries takes the CPU claims leave and never the other way round.
//!
//! It reads the outbox through a pool of its own (whose SQLite connection
//! threads share its priority). Most events come in packs, one per commit
//! and endpoint: a turn at an endpoint's first pack splits its entries
//! over at most [`PER_ENDPOINT`] streams, each task's entries in one
//! stream, and each stream sends one request at a time: every type of an
//! entry, signed with the endpoint's secrets and handed to the
//! [`WebhookSender`], then the next. One commit settles the turn: the
//! pack's new start (or its end), and rows of their own for the entries
//! that failed or wait behind an earlier event of their task. Due rows are
//! read in bounded batches and split over streams the same way, and each
//! row's turn is settled as soon as it ends (it goes, or waits for its
//! next attempt); a stream does not wait for one row's commit before it
//! sends the next, and a row is not read again until its turn is
//! committed. Every settling, with the attempts' log, goes to the
//! group-commit writer (`WriteOp::SettleDeliveries`), which coalesces it
//! with everything else it commits: the worker never holds SQLite's write
//! lock, and never invalidates the writer's page cache. At most [`TAKEN`]
//! entries and rows are taken at once, which bounds the worker's memory.
//!
//! Packs and rows are taken differently per backend. On PostgreSQL, where
//! several nodes deliver, a conditional UPDATE holds them for [`HOLD_MS`],
//! so no other node sends them meanwhile and a worker that dies leaves
//! them due again. SQLite has one server: the worker remembers what it
//! took until its turn is committed, and after a crash it is simply due.
//!
//! At least once: a row leaves the outbox only once its receiver answered
//! 2xx to each of its types (or the endpoint is disabled or deleted). An
//! endpoint that answers 410, or whose event is still failing after 24
//! hours, is disabled by its org's actor (on the org's owner), which also
//! drops its pending events.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use serde_json::json;
use tokio::sync::Notify;

use super::{Engine, PeerOp};
use crate::background::Background;
use crate::clock::format_ms;
use crate::domain::webhooks::{message_id, next_attempt, signature_header, EventSet, EventType};
use crate::domain::OrgId;
use crate::error::EngineError;
use crate::store::{
    AfterAttempt, DeliveryRecord, DueEvent, DuePack, Later, Settled, Store, StoreError,
    StoreOptions, Target, Turn, WriteBatch, WriteOp,
};
use crate::webhook_sender::{Delivery, Sent, WebhookSender, DELIVERY_TIMEOUT};
use crate::writer::Commit;

/// Rows and pack entries a worker has taken and not yet settled, all
/// endpoints together: what bounds its memory.
const TAKEN: usize = 512;
/// Rows and pack entries taken per look at the outbox.
const READ: usize = 256;
/// Packs read per look at the outbox (the first of each endpoint's).
const PACKS_READ: i64 = 64;
/// Packs after an endpoint's first read at once to fill its turn.
const FOLLOWING_PACKS: i64 = 16;
/// Requests in flight at once to one endpoint: a slow one takes no more.
/// Each is a stream that sends its rows one after another, and settles
/// each without waiting for the one before to be committed.
const PER_ENDPOINT: usize = 8;
/// How long a PostgreSQL worker holds the rows it took. A stream that
/// could not finish its next row before then leaves it (and the rest) to
/// be taken again.
const HOLD_MS: i64 = 60_000;
/// The longest one row's deliveries take: each of its types may wait for
/// the whole timeout.
const ROW_AT_MOST_MS: i64 = 3 * DELIVERY_TIMEOUT.as_millis() as i64;
/// Deliveries yield to claims beyond the CPU too: what they write goes
/// through the writers, whose commits every claim waits for, and on
/// PostgreSQL what they read and hold runs in the server's processes at
/// its own priority. While the writers together spent more than this
/// share of the last [`LOAD_WINDOW`] committing for everything else (their
/// time, in proportion to the batches that were not the worker's own;
/// summed over PostgreSQL's several writers), the worker takes at most
/// [`TRICKLE`] rows per [`BUSY_POLL`] (a floor, so a server that stays
/// busy still delivers), and catches up at full speed once they are not.
const BUSY_SHARE: f64 = 0.5;
const LOAD_WINDOW: Duration = Duration::from_millis(100);
const TRICKLE: usize = 16;
const BUSY_POLL: Duration = Duration::from_millis(100);
/// How soon a worker that found nothing looks again: at first soon, then
/// less and less often while nothing comes, so an idle server spends
/// next to nothing on it.
const FIRST_IDLE_POLL: Duration = Duration::from_millis(100);
const LAST_IDLE_POLL: Duration = Duration::from_secs(1);
/// The worker's pool: reads only, one at a time.
const CONNECTIONS: u32 = 2;
/// How long the delivery log keeps an attempt.
const KEEP_LOG_MS: i64 = 7 * 24 * 3_600_000;
const PRUNE_EVERY_MS: i64 = 3_600_000;

/// The rows and packs a worker took and has not settled yet, and the
/// requests in flight to each endpoint.
#[derive(Default)]
struct Taken {
    rows: HashSet<i64>,
    packs: HashSet<i64>,
    /// The packs' entries taken.
    entries: usize,
    sending: HashMap<String, usize>,
}

impl Taken {
    fn count(&self) -> usize {
        self.rows.len() + self.entries
    }

    fn sending_to(&self, webhook: &str) -> usize {
        self.sending.get(webhook).copied().unwrap_or(0)
    }

    fn stream_ended(&mut self, webhook: &str) {
        if let Some(n) = self.sending.get_mut(webhook) {
            *n -= 1;
            if *n == 0 {
                self.sending.remove(webhook);
            }
        }
    }
}

/// The worker's state, shared by its loop and its deliveries.
struct Worker {
    engine: Engine,
    sender: Arc<dyn WebhookSender>,
    /// Its own pool, opened from its thread.
    store: Store,
    /// The server's own runtime: what must not run at the worker's
    /// priority (an org actor it may start, the log's pruning) runs there.
    main: tokio::runtime::Handle,
    taken: Mutex<Taken>,
    /// Rung when a stream ends or its rows are settled: there is room
    /// again.
    settled: Notify,
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
            taken: Mutex::default(),
            settled: Notify::new(),
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
            let writers = &self.engine.inner.writers;
            let totals = writers.stats().totals();
            let busy = load.busy(
                std::time::Instant::now(),
                Committed {
                    micros: totals.commit_micros,
                    batches: totals.batches,
                    own: self.own_batches.load(Ordering::Relaxed),
                },
            );
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
                    _ = self.settled.notified() => {}
                    _ = tokio::time::sleep(idle) => idle = (idle * 2).min(LAST_IDLE_POLL),
                }
            } else {
                idle = FIRST_IDLE_POLL;
            }
        }
    }

    /// Takes the due packs' entries and rows there is room for and starts
    /// streams to their endpoints; answers how many it took.
    async fn start_due(self: &Arc<Self>, limit: usize) -> Result<usize, EngineError> {
        self.engine.check_store()?;
        let (room, skip_packs) = {
            let taken = self.taken.lock().expect("not poisoned");
            let skip: Vec<i64> = taken.packs.iter().copied().collect();
            (TAKEN.saturating_sub(taken.count()).min(limit), skip)
        };
        let from_packs = self.start_packs(room, &skip_packs).await?;
        Ok(from_packs + self.start_rows(room - from_packs).await?)
    }

    /// Whether rows are held, and until when (PostgreSQL).
    fn hold_until(&self, now: i64) -> Option<i64> {
        match self.store {
            Store::Postgres(..) => Some(now + HOLD_MS),
            Store::Sqlite(_) => None,
        }
    }

    /// Takes up to `room` entries of the endpoints' first packs, each
    /// pack's from where it was left, and starts a turn at each; answers
    /// how many entries it took.
    async fn start_packs(
        self: &Arc<Self>,
        room: usize,
        skip: &[i64],
    ) -> Result<usize, EngineError> {
        if room == 0 {
            return Ok(0);
        }
        let now = self.engine.now();
        let mut packs = self.read(self.store.due_webhook_packs(now, PACKS_READ, skip).await)?;
        // Each pack's share of the room, in order, if its endpoint has a
        // request to spare; what is left fills the turns, first come
        // first served.
        let mut left = room;
        let mut shares = HashMap::new();
        {
            let taken = self.taken.lock().expect("not poisoned");
            packs.retain(|p| {
                let take = left > 0 && taken.sending_to(&p.webhook_id) < PER_ENDPOINT;
                if take {
                    let share = p.entries.len().min(left);
                    shares.insert(p.pack_id, share);
                    left -= share;
                }
                take
            });
        }
        let hold_until = self.hold_until(now);
        if let Some(until) = hold_until {
            let ids: Vec<i64> = packs.iter().map(|p| p.pack_id).collect();
            if ids.is_empty() {
                return Ok(0);
            }
            let held: HashSet<i64> = self
                .read(self.store.hold_webhook_packs(&ids, now, until).await)?
                .into_iter()
                .collect();
            packs.retain(|p| held.contains(&p.pack_id));
        }
        let mut started = 0;
        for pack in packs {
            let Ok(org) = pack.org_id.parse::<OrgId>() else {
                continue;
            };
            let target = self.read(self.store.webhook_target(org, &pack.webhook_id).await)?;
            let share = shares.get(&pack.pack_id).copied().unwrap_or(0);
            let turn = self.fill_turn(pack, share + left).await?;
            let budget = turn.entries.len();
            left -= budget - share.min(budget);
            let tasks: Vec<&str> = turn.entries.iter().map(|e| e.task_key.as_str()).collect();
            let waiting = self.read(
                self.store
                    .waiting_webhook_tasks(&turn.webhook, &tasks)
                    .await,
            )?;
            let webhook = turn.webhook.clone();
            let streams = {
                let mut taken = self.taken.lock().expect("not poisoned");
                let streams = (PER_ENDPOINT - taken.sending_to(&webhook)).min(budget.max(1));
                taken.packs.insert(turn.first());
                taken.entries += budget;
                *taken.sending.entry(webhook.clone()).or_default() += streams;
                streams
            };
            started += budget;
            let stream = Stream {
                org,
                webhook,
                target,
                hold_until,
            };
            tokio::spawn(self.clone().deliver_packs(stream, turn, streams, waiting));
        }
        Ok(started)
    }

    /// A turn at an endpoint's first pack: at most `room` entries of it
    /// and of the packs after it, in order, so that one commit settles
    /// several small packs.
    async fn fill_turn(&self, first: DuePack, room: usize) -> Result<PackTurn, EngineError> {
        let mut turn = PackTurn {
            webhook: first.webhook_id.clone(),
            segments: Vec::new(),
            entries: Vec::new(),
        };
        turn.add(first, room);
        let mut last = turn.first();
        while turn.entries.len() < room {
            let next = self.read(
                self.store
                    .following_webhook_packs(&turn.webhook, last, FOLLOWING_PACKS)
                    .await,
            )?;
            let (Some(end), fewer) = (
                next.last().map(|p| p.pack_id),
                next.len() < FOLLOWING_PACKS as usize,
            ) else {
                break;
            };
            for pack in next {
                turn.add(pack, room);
            }
            if fewer {
                break;
            }
            last = end;
        }
        Ok(turn)
    }

    /// Takes the due rows there is room for and starts streams to their
    /// endpoints; answers how many rows it took.
    async fn start_rows(self: &Arc<Self>, room: usize) -> Result<usize, EngineError> {
        let skip: Vec<i64> = {
            let taken = self.taken.lock().expect("not poisoned");
            taken.rows.iter().copied().collect()
        };
        if room == 0 {
            return Ok(0);
        }
        let now = self.engine.now();
        let due = self.read(
            self.store
                .due_webhook_events(now, room as i64, room as i64, &skip)
                .await,
        )?;
        // Each endpoint's rows, if it has a request to spare.
        let mut by_endpoint: HashMap<String, Vec<DueEvent>> = HashMap::new();
        {
            let taken = self.taken.lock().expect("not poisoned");
            for e in due {
                if taken.sending_to(&e.webhook_id) < PER_ENDPOINT {
                    by_endpoint.entry(e.webhook_id.clone()).or_default().push(e);
                }
            }
        }
        let hold_until = self.hold_until(now);
        if let Some(until) = hold_until {
            let ids: Vec<i64> = by_endpoint
                .values()
                .flatten()
                .map(|e| e.outbox_id)
                .collect();
            if ids.is_empty() {
                return Ok(0);
            }
            let held: HashSet<i64> = self
                .read(self.store.hold_webhook_events(&ids, now, until).await)?
                .into_iter()
                .collect();
            for rows in by_endpoint.values_mut() {
                rows.retain(|e| held.contains(&e.outbox_id));
            }
        }
        let mut started = 0;
        for (webhook, rows) in by_endpoint {
            let Some(org) = rows.first().and_then(|e| e.org_id.parse::<OrgId>().ok()) else {
                continue;
            };
            let target = self.read(self.store.webhook_target(org, &webhook).await)?;
            let mut taken = self.taken.lock().expect("not poisoned");
            let free = PER_ENDPOINT - taken.sending_to(&webhook);
            let streams = free.min(rows.len());
            let mut split: Vec<Vec<DueEvent>> = vec![Vec::new(); streams];
            for (i, e) in rows.into_iter().enumerate() {
                taken.rows.insert(e.outbox_id);
                split[i % streams].push(e);
                started += 1;
            }
            *taken.sending.entry(webhook.clone()).or_default() += streams;
            drop(taken);
            for rows in split {
                let stream = Stream {
                    org,
                    webhook: webhook.clone(),
                    target: target.clone(),
                    hold_until,
                };
                tokio::spawn(self.clone().stream(stream, rows));
            }
        }
        Ok(started)
    }

    fn read<T>(&self, result: Result<T, StoreError>) -> Result<T, EngineError> {
        self.engine.stored(result)
    }

    /// One request at a time to one endpoint: each row's types not yet
    /// delivered, one after another, until one fails; what came of each
    /// row goes to the writer at once. The stream's request slot is free
    /// when its last request ends; its rows are free once their turns are
    /// committed (until then they are not read again).
    async fn stream(self: Arc<Self>, stream: Stream, rows: Vec<DueEvent>) {
        let Stream {
            org,
            webhook,
            target,
            hold_until,
        } = stream;
        let mut commits = Vec::new();
        let mut left = Vec::new();
        let mut disable = false;
        for row in rows {
            let late = hold_until.is_some_and(|until| self.engine.now() + ROW_AT_MOST_MS > until);
            if late || disable {
                // Held no longer than this stream could keep it: taken again later.
                left.push(row.outbox_id);
                continue;
            }
            let (after, log, gone) = match target.as_ref().filter(|t| t.active) {
                // The endpoint is gone or disabled: the row goes with it.
                None => (AfterAttempt::Done, Vec::new(), false),
                Some(target) => self.send_types(org, &row, target).await,
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
            commits.push((row.outbox_id, self.settle(org, settled).await));
        }
        self.taken
            .lock()
            .expect("not poisoned")
            .stream_ended(&webhook);
        self.settled.notify_one();
        if disable {
            self.disable(org, &webhook).await;
        }
        for (outbox_id, commit) in commits {
            committed(org, commit).await;
            left.push(outbox_id);
        }
        let mut taken = self.taken.lock().expect("not poisoned");
        for id in left {
            taken.rows.remove(&id);
        }
        drop(taken);
        self.settled.notify_one();
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

    /// A turn at packs: their entries over `streams` streams, each task's
    /// entries in one stream and in order; the entries of a task with an
    /// event waiting in a row (`waiting`), and those after one that
    /// failed, become rows behind it. One commit settles the turn: the
    /// rows, the packs done, the last one's new start, the log.
    async fn deliver_packs(
        self: Arc<Self>,
        stream: Stream,
        turn: PackTurn,
        streams: usize,
        waiting: HashSet<String>,
    ) {
        let org = stream.org;
        let webhook = stream.webhook.clone();
        let first = turn.first();
        let budget = turn.entries.len();
        let (done, left) = turn.settled();
        let entries = turn.entries;
        let (fates, log, disable) = match stream.target.as_ref().filter(|t| t.active) {
            // The endpoint is gone or disabled: its events go with it.
            None => (Vec::new(), Vec::new(), false),
            Some(_) => {
                let stream = Arc::new(stream);
                let waiting = Arc::new(waiting);
                let mut lanes: Vec<Vec<(usize, DueEvent)>> = vec![Vec::new(); streams];
                for (i, e) in entries.into_iter().enumerate() {
                    lanes[lane_of(&e.task_key, streams)].push((i, e));
                }
                let mut set = tokio::task::JoinSet::new();
                for lane in lanes.into_iter().filter(|l| !l.is_empty()) {
                    let worker = self.clone();
                    let (stream, waiting) = (stream.clone(), waiting.clone());
                    set.spawn(async move { worker.deliver_lane(&stream, &waiting, lane).await });
                }
                let mut fates = Vec::new();
                let mut log = Vec::new();
                let mut disable = false;
                while let Some(done) = set.join_next().await {
                    match done {
                        Ok(lane) => {
                            fates.extend(lane.fates);
                            log.extend(lane.log);
                            disable |= lane.disable;
                        }
                        // A lane that panicked: the whole turn is taken again.
                        Err(e) => {
                            tracing::error!(org_id = %org, error = %e, "a webhook delivery failed");
                            self.release_pack(&webhook, first, budget, streams);
                            return;
                        }
                    }
                }
                fates.sort_by_key(|(i, _)| *i);
                (fates, log, disable)
            }
        };
        let rows = fates.into_iter().filter_map(|(_, later)| later).collect();
        let settled = Settled {
            webhook_id: webhook.clone(),
            turn: Turn::Packs { done, left, rows },
            log,
        };
        let commit = self.settle(org, settled).await;
        self.release_streams(&webhook, streams);
        if disable {
            self.disable(org, &webhook).await;
        }
        committed(org, commit).await;
        self.untake_pack(first, budget);
    }

    /// One stream of a pack's turn: its entries one after another. What
    /// comes of each: `None` if it is done with, else the row it becomes.
    async fn deliver_lane(
        &self,
        stream: &Stream,
        waiting: &HashSet<String>,
        lane: Vec<(usize, DueEvent)>,
    ) -> Lane {
        let target = stream.target.as_ref().expect("an active endpoint's lane");
        let mut out = Lane::default();
        let mut failed: HashSet<String> = HashSet::new();
        let mut stop = false;
        for (index, e) in lane {
            let now = self.engine.now();
            let late = stream
                .hold_until
                .is_some_and(|until| now + ROW_AT_MOST_MS > until);
            stop |= late;
            if stop || waiting.contains(&e.task_key) || failed.contains(&e.task_key) {
                // Not tried: a row of its own, behind its task's events.
                let later = Later {
                    event: e,
                    next_attempt_at: now,
                };
                out.fates.push((index, Some(later)));
                continue;
            }
            let (after, log, gone) = self.send_types(stream.org, &e, target).await;
            out.log.extend(log);
            stop |= gone;
            out.disable |= gone;
            let later = match after {
                AfterAttempt::Done => None,
                AfterAttempt::Retry { sent, attempts, at } => {
                    failed.insert(e.task_key.clone());
                    Some(Later {
                        event: DueEvent {
                            sent,
                            attempts,
                            ..e
                        },
                        next_attempt_at: at,
                    })
                }
            };
            out.fates.push((index, later));
        }
        out
    }

    /// Frees a stream's request slots.
    fn release_streams(&self, webhook: &str, streams: usize) {
        let mut taken = self.taken.lock().expect("not poisoned");
        for _ in 0..streams {
            taken.stream_ended(webhook);
        }
        drop(taken);
        self.settled.notify_one();
    }

    /// Gives back a pack whose turn did not finish: it is taken again.
    fn release_pack(&self, webhook: &str, pack_id: i64, budget: usize, streams: usize) {
        self.release_streams(webhook, streams);
        self.untake_pack(pack_id, budget);
    }

    /// Forgets a turn's packs once it is settled (or given back).
    fn untake_pack(&self, pack_id: i64, budget: usize) {
        let mut taken = self.taken.lock().expect("not poisoned");
        taken.packs.remove(&pack_id);
        taken.entries -= budget;
        drop(taken);
        self.settled.notify_one();
    }

    /// Sends the row's types from the first not yet delivered; answers
    /// what becomes of the row, the attempts made, and whether the
    /// endpoint is to be disabled.
    async fn send_types(
        &self,
        org: OrgId,
        row: &DueEvent,
        target: &Target,
    ) -> (AfterAttempt, Vec<DeliveryRecord>, bool) {
        let mut log = Vec::new();
        let types = match EventSet::parse(&row.types) {
            Ok(types) => types,
            Err(e) => {
                tracing::warn!(org_id = %org, outbox_id = row.outbox_id, error = %e,
                    "an outbox row names an unknown event type: dropped");
                return (AfterAttempt::Done, log, false);
            }
        };
        let first = usize::try_from(row.sent).unwrap_or(0);
        let mut attempts = row.attempts;
        for (index, event) in types.iter().enumerate().skip(first) {
            let event_id = message_id(&row.event_id, index);
            let body = body(&row.org_id, event, row);
            let sent = match self.sign(org, row, target, &event_id, &body) {
                Ok((timestamp, signature)) => {
                    let headers = [
                        ("webhook-id", event_id.clone()),
                        ("webhook-timestamp", timestamp.to_string()),
                        ("webhook-signature", signature),
                    ];
                    self.sender
                        .send(Delivery {
                            url: &target.url,
                            headers,
                            body: &body,
                        })
                        .await
                }
                Err(e) => Sent {
                    error: Some(e),
                    ..Sent::default()
                },
            };
            let at = self.engine.now();
            let attempt = attempts + 1;
            let gone = sent.status == Some(410);
            let next = (!sent.succeeded() && !gone)
                .then(|| {
                    let jitter = rand::thread_rng().gen_range(-1.0..=1.0);
                    let failed = u32::try_from(attempt).unwrap_or(u32::MAX);
                    next_attempt(failed, row.created_at, at, jitter, sent.retry_after)
                })
                .flatten();
            let error = match (sent.status, sent.error) {
                (_, Some(e)) => Some(e),
                (Some(s), None) if !(200..300).contains(&s) => {
                    Some(format!("the receiver answered {s}"))
                }
                _ => None,
            };
            log.push(DeliveryRecord {
                delivery_id: uuid::Uuid::now_v7().to_string(),
                event_id,
                event_type: event.as_str().to_owned(),
                attempt,
                status_code: sent.status.map(i64::from),
                error,
                response: (!sent.response.is_empty()).then_some(sent.response),
                at,
                next_attempt_at: next,
            });
            if sent.status.is_some_and(|s| (200..300).contains(&s)) {
                attempts = 0;
                continue;
            }
            let after = match next {
                Some(at) => AfterAttempt::Retry {
                    sent: index as i64,
                    attempts: attempt,
                    at,
                },
                None => AfterAttempt::Done,
            };
            return (after, log, next.is_none());
        }
        (AfterAttempt::Done, log, false)
    }

    /// The `webhook-timestamp` and `webhook-signature` of one delivery:
    /// one signature per secret in use (two while a rotated-out one still
    /// signs).
    fn sign(
        &self,
        org: OrgId,
        row: &DueEvent,
        target: &Target,
        event_id: &str,
        body: &str,
    ) -> Result<(i64, String), String> {
        let now = self.engine.now();
        let keyring = self.engine.inner.directory.keyring();
        let opened = |sealed| {
            keyring
                .open_webhook_secret(org, &row.webhook_id, sealed)
                .map_err(|e| format!("the endpoint's secret does not open: {e}"))
        };
        let mut secrets = vec![opened(&target.secret)?];
        if let Some((previous, until)) = &target.previous {
            if *until > now {
                secrets.push(opened(previous)?);
            }
        }
        let timestamp = now / 1000;
        let signature = signature_header(
            secrets.iter().map(Vec::as_slice),
            event_id,
            timestamp,
            body.as_bytes(),
        );
        Ok((timestamp, signature))
    }

    /// Hands a row's turn to the group-commit writer; the `Commit`
    /// resolves once it is durable.
    async fn settle(&self, org: OrgId, settled: Settled) -> Result<Commit, StoreError> {
        let batch = WriteBatch::new(org, vec![WriteOp::SettleDeliveries(vec![settled])]);
        self.own_batches.fetch_add(1, Ordering::Relaxed);
        Ok(self
            .engine
            .inner
            .writers
            .reserve_waiting(org)
            .await?
            .submit(batch))
    }
}

/// The writers' running totals: time spent committing, batches
/// committed, and the batches the worker handed them.
#[derive(Clone, Copy, Default)]
struct Committed {
    micros: u64,
    batches: u64,
    own: u64,
}

/// Whether the writers are busy with other work than the worker's: the
/// share of the last window they spent committing (all of them together),
/// times the share of the batches they committed that were not the
/// worker's.
#[derive(Default)]
struct WriterLoad {
    /// The window's start and the totals then.
    since: Option<(std::time::Instant, Committed)>,
    busy: bool,
}

impl WriterLoad {
    /// Updates the verdict once a window has passed; answers it.
    fn busy(&mut self, now: std::time::Instant, totals: Committed) -> bool {
        match self.since {
            Some((start, before)) => {
                let wall = now.duration_since(start);
                if wall >= LOAD_WINDOW {
                    let spent = totals.micros.saturating_sub(before.micros) as f64;
                    let batches = totals.batches.saturating_sub(before.batches);
                    let own = totals.own.saturating_sub(before.own).min(batches);
                    let others = if batches == 0 {
                        0.0
                    } else {
                        (batches - own) as f64 / batches as f64
                    };
                    let share = spent / wall.as_micros() as f64;
                    self.busy = share * others > BUSY_SHARE;
                    self.since = Some((now, totals));
                }
            }
            None => self.since = Some((now, totals)),
        }
        self.busy
    }
}

/// Waits for a turn's commit; a turn not recorded is taken again.
async fn committed(org: OrgId, commit: Result<Commit, StoreError>) {
    let result = match commit {
        Ok(commit) => commit
            .await
            .map_err(|_| StoreError::WriterGone)
            .and_then(|r| r),
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        tracing::warn!(org_id = %org, error = %e, "recording a webhook delivery failed");
    }
}

/// Which of `streams` streams a task's entries of a pack go to: all of
/// them to one, so they stay in order.
fn lane_of(task_key: &str, streams: usize) -> usize {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    task_key.hash(&mut h);
    (h.finish() % streams as u64) as usize
}

/// Consecutive packs of one endpoint taken for one turn: their entries
/// in order, and where each pack's part of them begins.
struct PackTurn {
    webhook: String,
    segments: Vec<Segment>,
    entries: Vec<DueEvent>,
}

/// A pack's entries in a turn: `len` of them, from its `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    pack_id: i64,
    start: usize,
    len: usize,
    /// Whether they are all the pack has left.
    whole: bool,
}

impl PackTurn {
    /// Adds the pack's entries, as many as `room` leaves.
    fn add(&mut self, pack: DuePack, room: usize) {
        let take = pack
            .entries
            .len()
            .min(room.saturating_sub(self.entries.len()));
        if take == 0 && !self.segments.is_empty() {
            return;
        }
        self.segments.push(Segment {
            pack_id: pack.pack_id,
            start: pack.start,
            len: take,
            whole: take == pack.entries.len(),
        });
        self.entries.extend(pack.entries.into_iter().take(take));
    }

    fn first(&self) -> i64 {
        self.segments[0].pack_id
    }

    /// What the turn leaves of its packs: those done, and the last one's
    /// id and new start if it is not.
    fn settled(&self) -> (Vec<i64>, Option<(i64, usize)>) {
        let done = self
            .segments
            .iter()
            .filter(|s| s.whole)
            .map(|s| s.pack_id)
            .collect();
        let left = self
            .segments
            .iter()
            .find(|s| !s.whole)
            .map(|s| (s.pack_id, s.start + s.len));
        (done, left)
    }
}

/// What a stream of a pack's turn did: each entry's place in the turn
/// and the row it becomes, if any; the attempts; whether the endpoint is
/// to be disabled.
#[derive(Default)]
struct Lane {
    fates: Vec<(usize, Option<Later>)>,
    log: Vec<DeliveryRecord>,
    disable: bool,
}

/// A stream's endpoint, and until when its rows are held (PostgreSQL).
struct Stream {
    org: OrgId,
    webhook: String,
    target: Option<Target>,
    hold_until: Option<i64>,
}

/// A delivery's body: the event's type and time and the ids and statuses
/// of the change, never the task's content. Written from the row alone,
/// so every attempt sends the same bytes.
fn body(org_id: &str, event: EventType, row: &DueEvent) -> String {
    let data = match &row.to_status {
        None => json!({ "org_id": org_id, "webhook_id": row.webhook_id }),
        Some(to) => json!({
            "org_id": org_id,
            "task_id": row.task_key,
            "from_status": row.from_status,
            "to_status": to,
            "agent_id": row.agent_id,
        }),
    };
    json!({ "type": event.as_str(), "timestamp": format_ms(row.created_at), "data": data })
        .to_string()
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn writers_are_busy_when_they_spent_over_half_of_a_window_on_others() {
        let committed = |micros, batches, own| Committed {
            micros,
            batches,
            own,
        };
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut load = WriterLoad::default();
        assert!(!load.busy(at(0), committed(0, 0, 0)));
        // Within the window nothing changes, whatever was spent.
        assert!(!load.busy(at(50), committed(90_000, 9, 0)));
        // 90 ms of commits in 100 ms, none of them the worker's.
        assert!(load.busy(at(100), committed(90_000, 10, 0)));
        // The next window, idle.
        assert!(!load.busy(at(200), committed(100_000, 10, 0)));
        // As busy, but half of the batches were the worker's own.
        assert!(!load.busy(at(300), committed(190_000, 20, 5)));
        // Several writers' time adds up: 4 × 30 ms in 100 ms.
        assert!(load.busy(at(400), committed(310_000, 30, 5)));
    }

    /// A pack of `n` entries from `start`, each of its own task.
    fn pack(pack_id: i64, start: usize, n: usize) -> DuePack {
        let entry = |i: usize| DueEvent {
            outbox_id: i as i64,
            org_id: "org".into(),
            webhook_id: "wh".into(),
            event_id: format!("evt_{pack_id}_{i}"),
            types: "task.claimed".into(),
            sent: 0,
            task_key: format!("task-{pack_id}-{i}"),
            from_status: None,
            to_status: Some("in_progress".into()),
            agent_id: None,
            created_at: 0,
            attempts: 0,
        };
        DuePack {
            pack_id,
            org_id: "org".into(),
            webhook_id: "wh".into(),
            start,
            entries: (start..start + n).map(entry).collect(),
        }
    }

    fn empty_turn() -> PackTurn {
        PackTurn {
            webhook: "wh".into(),
            segments: Vec::new(),
            entries: Vec::new(),
        }
    }

    #[test]
    fn a_turn_takes_packs_in_order_until_its_room_is_full() {
        let mut turn = empty_turn();
        let room = 10;
        turn.add(pack(7, 2, 4), room);
        turn.add(pack(8, 0, 5), room);
        turn.add(pack(9, 0, 5), room);
        turn.add(pack(10, 0, 5), room);
        let ids: Vec<&str> = turn.entries.iter().map(|e| e.event_id.as_str()).collect();
        assert_eq!(
            ids[..5],
            ["evt_7_2", "evt_7_3", "evt_7_4", "evt_7_5", "evt_8_0"]
        );
        assert_eq!(ids.len(), room);
        // Each entry keeps its place in its pack.
        let places: Vec<i64> = turn.entries.iter().map(|e| e.outbox_id).collect();
        assert_eq!(places[..5], [2, 3, 4, 5, 0]);
        // Packs 7 and 8 done; 9 left at its second entry; 10 not taken.
        assert_eq!(turn.settled(), (vec![7, 8], Some((9, 1))));
        assert_eq!(turn.first(), 7);

        let mut whole = empty_turn();
        whole.add(pack(3, 0, 2), room);
        assert_eq!(whole.settled(), (vec![3], None));
    }

    #[test]
    fn a_task_s_entries_all_go_to_one_stream_and_tasks_spread_over_them() {
        let tasks: Vec<String> = (0..64).map(|i| format!("task-{i}")).collect();
        let lanes: HashSet<usize> = tasks.iter().map(|t| lane_of(t, 8)).collect();
        assert!(lanes.iter().all(|&l| l < 8));
        assert!(lanes.len() > 4, "64 tasks over 8 streams used {lanes:?}");
        assert!(tasks.iter().all(|t| lane_of(t, 8) == lane_of(t, 8)));
        assert!(tasks.iter().all(|t| lane_of(t, 1) == 0));
    }

    #[test]
    fn bodies_carry_ids_and_statuses_and_a_test_event_its_endpoint() {
        let row = DueEvent {
            outbox_id: 1,
            org_id: "org".into(),
            webhook_id: "wh".into(),
            event_id: "evt_1".into(),
            types: "task.claimed task.status_changed".into(),
            sent: 0,
            task_key: "task".into(),
            from_status: Some("pending".into()),
            to_status: Some("in_progress".into()),
            agent_id: Some("bot".into()),
            created_at: 0,
            attempts: 0,
        };
        let change: serde_json::Value =
            serde_json::from_str(&body("org", EventType::Claimed, &row)).unwrap();
        assert_eq!(change["type"], "task.claimed");
        assert_eq!(change["timestamp"], "1970-01-01T00:00:00.000Z");
        assert_eq!(
            change["data"],
            json!({"org_id": "org", "task_id": "task", "from_status": "pending",
                   "to_status": "in_progress", "agent_id": "bot"})
        );
        let test = DueEvent {
            to_status: None,
            from_status: None,
            agent_id: None,
            ..row
        };
        let ping: serde_json::Value =
            serde_json::from_str(&body("org", EventType::Test, &test)).unwrap();
        assert_eq!(ping["data"], json!({"org_id": "org", "webhook_id": "wh"}));
    }
}
