//! The webhook tables through the store on each backend: an endpoint's
//! cursor over its org's log, turns settled (on SQLite through a commit,
//! on PostgreSQL on the worker's own connection), the rows they leave,
//! the log kept, and the migration from the outbox's packs.

use std::collections::HashSet;

use uuid::Uuid;

use crate::crypto::SealedSecret;
use crate::domain::webhooks::{Endpoint, EventSet, OutboxEvent, Subscription, Transition};
use crate::domain::{OrgId, StoredEvent, TaskId, TaskStatus, WebhookId};
use crate::store::tests::{
    commit_ops, header, store_written_before, task, ScratchDatabase, TempDb,
};
use crate::store::{
    AfterAttempt, DeliveryRecord, NewRow, Settled, Store, StoreError, StoreOptions, Turn, WriteOp,
};

fn endpoint(webhook: WebhookId) -> WriteOp {
    WriteOp::InsertWebhook {
        endpoint: Endpoint {
            webhook_id: webhook,
            url: "http://127.0.0.1:9/hook".into(),
            subscription: Subscription::parse(&["*".into()]).unwrap(),
            description: None,
            active: true,
            created_at: 1,
        },
        secret: SealedSecret {
            master_key_id: "k".into(),
            bytes: vec![1, 2, 3],
        },
    }
}

fn event(task: TaskId, from: Option<TaskStatus>, to: TaskStatus, at: i64) -> StoredEvent {
    StoredEvent {
        task_id: task,
        from_status: from,
        to_status: to,
        agent_id: "agent-1".into(),
        at,
        note: Some(b"sealed".to_vec()),
        lease_expired: false,
    }
}

/// Settles a turn as the worker does on each backend.
async fn settle(store: &Store, org: OrgId, settled: Settled) {
    match store {
        Store::Sqlite(_) => {
            commit_ops(store, org, vec![WriteOp::SettleDeliveries(vec![settled])]).await
        }
        Store::Postgres(..) => store.settle_deliveries(org, &[settled]).await.unwrap(),
    }
}

/// The endpoint's outbox rows, by count.
async fn rows_of(store: &Store, webhook: WebhookId) -> i64 {
    let sql = "SELECT COUNT(*) FROM webhook_outbox WHERE webhook_id = $1";
    let webhook = webhook.to_string();
    match store {
        Store::Sqlite(pool) => sqlx::query_scalar(sql).bind(webhook).fetch_one(pool).await,
        Store::Postgres(pool, _) => sqlx::query_scalar(sql).bind(webhook).fetch_one(pool).await,
    }
    .unwrap()
}

fn attempt(event_id: &str, attempt: i64, status: i64, at: i64) -> DeliveryRecord {
    DeliveryRecord {
        delivery_id: Uuid::now_v7().to_string(),
        event_id: event_id.into(),
        event_type: "task.status_changed".into(),
        attempt,
        status_code: Some(status),
        error: (status != 200).then(|| "the receiver answered 500".into()),
        response: None,
        at,
        next_attempt_at: (status != 200).then_some(5_050),
    }
}

fn row(event_id: &str, task: TaskId, sent: i64, attempts: i64, at: i64) -> NewRow {
    NewRow {
        event_id: event_id.into(),
        types: "task.claimed task.status_changed".into(),
        sent,
        task_key: task.to_string(),
        from_status: Some("pending".into()),
        to_status: Some("in_progress".into()),
        agent_id: Some("agent-1".into()),
        created_at: 10,
        attempts,
        next_attempt_at: at,
    }
}

/// An endpoint's cursor starts after the events before it and takes every
/// event after, in order, a lease's expiry marked; a turn moves it through
/// what it read and leaves rows for what waits, of which only each task's
/// first is due; a turn settled again from a cursor that moved writes
/// nothing; a row's turn deletes it or moves it to its next attempt; the
/// log keeps the newest attempts; deleting the endpoint takes its cursor
/// and rows.
async fn log_turns_and_rows_settle(store: &Store) {
    let org = OrgId::new_v7();
    let (a, b) = (
        header(TaskStatus::Pending, 1),
        header(TaskStatus::Pending, 2),
    );
    let webhook = WebhookId::new_v7();
    commit_ops(
        store,
        org,
        vec![
            WriteOp::InsertTasks(vec![task(a.clone()), task(b.clone())]),
            WriteOp::InsertEvents(vec![
                event(a.task_id, None, TaskStatus::Pending, 1),
                event(b.task_id, None, TaskStatus::Pending, 2),
            ]),
        ],
    )
    .await;
    commit_ops(store, org, vec![endpoint(webhook)]).await;
    let before = store.org_events_after(org, 0, 10).await.unwrap();
    assert_eq!(before.len(), 2);
    assert!(
        store
            .take_due_logs(10, &[], 60_000)
            .await
            .unwrap()
            .is_empty(),
        "the events before the endpoint are not its"
    );

    let expired = StoredEvent {
        lease_expired: true,
        agent_id: "system".into(),
        ..event(
            a.task_id,
            Some(TaskStatus::InProgress),
            TaskStatus::Pending,
            12,
        )
    };
    commit_ops(
        store,
        org,
        vec![WriteOp::InsertEvents(vec![
            event(
                a.task_id,
                Some(TaskStatus::Pending),
                TaskStatus::InProgress,
                10,
            ),
            event(
                b.task_id,
                Some(TaskStatus::Pending),
                TaskStatus::InProgress,
                11,
            ),
            expired,
        ])],
    )
    .await;
    let due = store.take_due_logs(10, &[], 60_000).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!((due[0].webhook_id, due[0].org_id), (webhook, org));
    let cursor = due[0].cursor;
    assert_eq!(cursor, before[1].event_id);
    match store {
        Store::Postgres(..) => assert!(
            store
                .take_due_logs(10, &[], 60_000)
                .await
                .unwrap()
                .is_empty(),
            "a held cursor is not taken twice"
        ),
        Store::Sqlite(_) => assert!(store
            .take_due_logs(10, std::slice::from_ref(&webhook), 60_000)
            .await
            .unwrap()
            .is_empty()),
    }
    let events = store.org_events_after(org, cursor, 10).await.unwrap();
    let seen: Vec<(TaskId, TaskStatus, bool)> = events
        .iter()
        .map(|e| (e.task_id, e.transition.to_status, e.lease_expired))
        .collect();
    assert_eq!(
        seen,
        [
            (a.task_id, TaskStatus::InProgress, false),
            (b.task_id, TaskStatus::InProgress, false),
            (a.task_id, TaskStatus::Pending, true),
        ]
    );
    assert!(events.windows(2).all(|w| w[0].event_id < w[1].event_id));
    assert_eq!(events[0].transition.agent_id, "agent-1");
    let through = events[2].event_id;

    // a's claim failed at its second type, so a's expiry waits behind it;
    // b's claim was delivered.
    let claim_id = format!("evt_{}", events[0].event_id);
    let expiry_id = format!("evt_{}", events[2].event_id);
    let turn = Turn::Log {
        from: cursor,
        through,
        rows: vec![
            row(&claim_id, a.task_id, 1, 1, 5_050),
            row(&expiry_id, a.task_id, 0, 0, 50),
        ],
    };
    let log = vec![
        attempt(&claim_id, 1, 200, 50),
        attempt(&claim_id, 1, 500, 51),
    ];
    settle(
        store,
        org,
        Settled {
            webhook_id: webhook,
            turn: turn.clone(),
            log,
        },
    )
    .await;
    assert!(
        store
            .take_due_logs(10, &[], 60_000)
            .await
            .unwrap()
            .is_empty(),
        "the cursor went through the turn, and its hold ended"
    );
    let keys = [a.task_id.to_string(), b.task_id.to_string()];
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let waiting = store
        .waiting_webhook_tasks(&[(webhook, keys.clone()), (WebhookId::new_v7(), keys)])
        .await
        .unwrap();
    assert_eq!(
        waiting.into_iter().collect::<Vec<_>>(),
        [(webhook, HashSet::from([a.task_id.to_string()]))]
    );
    assert_eq!(
        store.next_delivery_in(100, &[], &[]).await.unwrap(),
        Some(4_950),
        "the soonest is the claim's retry: the expiry, due before, waits behind it"
    );
    let busy = std::slice::from_ref(&webhook);
    assert_eq!(store.next_delivery_in(100, &[], busy).await.unwrap(), None);
    assert!(
        store
            .take_due_rows(100, 10, 10, &[], 60_000)
            .await
            .unwrap()
            .is_empty(),
        "the retried row waits, and so does its task's next row"
    );
    // The same turn settled again, as by a worker whose hold ran out.
    settle(
        store,
        org,
        Settled {
            webhook_id: webhook,
            turn,
            log: Vec::new(),
        },
    )
    .await;
    assert_eq!(
        rows_of(store, webhook).await,
        2,
        "a stale turn writes nothing"
    );

    let due = store
        .take_due_rows(6_000, 10, 10, &[], 60_000)
        .await
        .unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].event_id, claim_id);
    assert_eq!(
        (due[0].sent, due[0].attempts, due[0].created_at),
        (1, 1, 10)
    );
    assert_eq!(
        due[0].transition.as_ref().map(|t| t.to_status),
        Some(TaskStatus::InProgress)
    );
    if matches!(store, Store::Postgres(..)) {
        assert!(
            store
                .take_due_rows(6_000, 10, 10, &[], 60_000)
                .await
                .unwrap()
                .is_empty(),
            "a held row is not taken twice"
        );
    }
    assert!(store
        .take_due_rows(6_000, 10, 10, &[due[0].outbox_id], 60_000)
        .await
        .unwrap()
        .is_empty());
    let logged = store.webhook_deliveries(org, webhook, 10).await.unwrap();
    assert_eq!(logged.len(), 2);
    assert!(logged.iter().any(|d| d.event_id == claim_id
        && d.status_code == Some(500)
        && d.next_attempt_at == Some(5_050)
        && d.error.is_some()));

    settle(
        store,
        org,
        Settled {
            webhook_id: webhook,
            turn: Turn::Row {
                outbox_id: due[0].outbox_id,
                after: AfterAttempt::Done,
            },
            log: vec![attempt(&claim_id, 2, 200, 60)],
        },
    )
    .await;
    let next = store
        .take_due_rows(6_000, 10, 10, &[], 60_000)
        .await
        .unwrap();
    assert_eq!(
        next.len(),
        1,
        "the task's next row is due once the first is gone"
    );
    assert_eq!(next[0].event_id, expiry_id);
    settle(
        store,
        org,
        Settled {
            webhook_id: webhook,
            turn: Turn::Row {
                outbox_id: next[0].outbox_id,
                after: AfterAttempt::Retry {
                    sent: 0,
                    attempts: 1,
                    at: 9_000,
                },
            },
            log: Vec::new(),
        },
    )
    .await;
    assert!(store
        .take_due_rows(8_999, 10, 10, &[], 60_000)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store
            .take_due_rows(9_000, 10, 10, &[], 60_000)
            .await
            .unwrap()
            .len(),
        1,
        "a retried row is due at its next attempt, its hold ended"
    );

    // The log keeps the newest of what turns logged.
    for start in [1_000, 2_000] {
        let log = (0..80)
            .map(|i| attempt("evt_x", 1, 200, start + i))
            .collect();
        settle(
            store,
            org,
            Settled {
                webhook_id: webhook,
                turn: Turn::Row {
                    outbox_id: -1,
                    after: AfterAttempt::Done,
                },
                log,
            },
        )
        .await;
    }
    let kept = store.webhook_deliveries(org, webhook, 1_000).await.unwrap();
    assert_eq!(kept.len(), 100);
    assert_eq!(kept.first().map(|d| d.at), Some(2_079));
    assert_eq!(kept.last().map(|d| d.at), Some(1_060));

    // A test event is a row of its own, due at once.
    let mut types = EventSet::default();
    types.insert(crate::domain::webhooks::EventType::Test);
    let ping = OutboxEvent {
        webhook_id: webhook,
        event_id: format!("evt_{}", Uuid::now_v7().simple()),
        types,
        task_key: "ping".into(),
        transition: None,
        created_at: 20_000,
    };
    commit_ops(store, org, vec![WriteOp::InsertOutbox(vec![ping.clone()])]).await;
    let due = store
        .take_due_rows(20_000, 10, 10, &[], 60_000)
        .await
        .unwrap();
    assert!(due.iter().any(|r| r.event_id == ping.event_id
        && r.types.text() == "webhook.test"
        && r.transition.is_none()));

    commit_ops(store, org, vec![WriteOp::DeleteWebhook(webhook)]).await;
    commit_ops(
        store,
        org,
        vec![WriteOp::InsertEvents(vec![event(
            b.task_id,
            Some(TaskStatus::InProgress),
            TaskStatus::Completed,
            30,
        )])],
    )
    .await;
    assert!(store.take_due_logs(10, &[], 0).await.unwrap().is_empty());
    assert_eq!(rows_of(store, webhook).await, 0);
}

#[tokio::test]
async fn log_turns_and_rows_settle_sqlite() {
    let path = TempDb::new();
    let store = path.store().await;
    log_turns_and_rows_settle(&store).await;
    store.close().await;
}

#[tokio::test]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn log_turns_and_rows_settle_postgres() {
    let scratch = ScratchDatabase::create().await;
    let store = Store::connect(&scratch.url, &StoreOptions::default())
        .await
        .unwrap();
    log_turns_and_rows_settle(&store).await;
    store.close().await;
    scratch.drop().await;
}

/// What the outbox's packs held before `0023_webhook_cursors` becomes rows,
/// from each pack's start, behind the rows already there, in order; each
/// active endpoint's cursor starts after its org's last event, and a
/// disabled one gets none.
#[tokio::test]
async fn packs_become_rows_and_endpoints_get_cursors() {
    let path = TempDb::new();
    let org = OrgId::new_v7().to_string();
    let task_key = TaskId::new_v7().to_string();
    let (on, off) = (WebhookId::new_v7(), WebhookId::new_v7().to_string());
    let webhook = "INSERT INTO webhooks (org_id, webhook_id, url, events, secret, \
        secret_key_id, active, created_at) VALUES ($1, $2, 'http://x.test/h', '[\"*\"]', \
        X'00', 'k', CAST($3 AS INTEGER), 1)";
    let event = "INSERT INTO task_events (event_id, org_id, task_id, to_status, agent_id, at) \
        VALUES (CAST($1 AS INTEGER), $2, $3, 'pending', 'bot', 1)";
    let row = "INSERT INTO webhook_outbox (org_id, webhook_id, event_id, types, sent, task_key, \
        created_at, attempts, next_attempt_at) VALUES ($1, $3, 'evt_old', 'task.created', 0, \
        $2, 1, 1, 2)";
    let entry = |id: &str, to: &str| {
        serde_json::json!([id, "task.status_changed", task_key, "pending", to, "bot", 5])
    };
    let entries = serde_json::json!([
        entry("evt_done", "in_progress"),
        entry("evt_a", "in_progress"),
        entry("evt_b", "completed"),
    ]);
    let pack = "INSERT INTO webhook_outbox_packs (org_id, webhook_id, entries, start, \
        held_until) VALUES ($1, $3, $2, 1, 0)";
    let store = store_written_before(
        &path,
        23,
        &[
            (webhook, vec![org.clone(), on.to_string(), "1".into()]),
            (webhook, vec![org.clone(), off, "0".into()]),
            (event, vec!["7".into(), org.clone(), task_key.clone()]),
            (event, vec!["9".into(), org.clone(), task_key.clone()]),
            (row, vec![org.clone(), task_key.clone(), on.to_string()]),
            (pack, vec![org.clone(), entries.to_string(), on.to_string()]),
        ],
    )
    .await;
    let org_id: OrgId = org.parse().unwrap();
    commit_ops(
        &store,
        org_id,
        vec![WriteOp::InsertEvents(vec![StoredEvent {
            task_id: task_key.parse().unwrap(),
            from_status: Some(TaskStatus::Pending),
            to_status: TaskStatus::InProgress,
            agent_id: "bot".into(),
            at: 2,
            note: None,
            lease_expired: false,
        }])],
    )
    .await;
    let due = store.take_due_logs(10, &[], 60_000).await.unwrap();
    assert_eq!(due.len(), 1, "the disabled endpoint has no cursor");
    assert_eq!((due[0].webhook_id, due[0].cursor), (on, 9));
    let mut order = Vec::new();
    let mut taken = Vec::new();
    loop {
        let rows = store
            .take_due_rows(100, 10, 10, &taken, 60_000)
            .await
            .unwrap();
        let Some(first) = rows.first() else { break };
        let to = first.transition.as_ref().map(|t| t.to_status);
        order.push((first.event_id.clone(), to));
        taken.push(first.outbox_id);
        // Only the task's first row is due: settle it to see the next.
        commit_ops(
            &store,
            org_id,
            vec![WriteOp::SettleDeliveries(vec![Settled {
                webhook_id: on,
                turn: Turn::Row {
                    outbox_id: first.outbox_id,
                    after: AfterAttempt::Done,
                },
                log: Vec::new(),
            }])],
        )
        .await;
    }
    assert_eq!(
        order,
        [
            ("evt_old".to_owned(), None),
            ("evt_a".to_owned(), Some(TaskStatus::InProgress)),
            ("evt_b".to_owned(), Some(TaskStatus::Completed)),
        ]
    );
    store.close().await;
}

/// An outbox row written before `0020_outbox_rows_per_change`, with its
/// final body, is read after the migrations with the fields of that body
/// and its id, type and schedule; a test event's has no status.
#[tokio::test]
async fn outbox_rows_survive_the_per_change_migration() {
    let path = TempDb::new();
    let org = OrgId::new_v7().to_string();
    let task = TaskId::new_v7().to_string();
    let webhook = WebhookId::new_v7();
    let insert = "INSERT INTO webhook_outbox (org_id, webhook_id, event_id, type, task_key, \
        body, created_at, attempts, next_attempt_at) VALUES ($1, $7, $2, $3, $4, $5, 7, \
        CAST($6 AS INTEGER), 9)";
    let change = serde_json::json!({"type": "task.claimed", "timestamp": "x", "data": {
        "org_id": org, "task_id": task, "from_status": "pending",
        "to_status": "in_progress", "agent_id": "bot"}});
    let test = serde_json::json!({"type": "webhook.test", "timestamp": "x",
        "data": {"org_id": org, "webhook_id": webhook}});
    let store = store_written_before(
        &path,
        20,
        &[
            (
                insert,
                vec![
                    org.clone(),
                    "evt_1".into(),
                    "task.claimed".into(),
                    task.clone(),
                    change.to_string(),
                    "2".into(),
                    webhook.to_string(),
                ],
            ),
            (
                insert,
                vec![
                    org.clone(),
                    "evt_2".into(),
                    "webhook.test".into(),
                    "evt_2".into(),
                    test.to_string(),
                    "0".into(),
                    webhook.to_string(),
                ],
            ),
        ],
    )
    .await;
    let due = store.take_due_rows(100, 10, 10, &[], 60_000).await.unwrap();
    assert_eq!(due.len(), 2);
    let claim = due.iter().find(|e| e.event_id == "evt_1").unwrap();
    assert_eq!(claim.webhook_id, webhook);
    assert_eq!(claim.types.text(), "task.claimed");
    assert_eq!((claim.sent, claim.attempts, claim.created_at), (0, 2, 7));
    assert_eq!(claim.task_key, task);
    assert_eq!(
        claim.transition,
        Some(Transition {
            from_status: Some(TaskStatus::Pending),
            to_status: TaskStatus::InProgress,
            agent_id: "bot".into(),
        })
    );
    let ping = due.iter().find(|e| e.event_id == "evt_2").unwrap();
    assert_eq!(ping.types.text(), "webhook.test");
    assert_eq!(ping.transition, None, "a test event has no status");
    store.close().await;
}

/// A due outbox row whose webhook id does not read is an error naming the
/// row, not a row passed over: it stays in the outbox.
#[tokio::test]
async fn a_due_row_whose_webhook_id_does_not_read_is_corrupt() {
    let path = TempDb::new();
    let store = path.store().await;
    let Store::Sqlite(pool) = &store else {
        unreachable!("a scratch SQLite store")
    };
    let outbox_id: i64 = sqlx::query_scalar(
        "INSERT INTO webhook_outbox (org_id, webhook_id, event_id, types, sent, task_key, \
         created_at, attempts, next_attempt_at) VALUES ($1, 'wh', 'evt_1', 'webhook.test', 0, \
         'evt_1', 1, 0, 1) RETURNING outbox_id",
    )
    .bind(OrgId::new_v7().to_string())
    .fetch_one(pool)
    .await
    .unwrap();
    let read = store.take_due_rows(100, 10, 10, &[], 60_000).await;
    let Err(StoreError::Corrupt(what)) = read else {
        panic!("a corrupt row read as {read:?}");
    };
    assert_eq!(
        what,
        format!("webhook outbox row {outbox_id}: webhook id wh")
    );
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM webhook_outbox")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(left, 1);
    store.close().await;
}
