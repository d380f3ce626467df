//! Claiming work: the order tasks come out in, the tag filter and strict
//! tags, what a claimed task looks like, and concurrent claims.

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use crate::support::{decode, eventually, TestEngine};
use serde_json::json;
use taskq_actors::api::{ClaimRequest, CreateTags, MemberPatch};
use taskq_actors::domain::{TaskId, TaskStatus};

fn id(n: u8) -> String {
    format!("00000000-0000-4000-8000-0000000000{n:02x}")
}

fn parse(s: &str) -> TaskId {
    s.parse().expect("a task id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_take_priority_first_then_the_oldest_then_the_smallest_id() {
    let t = TestEngine::start().await;
    let org = t.org("order").await;
    // The oldest task has the largest id, so age and id order disagree.
    t.create(
        &org.owner,
        json!([{"title": "old p3", "task_id": id(0x0f), "priority": 3}]),
    )
    .await;
    t.clock.advance(1_000);
    t.create(
        &org.owner,
        json!([
            {"title": "new p3 b", "task_id": id(0x02), "priority": 3},
            {"title": "new p1", "task_id": id(0x0e), "priority": 1},
            {"title": "new p5", "task_id": id(0x00), "priority": 5},
            {"title": "new p3 a", "task_id": id(0x01), "priority": 3}
        ]),
    )
    .await;

    let mut order = Vec::new();
    while let Some(claimed) = t.claim(&org.owner, json!({"include_context": false})).await {
        order.push(claimed.task.task_id);
    }
    let expected: Vec<TaskId> = [0x0e, 0x0f, 0x01, 0x02, 0x00]
        .into_iter()
        .map(|n| parse(&id(n)))
        .collect();
    assert_eq!(order, expected);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_queue_answers_none() {
    let t = TestEngine::start().await;
    let org = t.org("empty").await;
    assert!(t.claim(&org.owner, json!({})).await.is_none());

    // Work that is not pending is not claimable either.
    t.create(
        &org.owner,
        json!([
            {"title": "blocker", "ref": "b"},
            {"title": "waits", "blocked_by": ["ref:b"]}
        ]),
    )
    .await;
    assert!(t.claim(&org.owner, json!({})).await.is_some());
    assert!(t.claim(&org.owner, json!({})).await.is_none());
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_task_is_in_progress_assigned_and_leased() {
    let t = TestEngine::start().await;
    let org = t.org("leased").await;
    let agent = t.member(&org, "a", "agent-a").await;
    let task = t.create_one(&org.owner, json!({"title": "work"})).await;

    let before = t.now_ms();
    let claimed = t
        .claim(&agent, json!({"lease_seconds": 90}))
        .await
        .expect("a task");
    let after = t.now_ms();
    assert_eq!(claimed.task.task_id, task);
    assert_eq!(claimed.task.status, TaskStatus::InProgress);
    assert_eq!(claimed.task.assignee.as_deref(), Some("agent-a"));
    let lease = claimed
        .task
        .lease
        .expect("a claimed task carries its lease");
    assert_eq!(lease.lease_seconds, 90);
    let expires = lease.lease_expires_at.0;
    assert!(
        (before + 90_000..=after + 90_000).contains(&expires),
        "lease_expires_at {expires} is not now + 90 s ({before}..={after})"
    );

    // The store holds what the claim answered.
    let stored = t.get(&org.owner, task).await;
    assert_eq!(stored.task.status, TaskStatus::InProgress);
    assert_eq!(stored.task.assignee.as_deref(), Some("agent-a"));
    assert_eq!(
        stored.task.lease.map(|l| l.lease_expires_at.0),
        Some(expires)
    );
    let last = stored.history.expect("history").pop().expect("events");
    assert_eq!(
        (last.from_status, last.to_status, last.agent_id.as_str()),
        (Some(TaskStatus::Pending), TaskStatus::InProgress, "agent-a")
    );

    // Every claim gets its own lease id.
    let second = t.create_one(&org.owner, json!({"title": "more"})).await;
    let again = t.claim(&agent, json!({})).await.expect("a task");
    assert_eq!(again.task.task_id, second);
    assert_ne!(again.lease_id, claimed.lease_id);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tag_filter_matches_any_of_the_given_tags() {
    let t = TestEngine::start().await;
    let org = t.org("tags").await;
    t.engine
        .create_tags(
            &org.owner,
            decode::<CreateTags>(json!({"tags": [{"name": "a"}, {"name": "b"}, {"name": "c"}]})),
        )
        .await
        .expect("tags");
    let created = t
        .create(
            &org.owner,
            json!([
                {"title": "b only", "tags": ["b"], "priority": 1},
                {"title": "a", "tags": ["a"], "priority": 3},
                {"title": "b and c", "tags": ["b", "c"], "priority": 2},
                {"title": "untagged", "tags": [], "priority": 1}
            ]),
        )
        .await;
    let ids: Vec<TaskId> = created.results.iter().map(|r| r.task_id).collect();

    let filter = json!({"tags": ["a", "c"], "include_context": false});
    let first = t.claim(&org.owner, filter.clone()).await.expect("a match");
    let second = t.claim(&org.owner, filter.clone()).await.expect("a match");
    assert_eq!(
        (first.task.task_id, second.task.task_id),
        (ids[2], ids[1]),
        "tasks with a or c, in claim order"
    );
    assert!(
        t.claim(&org.owner, filter).await.is_none(),
        "no pending task carries a or c"
    );

    // Without a filter, the rest is claimable.
    let rest = t.claim(&org.owner, json!({})).await.expect("a task");
    assert!(rest.task.task_id == ids[0] || rest.task.task_id == ids[3]);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_tagged_work_goes_only_to_members_holding_the_tag() {
    let t = TestEngine::start().await;
    let org = t.org("strict").await;
    let agent = t.member(&org, "agent", "agent").await;
    t.engine
        .create_tags(
            &org.owner,
            decode::<CreateTags>(json!({"tags": [
                {"name": "gpu", "strict": true, "description": "needs a GPU host"},
                {"name": "cpu"}
            ]})),
        )
        .await
        .expect("tags");
    let gpu = t
        .create_one(
            &org.owner,
            json!({"title": "train", "tags": ["gpu"], "priority": 1}),
        )
        .await;
    let gpu_and_cpu = t
        .create_one(
            &org.owner,
            json!({"title": "train too", "tags": ["cpu", "gpu"], "priority": 1}),
        )
        .await;
    let cpu = t
        .create_one(
            &org.owner,
            json!({"title": "parse", "tags": ["cpu"], "priority": 3}),
        )
        .await;

    // The strict tasks come first in claim order, but the agent lacks the tag.
    let claimed = t.claim(&agent, json!({})).await.expect("the cpu task");
    assert_eq!(claimed.task.task_id, cpu);
    assert!(t.claim(&agent, json!({})).await.is_none());
    assert!(t.claim(&agent, json!({"tags": ["gpu"]})).await.is_none());

    let email = agent.email.clone();
    let patched = t
        .engine
        .patch_member(
            &org.owner,
            &email,
            decode::<MemberPatch>(json!({"profile_tags": ["gpu"]})),
        )
        .await
        .expect("the owner sets profile tags");
    assert_eq!(patched.profile_tags, vec!["gpu".to_owned()]);

    let first = t.claim(&agent, json!({"tags": ["gpu"]})).await;
    let second = t.claim(&agent, json!({})).await;
    let mut got: Vec<TaskId> = [first, second]
        .into_iter()
        .map(|c| c.expect("strict work is claimable now").task.task_id)
        .collect();
    got.sort();
    let mut want = vec![gpu, gpu_and_cpu];
    want.sort();
    assert_eq!(got, want);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claims_never_share_a_task() {
    const TASKS: usize = 40;
    const CLAIMERS: usize = 60;
    let t = TestEngine::start().await;
    let org = t.org("race").await;
    let mut created = Vec::new();
    for batch in 0..TASKS / 20 {
        let items: Vec<_> = (0..20)
            .map(|i| json!({"title": format!("t{batch}-{i}")}))
            .collect();
        created.extend(
            t.create(&org.owner, json!(items))
                .await
                .results
                .into_iter()
                .map(|r| r.task_id),
        );
    }
    let agents = [
        t.member(&org, "a", "agent-a").await,
        t.member(&org, "b", "agent-b").await,
        t.member(&org, "c", "agent-c").await,
    ];

    let mut handles = Vec::new();
    for i in 0..CLAIMERS {
        let engine = t.engine.clone();
        let caller = agents[i % agents.len()].clone();
        handles.push(tokio::spawn(async move {
            let request = decode(json!({"include_context": false}));
            engine
                .claim(&caller, request)
                .await
                .expect("claim answers")
                .map(|c| (c.task.task_id, c.task.assignee, caller.key_name))
        }));
    }
    let mut claimed = Vec::new();
    let mut empty = 0;
    for h in handles {
        match h.await.expect("claim task") {
            Some((task, assignee, key)) => {
                assert_eq!(assignee, Some(key), "assigned to the claiming key");
                claimed.push(task);
            }
            None => empty += 1,
        }
    }
    assert_eq!(claimed.len(), TASKS, "every task claimed once");
    assert_eq!(empty, CLAIMERS - TASKS);
    claimed.sort();
    claimed.dedup();
    assert_eq!(claimed.len(), TASKS, "no task claimed twice");
    created.sort();
    assert_eq!(claimed, created);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_caller_went_away_before_the_answer_is_undone() {
    let t = TestEngine::start().await;
    let org = t.org("gone").await;
    let agent = t.member(&org, "agent", "agent-a").await;
    let id = t
        .create_one(&org.owner, json!({"title": "left behind"}))
        .await;

    // The claim reaches the actor and is granted; then its caller goes
    // away (an HTTP client that hung up) before the answer is built.
    {
        let claim = t.engine.claim(&agent, decode::<ClaimRequest>(json!({})));
        let mut claim = std::pin::pin!(claim);
        let sent = std::future::poll_fn(|cx| Poll::Ready(claim.as_mut().poll(cx))).await;
        assert!(sent.is_pending(), "the claim waits for the actor");
        eventually("the task is claimed", Duration::from_secs(10), || async {
            let status = t.get(&org.owner, id).await.task.status;
            (status == TaskStatus::InProgress).then_some(())
        })
        .await;
    }

    let detail = eventually("the claim is undone", Duration::from_secs(10), || async {
        let detail = t.get(&org.owner, id).await;
        (detail.task.status == TaskStatus::Pending).then_some(detail)
    })
    .await;
    assert_eq!(detail.task.assignee, None);
    assert!(detail.task.lease.is_none(), "nobody holds a lease");
    let last = detail.history.expect("history").pop().expect("events");
    assert_eq!(
        (last.from_status, last.to_status, last.agent_id.as_str()),
        (Some(TaskStatus::InProgress), TaskStatus::Pending, "system")
    );
    assert_eq!(
        last.note.as_ref().and_then(|n| n.as_plain()),
        Some("claimant went away")
    );

    // The next claimant gets it at once, not after the lease.
    let again = t.claim(&agent, json!({})).await.expect("the task again");
    assert_eq!(again.task.task_id, id);
    t.stop().await;
}
