//! Round trip through the store on each backend: what `apply` writes, every
//! reader returns unchanged, later commits change exactly what they name,
//! and a commit that fails leaves nothing of itself behind. The PostgreSQL variant is built to
//! run when `TASKQ_TEST_POSTGRES_URL` names a server it may create a database on.

use sqlx::Connection;
use uuid::Uuid;

// The black-box tests' gate, so that one rule says what a missing
// `TASKQ_TEST_POSTGRES_URL` does (the test built as ignored, or failing
// when it runs without it).
#[path = "../../../tests/it/common/environment.rs"]
mod environment;

use super::{Store, StoreOptions, WriteBatch, WriteOp, WriterConn};
use crate::api::ListTasks;
use crate::domain::account::{
    Encryption, KeyRecord, LimitKey, LimitOverrides, MemberRecord, OrgRecord, Role, Tier,
};
use crate::domain::admin::{Membership, Tag, Team};
use crate::domain::order::ListKey;
use crate::domain::usage::Usage;
use crate::domain::{
    ContentField, KeyId, OrgId, StoredEvent, StoredTask, TaskHeader, TaskId, TaskStatus,
};

pub(super) fn header(status: TaskStatus, created_at: i64) -> TaskHeader {
    TaskHeader {
        task_id: TaskId::new_v7(),
        status,
        priority: 2,
        created_at,
        updated_at: created_at,
        assignee: None,
        tags: vec!["ops".into()],
        blocked_by: Vec::new(),
        parent: None,
        lease: None,
        attempts: 0,
        max_attempts: 5,
        run_at: None,
        retry: None,
        retries: 0,
        scheduled: None,
    }
}

/// `header` claimed by `agent` at `at`, under a lease of `seconds`.
fn claimed(header: &TaskHeader, agent: &str, at: i64, seconds: u32) -> TaskHeader {
    TaskHeader {
        status: TaskStatus::InProgress,
        assignee: Some(agent.into()),
        updated_at: at,
        lease: Some(crate::domain::lease::grant(at, seconds)),
        ..header.clone()
    }
}

pub(super) fn task(header: TaskHeader) -> StoredTask {
    StoredTask {
        header,
        title: b"sealed title".to_vec(),
        description: None,
        metadata: Some(b"{}".to_vec()),
        output: None,
    }
}

/// Debug forms, for records that do not implement `PartialEq`.
fn shown<T: std::fmt::Debug>(value: T) -> String {
    format!("{value:?}")
}

/// The org's owner, as the org's creation stores it.
fn owner_record(org_id: OrgId, profile_tags: Vec<String>) -> MemberRecord {
    MemberRecord {
        org_id,
        email: format!("owner-{org_id}@example.com"),
        role: Role::Owner,
        seated: true,
        profile_tags,
        joined_at: 2,
    }
}

/// The owner's first key.
fn first_key(owner: &MemberRecord) -> KeyRecord {
    KeyRecord {
        key_id: KeyId::new_v7(),
        org_id: owner.org_id,
        email: owner.email.clone(),
        name: "first".into(),
        secret_hash: vec![7; 32],
        active: true,
        created_at: 3,
    }
}

async fn round_trip(store: &Store) {
    let org_id = OrgId::new_v7();
    let mut limit_overrides = LimitOverrides::new();
    limit_overrides.insert(LimitKey::WritesPerMinute, None);
    let org = OrgRecord {
        org_id,
        name: format!("org-{org_id}"),
        tier: Tier::Pro,
        encryption: Encryption::Managed,
        seats: 3,
        suspended: false,
        limit_overrides,
        wrapped_dek: Some(crate::crypto::WrappedDek {
            master_key_id: Some("0011223344556677".into()),
            bytes: vec![1, 2, 3],
        }),
        idp_enrolled: true,
        retention_days: Some(90),
        created_at: 1,
    };
    let owner = owner_record(org_id, vec!["ops".into()]);
    let key = first_key(&owner);
    store.insert_org(&org, &owner, &key).await.unwrap();

    let parent = header(TaskStatus::Completed, 10);
    let mut open = header(TaskStatus::Pending, 11);
    open.parent = Some(parent.task_id);
    open.blocked_by = vec![parent.task_id];
    let tasks = vec![task(parent.clone()), task(open.clone())];
    let claimed = claimed(&open, "agent", 12, 60);
    let event = StoredEvent {
        task_id: open.task_id,
        from_status: Some(TaskStatus::Pending),
        to_status: TaskStatus::InProgress,
        agent_id: "agent".into(),
        at: 12,
        note: None,
        lease_expired: false,
    };
    let tag = Tag {
        name: "ops".into(),
        strict: true,
        is_default: false,
        description: Some("operations".into()),
        created_by: owner.email.clone(),
        created_at: 4,
    };
    let team = Team {
        name: "oncall".into(),
        tags: vec!["ops".into()],
        description: None,
        idp_only: false,
        created_by: owner.email.clone(),
        created_at: 5,
    };
    let membership = Membership {
        team: team.name.clone(),
        email: owner.email.clone(),
        manual: true,
        idp: false,
        added_by: owner.email.clone(),
        added_at: 6,
    };
    let usage = Usage {
        month: "2025-01".into(),
        requests: 5,
        tasks: 2,
        plans: 0,
        read_tat: 7,
        write_tat: 8,
    };
    let batch = WriteBatch {
        org: org_id,
        ops: vec![
            WriteOp::InsertTasks(tasks),
            WriteOp::UpdateHeader {
                header: claimed.clone(),
                was_finished: false,
            },
            WriteOp::SetContent {
                task_id: open.task_id,
                field: ContentField::Output,
                value: Some(b"sealed output".to_vec()),
            },
            WriteOp::InsertEvents(vec![event.clone()]),
            WriteOp::UpsertTag(tag.clone()),
            WriteOp::UpsertTeam(team.clone()),
            WriteOp::UpsertMembership(membership.clone()),
            WriteOp::SaveUsage(usage.clone()),
        ],
        fence: None,
        marked: None,
        wakes_deliveries: false,
    };
    store.apply(&[&batch]).await.unwrap();

    let records = store.load_org(org_id).await.unwrap();
    assert_eq!(records.open_tasks, vec![claimed.clone()]);
    assert_eq!(shown(&records.members), shown(vec![&owner]));
    assert_eq!(shown(&records.keys), shown(vec![&key]));
    assert_eq!(records.tags, vec![tag]);
    assert_eq!(records.teams, vec![team]);
    assert_eq!(records.memberships, vec![membership]);
    assert_eq!(records.usage, Some(usage));

    let stored = store.tasks(org_id, &[open.task_id]).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].header, claimed);
    assert_eq!(stored[0].output.as_deref(), Some(&b"sealed output"[..]));
    // In the order asked for, whichever order the rows come in.
    for asked in [
        [open.task_id, parent.task_id],
        [parent.task_id, open.task_id],
    ] {
        let stored = store.tasks(org_id, &asked).await.unwrap();
        let got: Vec<TaskId> = stored.iter().map(|t| t.header.task_id).collect();
        assert_eq!(got, asked);
    }
    let headers = store
        .task_headers(org_id, &[parent.task_id, open.task_id])
        .await
        .unwrap();
    assert_eq!(headers.len(), 2);
    let by_key = store
        .tasks_by_keys(&[(org_id, parent.task_id)])
        .await
        .unwrap();
    assert_eq!(by_key.len(), 1);
    assert_eq!(by_key[0].0, org_id);
    assert_eq!(by_key[0].1.header, parent);
    // The org actor lists open tasks; the store, finished ones only.
    let page = store
        .list_finished_tasks(org_id, &ListTasks::default(), None, 10)
        .await
        .unwrap();
    let order: Vec<TaskId> = page.iter().map(|t| t.header.task_id).collect();
    assert_eq!(order, vec![parent.task_id]);
    assert_eq!(
        shown(store.task_events(org_id, open.task_id).await.unwrap()),
        shown(vec![event])
    );
    assert!(store.orgs_needing_timers().await.unwrap().contains(&org_id));

    assert_eq!(
        shown(store.get_org(org_id).await.unwrap()),
        shown(Some(&org))
    );
    assert_eq!(
        shown(store.get_key(key.key_id).await.unwrap()),
        shown(Some(&key))
    );
    assert_eq!(store.org_by_name(&org.name).await.unwrap(), Some(org_id));
    assert_eq!(store.member_orgs(&owner.email).await.unwrap(), vec![org_id]);
}

/// A commit that fails part-way leaves nothing of itself behind, and the
/// next commit goes through: the failed transaction does not linger on a
/// connection that returns to the pool (on SQLite it would hold the write
/// lock, and the next commit would wait for it and fail).
async fn failed_commit(store: &Store) {
    let org_id = OrgId::new_v7();
    let owner = owner_record(org_id, Vec::new());
    let org = OrgRecord {
        org_id,
        name: format!("org-{org_id}"),
        tier: Tier::Free,
        encryption: Encryption::Managed,
        seats: 1,
        suspended: false,
        limit_overrides: LimitOverrides::new(),
        wrapped_dek: None,
        idp_enrolled: false,
        retention_days: None,
        created_at: 1,
    };
    let key = first_key(&owner);
    store.insert_org(&org, &owner, &key).await.unwrap();
    let usage = |requests| Usage {
        month: "2025-01".into(),
        requests,
        tasks: 1,
        plans: 0,
        read_tat: 0,
        write_tat: 0,
    };
    let batch = |ops| WriteBatch {
        org: org_id,
        ops,
        fence: None,
        marked: None,
        wakes_deliveries: false,
    };
    // A task created, and the org's requests counted to `requests`.
    let created = |header: &TaskHeader, requests| {
        batch(vec![
            WriteOp::InsertTasks(vec![task(header.clone())]),
            WriteOp::SaveUsage(usage(requests)),
        ])
    };
    let first = header(TaskStatus::Pending, 10);
    store.apply(&[&created(&first, 1)]).await.unwrap();

    // The usage upsert runs, then the insert meets a task id that exists.
    let second = header(TaskStatus::Pending, 11);
    let failing = batch(vec![
        WriteOp::SaveUsage(usage(2)),
        WriteOp::InsertTasks(vec![task(second.clone()), task(first.clone())]),
    ]);
    let mut conn = store.writer_conn(0).await.unwrap();
    assert!(conn.apply(&[&failing]).await.is_err());
    drop(conn);
    let records = store.load_org(org_id).await.unwrap();
    assert_eq!(records.usage, Some(usage(1)));
    assert!(store
        .tasks(org_id, &[second.task_id])
        .await
        .unwrap()
        .is_empty());

    let third = header(TaskStatus::Pending, 12);
    store.apply(&[&created(&third, 3)]).await.unwrap();
    let records = store.load_org(org_id).await.unwrap();
    assert_eq!(records.usage, Some(usage(3)));
    let open: Vec<TaskId> = records.open_tasks.iter().map(|h| h.task_id).collect();
    assert_eq!(open, vec![first.task_id, third.task_id]);
}

/// A commit that changes tasks stored by an earlier one, for two orgs and
/// in several batches: per task the last header and the last value of each
/// content field win, a field left alone keeps its value, a header left
/// alone stays, events keep their order across batches, and a task whose
/// title changes loses its vector while the others keep theirs.
async fn later_changes(store: &Store) {
    let (first_org, second_org) = (OrgId::new_v7(), OrgId::new_v7());
    let first = task(header(TaskStatus::Pending, 20));
    let second = task(header(TaskStatus::Pending, 21));
    let insert = |org, task: &StoredTask| WriteBatch {
        org,
        ops: vec![WriteOp::InsertTasks(vec![task.clone()])],
        fence: None,
        marked: None,
        wakes_deliveries: false,
    };
    store
        .apply(&[&insert(first_org, &first), &insert(second_org, &second)])
        .await
        .unwrap();
    for (org, task) in [(first_org, &first), (second_org, &second)] {
        store
            .put_vectors(org, "model", &[(task.header.task_id, vec![9; 8])])
            .await
            .unwrap();
    }

    let id = first.header.task_id;
    let claimed = claimed(&first.header, "agent", 22, 60);
    let mut completed = claimed.clone();
    completed.status = TaskStatus::Completed;
    completed.assignee = None;
    completed.updated_at = 23;
    completed.lease = None;
    let event = |from, to, at, note: Option<&[u8]>| StoredEvent {
        task_id: id,
        from_status: Some(from),
        to_status: to,
        agent_id: "agent".into(),
        at,
        note: note.map(<[u8]>::to_vec),
        lease_expired: false,
    };
    let events = [
        event(TaskStatus::Pending, TaskStatus::InProgress, 22, None),
        event(
            TaskStatus::InProgress,
            TaskStatus::InProgress,
            22,
            Some(b"sealed note"),
        ),
        event(TaskStatus::InProgress, TaskStatus::Completed, 23, None),
    ];
    let set = |field, value: Option<&[u8]>| WriteOp::SetContent {
        task_id: id,
        field,
        value: value.map(<[u8]>::to_vec),
    };
    let claim = WriteBatch {
        org: first_org,
        ops: vec![
            WriteOp::UpdateHeader {
                header: claimed,
                was_finished: false,
            },
            set(ContentField::Output, Some(b"draft")),
            set(ContentField::Metadata, Some(b"{\"a\":1}")),
            WriteOp::InsertEvents(events[..2].to_vec()),
        ],
        fence: None,
        marked: None,
        wakes_deliveries: false,
    };
    let retitle = WriteBatch {
        org: second_org,
        ops: vec![WriteOp::SetContent {
            task_id: second.header.task_id,
            field: ContentField::Title,
            value: Some(b"new title".to_vec()),
        }],
        fence: None,
        marked: None,
        wakes_deliveries: false,
    };
    let complete = WriteBatch {
        org: first_org,
        ops: vec![
            WriteOp::UpdateHeader {
                header: completed.clone(),
                was_finished: false,
            },
            set(ContentField::Output, Some(b"final")),
            set(ContentField::Metadata, None),
            WriteOp::InsertEvents(events[2..].to_vec()),
        ],
        fence: None,
        marked: None,
        wakes_deliveries: false,
    };
    store.apply(&[&claim, &retitle, &complete]).await.unwrap();

    let stored = store.tasks(first_org, &[id]).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].header, completed);
    assert_eq!(stored[0].title, first.title);
    assert_eq!(stored[0].output.as_deref(), Some(&b"final"[..]));
    assert_eq!(stored[0].metadata, None);
    assert_eq!(
        shown(store.task_events(first_org, id).await.unwrap()),
        shown(events.to_vec())
    );
    let retitled = store
        .tasks(second_org, &[second.header.task_id])
        .await
        .unwrap();
    assert_eq!(retitled.len(), 1);
    assert_eq!(retitled[0].header, second.header);
    assert_eq!(retitled[0].title, b"new title".to_vec());
    assert_eq!(retitled[0].metadata, second.metadata);
    assert_eq!(
        store.org_vectors(first_org, "model").await.unwrap().len(),
        1
    );
    assert!(store
        .org_vectors(second_org, "model")
        .await
        .unwrap()
        .is_empty());
}

/// Finished tasks are listed from the store in list order (status, then
/// priority, creation, id), page after page; a task reopened leaves that
/// list and is open again when its org is loaded, also when the commit
/// that reopens it claims it too.
/// Finished tasks listed in order, and events read in order, whether a
/// settle moved them into their per-org indexes after each commit or not.
async fn finished_and_reopened(store: &Store, settle_each_commit: bool) {
    let apply = |batches: Vec<WriteBatch>| async move {
        let batches: Vec<&WriteBatch> = batches.iter().collect();
        store.apply(&batches).await.unwrap();
        if settle_each_commit {
            store.settle().await.unwrap();
        }
    };
    let org = OrgId::new_v7();
    let tasks: Vec<StoredTask> = (0..4)
        .map(|i| task(header(TaskStatus::Pending, 30 + i)))
        .collect();
    apply(vec![WriteBatch {
        org,
        ops: vec![WriteOp::InsertTasks(tasks.clone())],
        fence: None,
        marked: None,
        wakes_deliveries: false,
    }])
    .await;
    let moved = |i: usize, status, was_finished| {
        let mut h = tasks[i].header.clone();
        h.status = status;
        h.updated_at = 40;
        WriteOp::UpdateHeader {
            header: h,
            was_finished,
        }
    };
    let finish = WriteBatch {
        org,
        ops: vec![
            moved(0, TaskStatus::Failed, false),
            moved(1, TaskStatus::Completed, false),
            moved(2, TaskStatus::Completed, false),
        ],
        fence: None,
        marked: None,
        wakes_deliveries: false,
    };
    apply(vec![finish]).await;
    let listed = |after, query: ListTasks| async move {
        store
            .list_finished_tasks(org, &query, after, 2)
            .await
            .unwrap()
    };
    let ids = |page: &[StoredTask]| page.iter().map(|t| t.header.task_id).collect::<Vec<_>>();
    let first = listed(None, ListTasks::default()).await;
    assert_eq!(
        ids(&first),
        [tasks[1].header.task_id, tasks[2].header.task_id]
    );
    let rest = listed(Some(ListKey::of(&first[1].header)), ListTasks::default()).await;
    assert_eq!(ids(&rest), [tasks[0].header.task_id]);
    let failed_only = ListTasks {
        statuses: vec![TaskStatus::Failed],
        ..ListTasks::default()
    };
    assert_eq!(
        ids(&listed(None, failed_only).await),
        [tasks[0].header.task_id]
    );
    let pending_only = ListTasks {
        statuses: vec![TaskStatus::Pending],
        ..ListTasks::default()
    };
    assert!(listed(None, pending_only).await.is_empty());
    let open = || async {
        let mut ids: Vec<TaskId> = store
            .load_org(org)
            .await
            .unwrap()
            .open_tasks
            .iter()
            .map(|h| h.task_id)
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(open().await, [tasks[3].header.task_id]);

    // One commit reopens task 0 and then claims it (the claim alone does
    // not know the task was finished); another reopens task 1.
    let reopen = |i| WriteBatch {
        org,
        ops: vec![moved(i, TaskStatus::Pending, true)],
        fence: None,
        marked: None,
        wakes_deliveries: false,
    };
    let claim = WriteBatch {
        org,
        ops: vec![moved(0, TaskStatus::InProgress, false)],
        fence: None,
        marked: None,
        wakes_deliveries: false,
    };
    apply(vec![reopen(0), claim, reopen(1)]).await;
    assert_eq!(
        ids(&listed(None, ListTasks::default()).await),
        [tasks[2].header.task_id]
    );
    let mut expected: Vec<TaskId> = [0, 1, 3].iter().map(|&i| tasks[i].header.task_id).collect();
    expected.sort();
    assert_eq!(open().await, expected);

    // Tasks 0 and 1 finish again, and each commit adds an event of task 0.
    // The last two commits are never settled here, so with a settle after
    // the others a list merges settled and unsettled tasks. Task 0's events
    // come with a change of its header, with one of another task's, and
    // alone: each must still chain to the one before it.
    let event = |to, at| StoredEvent {
        task_id: tasks[0].header.task_id,
        from_status: None,
        to_status: to,
        agent_id: "agent".into(),
        at,
        note: None,
        lease_expired: false,
    };
    apply(vec![WriteBatch {
        org,
        ops: vec![
            moved(0, TaskStatus::Completed, false),
            WriteOp::InsertEvents(vec![event(TaskStatus::Completed, 50)]),
        ],
        fence: None,
        marked: None,
        wakes_deliveries: false,
    }])
    .await;
    let unsettled = |ops| async move {
        store
            .apply(&[&WriteBatch {
                org,
                ops,
                fence: None,
                marked: None,
                wakes_deliveries: false,
            }])
            .await
            .unwrap();
    };
    unsettled(vec![
        moved(1, TaskStatus::Completed, false),
        WriteOp::InsertEvents(vec![event(TaskStatus::Pending, 51)]),
    ])
    .await;
    let first = listed(None, ListTasks::default()).await;
    assert_eq!(
        ids(&first),
        [tasks[0].header.task_id, tasks[1].header.task_id]
    );
    assert_eq!(
        ids(&listed(Some(ListKey::of(&first[1].header)), ListTasks::default()).await),
        [tasks[2].header.task_id]
    );
    unsettled(vec![WriteOp::InsertEvents(vec![event(
        TaskStatus::InProgress,
        52,
    )])])
    .await;
    let ats: Vec<i64> = store
        .task_events(org, tasks[0].header.task_id)
        .await
        .unwrap()
        .iter()
        .map(|e| e.at)
        .collect();
    assert_eq!(ats, [50, 51, 52]);
    assert_eq!(open().await, [tasks[3].header.task_id]);
}

/// `url` with its database, if any, replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(base, query)| (base, Some(query)));
    let authority = base.find("://").map_or(0, |i| i + 3);
    let server = match base[authority..].find('/') {
        Some(i) => &base[..authority + i],
        None => base,
    };
    match query {
        Some(query) => format!("{server}/{database}?{query}"),
        None => format!("{server}/{database}"),
    }
}

/// A SQLite file in the temporary directory, removed with its WAL and
/// shared-memory files when dropped.
pub(super) struct TempDb(pub(super) std::path::PathBuf);

impl TempDb {
    pub(super) fn new() -> Self {
        TempDb(std::env::temp_dir().join(format!("taskq-store-{}.db", Uuid::new_v4().simple())))
    }

    /// A store on this file, as the server opens one.
    pub(super) async fn store(&self) -> Store {
        let url = format!("sqlite://{}", self.0.display());
        Store::connect(&url, &StoreOptions::default())
            .await
            .unwrap()
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}

#[tokio::test]
async fn round_trip_sqlite() {
    let path = TempDb::new();
    let store = path.store().await;
    round_trip(&store).await;
    failed_commit(&store).await;
    later_changes(&store).await;
    finished_and_reopened(&store, false).await;
    finished_and_reopened(&store, true).await;
    store.close().await;
}

/// The bundled SQLite is built with the workspace's flags: no memory
/// statistics, no memory management, no page cache allocated up front
/// (`.cargo/config.toml` says why).
#[tokio::test]
async fn bundled_sqlite_is_built_with_the_workspace_flags() {
    let path = TempDb::new();
    let store = path.store().await;
    let options: Vec<String> = sqlx::query_scalar("PRAGMA compile_options")
        .fetch_all(sqlite_pool(&store))
        .await
        .unwrap();
    for wanted in ["DEFAULT_MEMSTATUS=0", "DEFAULT_PCACHE_INITSZ=0"] {
        assert!(options.iter().any(|o| o == wanted), "{wanted}: {options:?}");
    }
    assert!(
        !options
            .iter()
            .any(|o| o.starts_with("ENABLE_MEMORY_MANAGEMENT")),
        "{options:?}"
    );
    store.close().await;
}

fn sqlite_pool(store: &Store) -> &sqlx::SqlitePool {
    let Store::Sqlite(pool) = store else {
        unreachable!("a SQLite store")
    };
    pool
}

/// The leaf pages of the `tasks` table, each with its number of rows.
async fn task_leaves(store: &Store) -> Vec<(i64, i64)> {
    sqlx::query_as(
        "SELECT pageno, ncell FROM dbstat WHERE name = 'tasks' AND pagetype = 'leaf' \
         ORDER BY pageno",
    )
    .fetch_all(sqlite_pool(store))
    .await
    .unwrap()
}

/// Tasks are appended in creation order, which fills pages to the brim; a
/// claim that made their rows longer would overflow each page and make
/// SQLite move rows between neighbours, rewriting pages the claim did not
/// name (migration `0014_row_slack`).
#[tokio::test]
async fn claims_move_no_task_row_to_another_page_sqlite() {
    let path = TempDb::new();
    let store = path.store().await;
    let org = OrgId::new_v7();
    let tasks: Vec<StoredTask> = (0..300)
        .map(|i| StoredTask {
            title: vec![1; 48],
            description: Some(vec![2; 150]),
            metadata: Some(vec![3; 55]),
            ..task(header(TaskStatus::Pending, 100 + i))
        })
        .collect();
    let created = WriteBatch {
        org,
        ops: vec![WriteOp::InsertTasks(tasks.clone())],
        fence: None,
        marked: None,
        wakes_deliveries: false,
    };
    store.apply(&[&created]).await.unwrap();
    let before = task_leaves(&store).await;
    assert!(before.len() > 10, "the tasks fill many pages: {before:?}");

    let claims = WriteBatch {
        org,
        ops: tasks
            .iter()
            .map(|t| WriteOp::UpdateHeader {
                header: claimed(&t.header, "agent-7@example.com", 1_795_581_918_696, 300),
                was_finished: false,
            })
            .collect(),
        fence: None,
        marked: None,
        wakes_deliveries: false,
    };
    store.apply(&[&claims]).await.unwrap();
    assert_eq!(task_leaves(&store).await, before);
    store.close().await;
}

/// `migrator` without the migrations from `version` on.
fn migrations_before(
    mut migrator: sqlx::migrate::Migrator,
    version: i64,
) -> sqlx::migrate::Migrator {
    migrator.migrations = migrator
        .migrations
        .iter()
        .filter(|m| m.version < version)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    migrator
}

/// A database of its own on the PostgreSQL server `TASKQ_TEST_POSTGRES_URL`
/// names, dropped by `drop`.
pub(super) struct ScratchDatabase {
    admin: sqlx::PgConnection,
    name: String,
    pub(super) url: String,
}

impl ScratchDatabase {
    /// On the server `TASKQ_TEST_POSTGRES_URL` names (`taskq_test_env =
    /// "postgres"`).
    pub(super) async fn create() -> Self {
        let admin_url = environment::need("TASKQ_TEST_POSTGRES_URL");
        let name = format!("taskq_store_{}", Uuid::new_v4().simple());
        let mut admin = sqlx::PgConnection::connect(&admin_url).await.unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .unwrap();
        let url = with_database(&admin_url, &name);
        ScratchDatabase { admin, name, url }
    }

    pub(super) async fn drop(mut self) {
        sqlx::query(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .execute(&mut self.admin)
            .await
            .unwrap();
    }
}

/// Opens a store whose file was written with the migrations before
/// `version` only, and then by `write` (raw SQL, in that schema): the
/// store runs the rest when it opens.
pub(super) async fn store_written_before(
    path: &TempDb,
    version: i64,
    write: &[(&str, Vec<String>)],
) -> Store {
    let url = format!("sqlite://{}?mode=rwc", path.0.display());
    let before = migrations_before(sqlx::migrate!("../migrations/sqlite"), version);
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    before.run(&pool).await.unwrap();
    for (sql, binds) in write {
        binds
            .iter()
            .fold(sqlx::query(sql), |q, b| q.bind(b))
            .execute(&pool)
            .await
            .unwrap();
    }
    pool.close().await;
    Store::connect(&url, &StoreOptions::default())
        .await
        .unwrap()
}

/// The `at` of the task's events, in the order the store gives them.
async fn event_times(store: &Store, org: OrgId, task: TaskId) -> Vec<i64> {
    store
        .task_events(org, task)
        .await
        .unwrap()
        .iter()
        .map(|e| e.at)
        .collect()
}

/// Appends an event (`at`) to a task through a commit.
async fn append_event(store: &Store, org: OrgId, task: TaskId, at: i64) {
    append_events(store, org, &[(task, at)]).await;
}

/// Appends events (`at`, each to its task) through one commit, in order.
async fn append_events(store: &Store, org: OrgId, events: &[(TaskId, i64)]) {
    let reopened = |&(task_id, at): &(TaskId, i64)| StoredEvent {
        task_id,
        from_status: Some(TaskStatus::Completed),
        to_status: TaskStatus::Pending,
        agent_id: "agent".into(),
        at,
        note: None,
        lease_expired: false,
    };
    store
        .apply(&[&WriteBatch {
            org,
            ops: vec![WriteOp::InsertEvents(events.iter().map(reopened).collect())],
            fence: None,
            marked: None,
            wakes_deliveries: false,
        }])
        .await
        .unwrap();
}

/// Events of two tasks appended in one commit, interleaved, read back in
/// order after the tasks' earlier events: a commit chains each task's
/// events to one another and to the task's latest before it.
async fn events_chained_within_a_commit(store: &Store, org: OrgId, first: TaskId, second: TaskId) {
    let before_first = event_times(store, org, first).await;
    let before_second = event_times(store, org, second).await;
    append_events(
        store,
        org,
        &[
            (first, 101),
            (second, 201),
            (first, 102),
            (first, 103),
            (second, 202),
        ],
    )
    .await;
    let with = |mut before: Vec<i64>, added: &[i64]| {
        before.extend_from_slice(added);
        before
    };
    assert_eq!(
        event_times(store, org, first).await,
        with(before_first, &[101, 102, 103])
    );
    assert_eq!(
        event_times(store, org, second).await,
        with(before_second, &[201, 202])
    );
}

/// A task row as the schemas before `0013_event_chain` hold it.
const OLD_TASK: &str = "INSERT INTO tasks (org_id, task_id, status, status_rank, priority, \
     tags, blocked_by, created_at, updated_at, title) \
     VALUES ($1, $2, 'completed', 5, 0, '[]', '[]', 10, 12, x'00')";

/// A store written before `0012_event_watermark`, with events settled
/// (`indexed = 1`) and not (`indexed = 0`), reads every event of a task
/// in order after the migrations, and those it appends after them too,
/// before and after a settle.
#[tokio::test]
async fn events_survive_the_watermark_migration() {
    let path = TempDb::new();
    let (org, task) = (OrgId::new_v7(), TaskId::new_v7());
    let keys = vec![org.to_string(), task.to_string()];
    let mut write = vec![(OLD_TASK, keys.clone())];
    for (to, at, indexed) in [
        ("pending", "10", "1"),
        ("in_progress", "11", "1"),
        ("completed", "12", "0"),
    ] {
        let mut binds = keys.clone();
        binds.extend([to.to_string(), at.to_string(), indexed.to_string()]);
        write.push((
            "INSERT INTO task_events (org_id, task_id, to_status, agent_id, at, indexed) \
             VALUES ($1, $2, $3, 'agent', CAST($4 AS INTEGER), CAST($5 AS INTEGER))",
            binds,
        ));
    }
    let store = store_written_before(&path, 12, &write).await;
    assert_eq!(event_times(&store, org, task).await, [10, 11, 12]);
    append_event(&store, org, task, 13).await;
    assert_eq!(event_times(&store, org, task).await, [10, 11, 12, 13]);
    store.settle().await.unwrap();
    assert_eq!(event_times(&store, org, task).await, [10, 11, 12, 13]);
    store.close().await;
}

/// A store written before `0013_event_chain`, whose tasks have events
/// settled into `task_event_order` and events after the watermark, reads
/// each task's events in order after the migration, interleaved as they
/// were written, and chains the events it appends after them.
#[tokio::test]
async fn events_survive_the_chain_migration() {
    let path = TempDb::new();
    let org = OrgId::new_v7();
    let (first, second) = (TaskId::new_v7(), TaskId::new_v7());
    let mut write = Vec::new();
    for task in [first, second] {
        write.push((OLD_TASK, vec![org.to_string(), task.to_string()]));
    }
    // Events 1 to 6 alternate between the tasks; 1 to 4 are settled.
    for (task, at) in [
        (first, 10),
        (second, 20),
        (first, 11),
        (second, 21),
        (first, 12),
        (second, 22),
    ] {
        write.push((
            "INSERT INTO task_events (org_id, task_id, to_status, agent_id, at) \
             VALUES ($1, $2, 'pending', 'agent', CAST($3 AS INTEGER))",
            vec![org.to_string(), task.to_string(), at.to_string()],
        ));
    }
    write.push((
        "INSERT INTO task_event_order (task_id, event_id) \
         SELECT task_id, event_id FROM task_events WHERE event_id <= 4",
        vec![],
    ));
    write.push(("UPDATE events_settled SET event_id = 4", vec![]));
    let store = store_written_before(&path, 13, &write).await;
    assert_eq!(event_times(&store, org, first).await, [10, 11, 12]);
    assert_eq!(event_times(&store, org, second).await, [20, 21, 22]);
    append_event(&store, org, second, 23).await;
    append_event(&store, org, first, 13).await;
    assert_eq!(event_times(&store, org, first).await, [10, 11, 12, 13]);
    assert_eq!(event_times(&store, org, second).await, [20, 21, 22, 23]);
    events_chained_within_a_commit(&store, org, first, second).await;
    store.close().await;
}

/// The plan a PostgreSQL writer keeps for its commit statement finds each
/// changed row by its table's primary key, and scans no table: it is made
/// once and kept however large the tables grow.
async fn commit_plan_finds_rows_by_key(store: &Store) {
    let WriterConn::Postgres { mut conn, .. } = store.writer_conn(0).await.unwrap() else {
        panic!("a PostgreSQL store gives PostgreSQL writers");
    };
    let (prepare, explain) = super::commit::plan_check();
    sqlx::query(&prepare).execute(&mut conn).await.unwrap();
    let plan: Vec<String> = sqlx::query_scalar(&explain)
        .fetch_all(&mut conn)
        .await
        .unwrap();
    let plan = plan.join("\n");
    assert!(!plan.contains("Seq Scan"), "{plan}");
    assert!(
        !plan.contains("Hash Join") && !plan.contains("Merge Join"),
        "{plan}"
    );
    for lookup in [
        "Index Scan using tasks_pkey on tasks",
        "Index Scan using task_vectors_pkey on task_vectors",
    ] {
        assert!(plan.contains(lookup), "{lookup} missing from:\n{plan}");
    }
}

/// A PostgreSQL database written before `0016_event_chain`, whose two
/// tasks' events interleave, reads each task's events in order after the
/// migration, and chains the events it appends after them, several of a
/// task in one commit among them.
#[tokio::test]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn events_survive_the_postgres_chain_migration() {
    let scratch = ScratchDatabase::create().await;
    let url = scratch.url.clone();
    let before = migrations_before(sqlx::migrate!("../migrations/postgres"), 16);
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    before.run(&pool).await.unwrap();
    let org = OrgId::new_v7();
    let (first, second) = (TaskId::new_v7(), TaskId::new_v7());
    for task in [first, second] {
        sqlx::query(
            "INSERT INTO tasks (org_id, task_id, status, status_rank, priority, tags, \
             blocked_by, created_at, updated_at, title, finished_rank) \
             VALUES ($1, $2, 'completed', 5, 0, '[]', '[]', 10, 12, '\\x00', 5)",
        )
        .bind(org.to_string())
        .bind(task.to_string())
        .execute(&pool)
        .await
        .unwrap();
    }
    for (task, at) in [
        (first, 10_i64),
        (second, 20),
        (first, 11),
        (second, 21),
        (first, 12),
    ] {
        sqlx::query(
            "INSERT INTO task_events (org_id, task_id, to_status, agent_id, at) \
             VALUES ($1, $2, 'pending', 'agent', $3)",
        )
        .bind(org.to_string())
        .bind(task.to_string())
        .bind(at)
        .execute(&pool)
        .await
        .unwrap();
    }
    pool.close().await;
    let store = Store::connect(&url, &StoreOptions::default())
        .await
        .unwrap();
    assert_eq!(event_times(&store, org, first).await, [10, 11, 12]);
    assert_eq!(event_times(&store, org, second).await, [20, 21]);
    append_event(&store, org, second, 22).await;
    assert_eq!(event_times(&store, org, second).await, [20, 21, 22]);
    events_chained_within_a_commit(&store, org, first, second).await;
    store.close().await;
    scratch.drop().await;
}

#[tokio::test]
#[cfg_attr(
    not(taskq_test_env = "postgres"),
    ignore = "needs TASKQ_TEST_POSTGRES_URL (a PostgreSQL server)"
)]
async fn round_trip_postgres() {
    let scratch = ScratchDatabase::create().await;
    let url = scratch.url.clone();
    let store = Store::connect(&url, &StoreOptions::default())
        .await
        .unwrap();
    round_trip(&store).await;
    failed_commit(&store).await;
    later_changes(&store).await;
    finished_and_reopened(&store, false).await;
    finished_and_reopened(&store, true).await;
    commit_plan_finds_rows_by_key(&store).await;
    store.close().await;
    scratch.drop().await;
}

pub(super) async fn commit_ops(store: &Store, org: OrgId, ops: Vec<WriteOp>) {
    store
        .apply(&[&WriteBatch {
            org,
            ops,
            fence: None,
            marked: None,
            wakes_deliveries: false,
        }])
        .await
        .unwrap();
}
