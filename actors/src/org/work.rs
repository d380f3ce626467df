//! The changes one message makes, gathered before they are submitted as one
//! batch: task rows, header changes, sealed content, state events, account
//! rows, and whether the month's usage must be stored with them. Webhook
//! deliveries and the event stream read the state events themselves, so
//! a batch carries nothing else for them.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::OrgState;
use crate::api::{note_bytes, Text};
use crate::domain::mark::{ChangeMark, MarkedCounts};
use crate::domain::webhooks::OutboxEvent;
use crate::domain::{ContentField, StoredEvent, StoredTask, TaskHeader, TaskId, TaskStatus};
use crate::store::{WriteBatch, WriteOp};

#[derive(Default)]
pub(super) struct Work {
    /// Finished tasks read from the store, or finished by this message.
    pub loaded: HashMap<TaskId, TaskHeader>,
    pub inserted: Vec<StoredTask>,
    pub changed: Vec<TaskId>,
    /// Changed tasks that were finished and are open again.
    reopened: HashSet<TaskId>,
    pub content: Vec<WriteOp>,
    pub events: Vec<StoredEvent>,
    /// Members, keys, tags, teams.
    pub accounts: Vec<WriteOp>,
    /// The usage counters changed (admission, task creation).
    pub save_usage: bool,
    /// Webhook events made other than by a state change (a test event).
    pub outbox: Vec<OutboxEvent>,
}

impl Work {
    pub fn header<'a>(&'a self, state: &'a OrgState, id: TaskId) -> Option<&'a TaskHeader> {
        state.open.get(id).or_else(|| self.loaded.get(&id))
    }

    /// Whether `id` is a live blocker (not completed); `None` if unknown.
    pub fn is_live(&self, state: &OrgState, id: TaskId) -> Option<bool> {
        if state.open.contains(id) {
            return Some(true);
        }
        self.loaded
            .get(&id)
            .map(|h| h.status != TaskStatus::Completed)
    }

    /// Stores the new header of an existing task in memory.
    pub fn put(&mut self, state: &mut OrgState, h: TaskHeader) {
        if !self.changed.contains(&h.task_id) {
            self.changed.push(h.task_id);
        }
        state.task_waits.note(h.task_id, h.status.is_terminal());
        if h.status.is_terminal() {
            state.open.remove(h.task_id);
            self.loaded.insert(h.task_id, h);
        } else {
            if self.loaded.remove(&h.task_id).is_some() {
                self.reopened.insert(h.task_id);
            }
            state.open.put(h);
        }
    }

    /// Seals a value as JSON, bound to its org, task and field.
    pub fn seal(
        &self,
        state: &OrgState,
        task: TaskId,
        field: ContentField,
        value: &impl Serialize,
    ) -> Vec<u8> {
        let bytes = serde_json::to_vec(value).expect("JSON values serialize");
        state.entry.cipher.seal(task, field.name(), &bytes)
    }

    pub fn set_content(
        &mut self,
        state: &OrgState,
        task: TaskId,
        field: ContentField,
        value: Option<&impl Serialize>,
    ) {
        let value = value.map(|v| self.seal(state, task, field, v));
        self.content.push(WriteOp::SetContent {
            task_id: task,
            field,
            value,
        });
    }

    /// Moves `h` to `to` and records the state event.
    pub fn transition(
        &mut self,
        state: &OrgState,
        h: &mut TaskHeader,
        to: TaskStatus,
        agent: &str,
        note: Option<&Text>,
        now: i64,
    ) {
        let from = h.status;
        h.status = to;
        h.updated_at = now;
        if to != TaskStatus::InProgress {
            h.lease = None;
        }
        self.events.push(StoredEvent {
            task_id: h.task_id,
            from_status: Some(from),
            to_status: to,
            agent_id: agent.to_owned(),
            at: now,
            note: note.map(|n| {
                state
                    .entry
                    .cipher
                    .seal(h.task_id, ContentField::Note.name(), &note_bytes(n))
            }),
            lease_expired: false,
        });
    }

    /// Marks the last state change as made by a lease's expiry (its
    /// webhook event is `task.lease_expired`).
    pub fn lease_expired(&mut self) {
        if let Some(last) = self.events.last_mut() {
            last.lease_expired = true;
        }
    }

    /// Drops everything but the usage: a request that failed writes nothing
    /// of its own, but it was admitted and counts.
    pub fn discard_changes(&mut self) {
        *self = Work {
            save_usage: self.save_usage,
            ..Work::default()
        };
    }

    pub fn is_empty(&self) -> bool {
        self.inserted.is_empty()
            && self.changed.is_empty()
            && self.content.is_empty()
            && self.events.is_empty()
            && self.accounts.is_empty()
            && self.outbox.is_empty()
            && !self.save_usage
    }

    /// The batch to commit. The actor keeps the content of the tasks it
    /// creates until they are claimed, and drops a copy whose task's
    /// content changes or that finishes, here, where every message's
    /// changes pass on their way to the writer.
    pub fn into_batch(self, state: &mut OrgState) -> WriteBatch {
        for task in &self.inserted {
            state.content.keep(task);
        }
        if let Some(pins) = &mut state.sweep_pins {
            let written = self.inserted.iter().map(|t| &t.header);
            let changed = (self.changed.iter())
                .filter_map(|id| state.open.get(*id).or_else(|| self.loaded.get(id)));
            for h in written.chain(changed) {
                h.parent
                    .into_iter()
                    .chain(h.blocked_by.iter().copied())
                    .for_each(|id| pins.pin(id));
            }
        }
        for op in &self.content {
            if let WriteOp::SetContent { task_id, .. } = op {
                state.content.forget(*task_id);
            }
        }
        for id in &self.changed {
            if !state.open.contains(*id) {
                state.content.forget(*id);
            }
        }
        let wakes_deliveries = !self.outbox.is_empty()
            || (!self.events.is_empty() && state.webhooks.iter().any(|e| e.active));
        let mut ops = Vec::with_capacity(4 + self.changed.len() + self.content.len());
        ops.extend(self.accounts);
        if !self.inserted.is_empty() {
            ops.push(WriteOp::InsertTasks(self.inserted));
        }
        for id in &self.changed {
            if let Some(h) = state.open.get(*id).or_else(|| self.loaded.get(id)) {
                ops.push(WriteOp::UpdateHeader {
                    header: h.clone(),
                    was_finished: self.reopened.contains(id),
                });
            }
        }
        ops.extend(self.content);
        if !self.outbox.is_empty() {
            ops.push(WriteOp::InsertOutbox(self.outbox));
        }
        if !self.events.is_empty() {
            ops.push(WriteOp::InsertEvents(self.events));
        }
        if self.save_usage {
            ops.push(WriteOp::SaveUsage(state.usage_snapshot()));
        }
        // The mark the engine names the org by while this actor runs (its
        // route's actor and published version), as of this batch.
        let marked = MarkedCounts {
            mark: ChangeMark::At {
                actor: state.myself.get_id().pid(),
                version: state.open.version(),
            },
            counts: state.open.counts(),
        };
        WriteBatch {
            org: state.org,
            ops,
            fence: state.fence.clone(),
            marked: Some(marked),
            wakes_deliveries,
        }
    }
}
