//! PostgreSQL's event ids and links, which its writers give before the
//! commit statement binds them.

use std::collections::HashSet;
use std::sync::Mutex;

use dashmap::DashMap;

use crate::domain::{OrgId, TaskId};
use crate::store::commit::{CommitPlan, EventChain};

/// Event ids and links on PostgreSQL (migration `0016_event_chain`).
///
/// A commit statement that numbered its own events and looked up each
/// task's latest cost PostgreSQL more than the index it replaced (see
/// docs/perf/history/, twentieth step). So the writers number events before the
/// statement, from one counter for all lanes, and remember each task's
/// latest event from the commits they made; the statement binds every id
/// and link. An org's batches all commit on one lane, in order, so what a
/// lane remembers of a task is what its row holds. A task is forgotten
/// when it finishes, so this holds open tasks only, and when a commit with
/// its events fails (it may have committed all the same). The first event
/// of a task not remembered (created before the server started, reopened,
/// or after a failed commit) reads its predecessor from the task row.
///
/// The ids come in blocks of [`EVENT_ID_BLOCK`] from the sequence
/// `task_event_ids` (migration `0017_cluster`), one `nextval` a block, so
/// the nodes of a cluster never give one id twice. After its node takes an
/// org over ([`EventLinks::renew`]), a writer numbers from a block taken
/// later: the org's earlier owner took its blocks before it lost the org,
/// so an org's events keep rising, which is the order readers sort them in.
#[derive(Debug, Default)]
pub struct EventLinks {
    ids: Mutex<IdBlock>,
    latest: DashMap<(OrgId, TaskId), i64>,
}

/// The sequence's increment: the ids one `nextval` hands out.
pub const EVENT_ID_BLOCK: i64 = 1 << 20;

/// The ids left in the block in use, and the renewal it was taken after.
#[derive(Debug, Default)]
struct IdBlock {
    next: i64,
    end: i64,
    generation: u64,
}

/// A plan's events with their ids (`chain`) and, for each, the id of its
/// task's event before it when known (`prev`), or whether the statement
/// reads it from the task row (`look_up`), which a task the plan inserts
/// (`inserted`) never does.
pub(in crate::store::commit) struct LinkedEvents<'a> {
    pub(super) inserted: HashSet<(OrgId, TaskId)>,
    pub(super) chain: EventChain<'a>,
    pub(super) prev: Vec<Option<i64>>,
    pub(super) look_up: Vec<bool>,
}

impl EventLinks {
    /// Ids for `count` events, the first of them answered: from the block
    /// in use, or from a new one when it runs short or its node took an
    /// org over since it was taken. Ids a failed commit took are not given
    /// again.
    pub(in crate::store::commit) async fn reserve(
        &self,
        count: usize,
        conn: &mut sqlx::PgConnection,
    ) -> Result<i64, sqlx::Error> {
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        loop {
            let generation = {
                let mut block = self.ids.lock().unwrap_or_else(|e| e.into_inner());
                if block.end - block.next >= count {
                    let first = block.next;
                    block.next += count;
                    return Ok(first);
                }
                block.generation
            };
            let start: i64 = sqlx::query_scalar("SELECT nextval('task_event_ids')")
                .fetch_one(&mut *conn)
                .await?;
            let mut block = self.ids.lock().unwrap_or_else(|e| e.into_inner());
            if block.generation == generation && count <= EVENT_ID_BLOCK {
                *block = IdBlock {
                    next: start + count,
                    end: start + EVENT_ID_BLOCK,
                    generation,
                };
                return Ok(start);
            }
            if count > EVENT_ID_BLOCK {
                return Err(sqlx::Error::Protocol(format!(
                    "a commit of {count} events is more than a block of ids"
                )));
            }
        }
    }

    /// This node just took an org over: the next ids come from a block
    /// taken after now.
    pub fn renew(&self) {
        let mut block = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        block.next = block.end;
        block.generation += 1;
    }

    /// Forgets what is remembered of an org this node no longer owns: its
    /// next owner appends events this node will not see.
    pub fn forget_org(&self, org: OrgId) {
        self.latest.retain(|(o, _), _| *o != org);
    }

    /// Gives the plan's events their ids, from `first_id` on, and links.
    pub(in crate::store::commit) fn link<'a>(
        &self,
        plan: &CommitPlan<'a>,
        first_id: i64,
    ) -> LinkedEvents<'a> {
        let chain = EventChain::new(plan, first_id);
        let inserted: HashSet<(OrgId, TaskId)> = plan
            .inserts
            .iter()
            .map(|(org, task)| (*org, task.header.task_id))
            .collect();
        let (prev, look_up) = chain
            .events
            .iter()
            .map(|&(_, prev, org, event)| {
                let key = (org, event.task_id);
                match prev.or_else(|| self.latest.get(&key).map(|id| *id)) {
                    Some(id) => (Some(id), false),
                    None => (None, !inserted.contains(&key)),
                }
            })
            .unzip();
        LinkedEvents {
            inserted,
            chain,
            prev,
            look_up,
        }
    }

    /// Remembers what a committed plan left as each task's latest event.
    pub(in crate::store::commit) fn committed(
        &self,
        plan: &CommitPlan<'_>,
        linked: &LinkedEvents<'_>,
    ) {
        for (key, id) in &linked.chain.last {
            self.latest.insert(*key, *id);
        }
        let finished = plan
            .headers
            .iter()
            .filter(|(_, p)| p.header.status.is_terminal())
            .map(|(key, _)| *key)
            .chain(
                plan.inserts
                    .iter()
                    .filter(|(_, t)| t.header.status.is_terminal())
                    .map(|(org, t)| (*org, t.header.task_id)),
            );
        for key in finished {
            self.latest.remove(&key);
        }
    }

    /// Forgets the latest event of every task a failed commit had events
    /// for: their next events read it from the task rows.
    pub(in crate::store::commit) fn forget(&self, plan: &CommitPlan<'_>) {
        for (org, event) in &plan.events {
            self.latest.remove(&(*org, event.task_id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{StoredEvent, TaskHeader, TaskStatus};
    use crate::store::tests::{header, task};
    use crate::store::{WriteBatch, WriteOp};

    fn event(task_id: TaskId) -> StoredEvent {
        StoredEvent {
            task_id,
            from_status: None,
            to_status: TaskStatus::Pending,
            agent_id: "agent".into(),
            at: 10,
            note: None,
            lease_expired: false,
        }
    }

    fn events(org: OrgId, tasks: &[TaskId]) -> WriteBatch {
        WriteBatch::new(
            org,
            vec![WriteOp::InsertEvents(
                tasks.iter().map(|t| event(*t)).collect(),
            )],
        )
    }

    fn ids(linked: &LinkedEvents<'_>) -> Vec<i64> {
        linked.chain.events.iter().map(|e| e.0).collect()
    }

    #[test]
    fn events_link_to_what_earlier_commits_left() {
        let links = EventLinks::default();
        let org = OrgId::new_v7();
        let (a, b) = (TaskId::new_v7(), TaskId::new_v7());

        let first = events(org, &[a, b, a]);
        let plan = CommitPlan::new(&[&first]);
        let linked = links.link(&plan, 42);
        assert_eq!(ids(&linked), [42, 43, 44]);
        // Neither task is known yet: their first events read the rows.
        assert_eq!(linked.prev, [None, None, Some(42)]);
        assert_eq!(linked.look_up, [true, true, false]);
        links.committed(&plan, &linked);

        let second = events(org, &[b, a]);
        let plan = CommitPlan::new(&[&second]);
        let linked = links.link(&plan, 45);
        assert_eq!(ids(&linked), [45, 46]);
        assert_eq!(linked.prev, [Some(43), Some(44)]);
        assert_eq!(linked.look_up, [false, false]);

        // After a failed commit the tasks' rows say what their latest is.
        links.forget(&plan);
        let linked = links.link(&plan, 47);
        assert_eq!(ids(&linked), [47, 48]);
        assert_eq!(linked.prev, [None, None]);
        assert_eq!(linked.look_up, [true, true]);
    }

    #[test]
    fn inserted_tasks_look_nothing_up_and_finished_ones_are_forgotten() {
        let links = EventLinks::default();
        let org = OrgId::new_v7();
        let open = header(TaskStatus::Pending, 10);
        let created = WriteBatch {
            org,
            ops: vec![
                WriteOp::InsertTasks(vec![task(open.clone())]),
                WriteOp::InsertEvents(vec![event(open.task_id)]),
            ],
            fence: None,
            marked: None,
            wakes_deliveries: false,
        };
        let plan = CommitPlan::new(&[&created]);
        let linked = links.link(&plan, 1);
        assert_eq!(
            (linked.prev.clone(), linked.look_up.clone()),
            (vec![None], vec![false])
        );
        links.committed(&plan, &linked);

        let done = TaskHeader {
            status: TaskStatus::Completed,
            ..open.clone()
        };
        let finished = WriteBatch {
            org,
            ops: vec![
                WriteOp::UpdateHeader {
                    header: done,
                    was_finished: false,
                },
                WriteOp::InsertEvents(vec![event(open.task_id)]),
            ],
            fence: None,
            marked: None,
            wakes_deliveries: false,
        };
        let plan = CommitPlan::new(&[&finished]);
        let linked = links.link(&plan, 1);
        assert_eq!(
            (linked.prev.clone(), linked.look_up.clone()),
            (vec![Some(1)], vec![false])
        );
        links.committed(&plan, &linked);

        // Reopened later: the finished task was forgotten, so its row says.
        let reopened = events(org, &[open.task_id]);
        let plan = CommitPlan::new(&[&reopened]);
        let linked = links.link(&plan, 1);
        assert_eq!(
            (linked.prev.clone(), linked.look_up.clone()),
            (vec![None], vec![true])
        );
    }
}
