//! Task changes inside the org actor: create, update and the dependency
//! cascades (claims and lease expiry are in `claims.rs`). Each message gathers its changes in one
//! `Work`, applies them to memory and submits them to the writer as one
//! batch.

use std::collections::{HashMap, HashSet};

use super::work::Work;
use super::{OrgActor, OrgState};
use crate::api::{
    due_at, merge_metadata, BlockerRef, ContentPolicy, CreateTasks, CreatedItem, ItemError,
    ItemPath, Object, TaskUpdate, Text, Timestamp, UpdateResult, UpdateTasks,
};
use crate::domain::account::{Caller, Encryption};
use crate::domain::lease;
use crate::domain::retry::retry_note;
use crate::domain::{
    ContentField, Scheduled, StoredEvent, StoredTask, TaskHeader, TaskId, TaskStatus,
};
use crate::error::{EngineError, ValidationError};

pub const SYSTEM_AGENT: &str = "system";

impl OrgState {
    pub(super) fn content_policy(&self) -> ContentPolicy {
        match self.entry.record.encryption {
            Encryption::Managed => ContentPolicy::Managed,
            Encryption::Byok => ContentPolicy::ClientEncrypted,
        }
    }
}

impl OrgActor {
    /// Reads the headers of tasks not in memory, after this org's queued
    /// writes have committed.
    pub(super) async fn load(
        &self,
        state: &OrgState,
        work: &mut Work,
        ids: impl IntoIterator<Item = TaskId>,
    ) -> Result<(), EngineError> {
        let mut missing: Vec<TaskId> = ids
            .into_iter()
            .filter(|id| !state.open.contains(*id) && !work.loaded.contains_key(id))
            .collect();
        missing.sort();
        missing.dedup();
        if missing.is_empty() {
            return Ok(());
        }
        self.deps.writers.barrier(state.org).await?;
        for h in self.deps.store.task_headers(state.org, &missing).await? {
            work.loaded.insert(h.task_id, h);
        }
        Ok(())
    }

    /// Creates the request's tasks; `origin` is the schedule tick that
    /// makes them, if one does.
    pub(super) async fn create_tasks(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        request: CreateTasks,
        origin: Option<Scheduled>,
    ) -> Result<Vec<CreatedItem>, EngineError> {
        // A tick's one item is its schedule's template: refusals name
        // `task.<field>`, as the schedule's own did.
        let at = |i| match origin {
            Some(_) => ItemPath::Template,
            None => ItemPath::InCall(i),
        };
        for (i, item) in request.tasks.iter().enumerate() {
            item.check_content(state.content_policy(), at(i))?;
        }
        let items = request.tasks;
        let now = self.now();
        let ids: Vec<TaskId> = items
            .iter()
            .map(|i| i.task_id.unwrap_or_else(TaskId::new_v7))
            .collect();
        let in_call: HashSet<TaskId> = ids.iter().copied().collect();

        for id in items.iter().filter_map(|i| i.task_id) {
            if state.open.contains(id) {
                return Err(EngineError::TaskIdExists(id));
            }
        }
        let mut lookups: Vec<TaskId> = items.iter().filter_map(|i| i.task_id).collect();
        for item in &items {
            lookups.extend(item.parent.filter(|p| !in_call.contains(p)));
            lookups.extend(item.blocked_by.iter().filter_map(|b| match b {
                BlockerRef::Task(id) if !in_call.contains(id) => Some(*id),
                _ => None,
            }));
        }
        self.load(state, work, lookups).await?;
        for id in items.iter().filter_map(|i| i.task_id) {
            if work.loaded.contains_key(&id) {
                return Err(EngineError::TaskIdExists(id));
            }
        }
        let refs: HashMap<&str, TaskId> = items
            .iter()
            .zip(&ids)
            .filter_map(|(i, id)| i.reference.as_deref().map(|r| (r, *id)))
            .collect();
        let mut resolved: Vec<Vec<TaskId>> = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            if let Some(tags) = &item.tags {
                state.check_vocabulary(&at(i).field("tags"), tags)?;
            }
            if let Some(p) = item.parent {
                if !in_call.contains(&p) && work.header(state, p).is_none() {
                    return Err(ValidationError::field(
                        at(i).field("parent_task_id"),
                        format!("unknown task {p}"),
                    )
                    .into());
                }
            }
            if let Some(a) = &item.assignee {
                if !state.is_assignable(a) {
                    return Err(ValidationError::field(
                        at(i).field("assignee"),
                        format!("'{a}' is not an active member of this org"),
                    )
                    .into());
                }
            }
            let mut blockers = Vec::with_capacity(item.blocked_by.len());
            for b in &item.blocked_by {
                let id = match b {
                    BlockerRef::Ref(name) => refs[name.as_str()],
                    BlockerRef::Task(id) => *id,
                };
                if !in_call.contains(&id) && work.header(state, id).is_none() {
                    return Err(ValidationError::field(
                        at(i).field("blocked_by"),
                        format!("unknown task {id}"),
                    )
                    .into());
                }
                if !blockers.contains(&id) {
                    blockers.push(id);
                }
            }
            resolved.push(blockers);
        }

        let count = items.len() as i64;
        state.check_task_quota(count, now)?;
        state.usage.tasks += count;
        work.save_usage = true;
        let mut results = Vec::with_capacity(items.len());
        for ((item, id), blocked_by) in items.into_iter().zip(ids).zip(resolved) {
            let live = blocked_by
                .iter()
                .any(|b| in_call.contains(b) || work.is_live(state, *b) == Some(true));
            let status = if live {
                TaskStatus::Blocked
            } else {
                TaskStatus::Pending
            };
            let header = TaskHeader {
                task_id: id,
                status,
                priority: item.priority,
                created_at: now,
                updated_at: now,
                assignee: item.assignee,
                tags: item.tags.unwrap_or_else(|| state.default_tags()),
                blocked_by,
                parent: item.parent,
                lease: None,
                attempts: 0,
                max_attempts: item.max_attempts,
                run_at: due_at(item.run_at, item.delay_seconds, now),
                retry: item.retry.and_then(|r| r.policy()),
                retries: 0,
                scheduled: origin,
            };
            let stored = StoredTask {
                title: work.seal(state, id, ContentField::Title, &item.title),
                description: item
                    .description
                    .as_ref()
                    .map(|d| work.seal(state, id, ContentField::Description, d)),
                metadata: item
                    .metadata
                    .as_ref()
                    .map(|m| work.seal(state, id, ContentField::Metadata, m)),
                output: None,
                header,
            };
            work.events.push(StoredEvent {
                task_id: id,
                from_status: None,
                to_status: status,
                agent_id: caller.key_name.clone(),
                at: now,
                note: None,
                lease_expired: false,
            });
            results.push(CreatedItem {
                reference: item.reference,
                task_id: id,
                status,
                created_at: Timestamp(now),
                similar_open_tasks: None,
                suggested_tags: None,
            });
            work.inserted.push(stored);
        }
        for t in &work.inserted {
            state.open.put(t.header.clone());
        }
        Ok(results)
    }

    /// Validation that needs the org's state; runs before anything applies.
    fn check_updates(
        &self,
        state: &OrgState,
        work: &Work,
        items: &[TaskUpdate],
    ) -> Result<(), ValidationError> {
        for (i, u) in items.iter().enumerate() {
            let id = u.task_id;
            if is_fenced_out(state, work, u) {
                continue; // it fails with `lease lost` and changes nothing
            }
            // The schema requires it of items without a lease; an unknown
            // task's item fails as `task not found`.
            let known = work.header(state, id).is_some();
            if known && u.status.is_some_and(|s| s.needs_note()) && u.note.is_none() {
                return Err(ValidationError::field(
                    format!("updates[{i}].note"),
                    "is required",
                ));
            }
            if let Some(tags) = &u.tags {
                state.check_vocabulary(&format!("updates[{i}].tags"), tags)?;
            }
            if let Some(Some(a)) = &u.assignee {
                if !state.is_assignable(a) {
                    return Err(ValidationError::field(
                        format!("updates[{i}].assignee"),
                        format!("'{a}' is not an active member of this org"),
                    ));
                }
            }
            for b in u.blocked_by.iter().flatten() {
                let field = format!("updates[{i}].blocked_by");
                if *b == id {
                    return Err(ValidationError::field(field, "a task cannot block itself"));
                }
                if work.header(state, *b).is_none() {
                    return Err(ValidationError::field(field, format!("unknown task {b}")));
                }
                if reaches(state, *b, id) {
                    return Err(ValidationError::field(
                        field,
                        format!("blocking on {b} would form a cycle"),
                    ));
                }
            }
        }
        Ok(())
    }

    pub(super) async fn update_tasks(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        mut request: UpdateTasks,
    ) -> Result<Vec<UpdateResult>, EngineError> {
        request.check_content(state.content_policy())?;
        let items = request.updates;
        let now = self.now();
        let lookups: Vec<TaskId> = items
            .iter()
            .flat_map(|u| std::iter::once(u.task_id).chain(u.blocked_by.iter().flatten().copied()))
            .collect();
        self.load(state, work, lookups).await?;
        self.check_updates(state, work, &items)?;
        let mut metadata = self.current_metadata(state, work, &items).await?;
        // From here on memory changes; a failure must restart the actor.
        let mut results = Vec::with_capacity(items.len());
        for u in &items {
            let (result, moved_to) = self.apply_update(state, work, caller, u, &mut metadata, now);
            if let Some(to) = moved_to.filter(|s| s.is_terminal()) {
                if let Err(e) = self.after_finish(state, work, u.task_id, to, now).await {
                    state.needs_reload = true;
                    return Err(e);
                }
            }
            results.push(result);
        }
        Ok(results)
    }

    /// Current metadata of the tasks whose items merge into it.
    async fn current_metadata(
        &self,
        state: &OrgState,
        work: &Work,
        items: &[TaskUpdate],
    ) -> Result<HashMap<TaskId, Object>, EngineError> {
        let mut ids: Vec<TaskId> = items
            .iter()
            .filter(|u| u.metadata.is_some())
            .map(|u| u.task_id)
            .filter(|id| work.header(state, *id).is_some())
            .collect();
        ids.sort();
        ids.dedup();
        let mut out = HashMap::new();
        if ids.is_empty() {
            return Ok(out);
        }
        self.deps.writers.barrier(state.org).await?;
        for t in self.deps.store.tasks(state.org, &ids).await? {
            let id = t.header.task_id;
            let map = match t.metadata {
                None => Object::new(),
                Some(sealed) => {
                    let bytes = state
                        .entry
                        .cipher
                        .open(id, ContentField::Metadata.name(), &sealed)
                        .map_err(|_| EngineError::CiphertextBinding {
                            task_id: id,
                            field: "metadata",
                        })?;
                    serde_json::from_slice(&bytes).unwrap_or_default()
                }
            };
            out.insert(id, map);
        }
        Ok(out)
    }

    fn apply_update(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        caller: &Caller,
        u: &TaskUpdate,
        metadata: &mut HashMap<TaskId, Object>,
        now: i64,
    ) -> (UpdateResult, Option<TaskStatus>) {
        let id = u.task_id;
        let failed = |error| (UpdateResult::Failed { task_id: id, error }, None);
        let Some(current) = work.header(state, id).cloned() else {
            return failed(ItemError::TaskNotFound);
        };
        if is_fenced_out(state, work, u) {
            return failed(ItemError::LeaseLost);
        }
        let mut h = current.clone();
        if let Some(p) = u.priority {
            h.priority = p;
        }
        if let Some(tags) = &u.tags {
            h.tags = tags.clone();
        }
        if let Some(a) = &u.assignee {
            h.assignee = a.clone();
        }
        if let Some(b) = &u.blocked_by {
            h.blocked_by = b.clone();
        }
        if let Some(due) = u.due_at(now) {
            h.run_at = due;
        }
        let has_live = h
            .blocked_by
            .iter()
            .any(|b| work.is_live(state, *b) == Some(true));
        let target = match u.status {
            Some(to) if to != current.status => {
                if !current.status.can_move_to(to, has_live) {
                    return failed(ItemError::InvalidTransition);
                }
                if current.status.is_holding() && h.assignee.is_none() {
                    return failed(ItemError::AssigneeRequired);
                }
                Some(to)
            }
            _ if u.blocked_by.is_some() => {
                let added_live = h.blocked_by.iter().any(|b| {
                    !current.blocked_by.contains(b) && work.is_live(state, *b) == Some(true)
                });
                match current.status {
                    TaskStatus::Pending | TaskStatus::InProgress if added_live => {
                        Some(TaskStatus::Blocked)
                    }
                    TaskStatus::Blocked if !has_live => Some(TaskStatus::Pending),
                    _ => None,
                }
            }
            _ => None,
        };

        if let Some(title) = &u.title {
            work.set_content(state, id, ContentField::Title, Some(title));
        }
        if let Some(description) = &u.description {
            work.set_content(state, id, ContentField::Description, description.as_ref());
        }
        if let Some(output) = &u.output {
            work.set_content(state, id, ContentField::Output, Some(output));
        }
        if let Some(patch) = &u.metadata {
            let merged = metadata.entry(id).or_default();
            merge_metadata(merged, patch);
            let merged = merged.clone();
            work.set_content(state, id, ContentField::Metadata, Some(&merged));
        }
        h.updated_at = now;
        if let Some(l) = h.lease {
            h.lease = Some(lease::renew(l, now));
        }
        let agent = u.agent_id.as_deref().unwrap_or(&caller.key_name);
        let target = match target {
            Some(TaskStatus::Failed) if h.retry.is_some_and(|r| r.has_left(h.retries)) => {
                Some(retry_instead(state, work, &mut h, u, agent, has_live, now))
            }
            Some(to) => {
                if current.status.is_terminal() {
                    // A retry starts with a fresh allowance of attempts.
                    h.attempts = 0;
                }
                work.transition(state, &mut h, to, agent, u.note.as_ref(), now);
                Some(to)
            }
            None => None,
        };
        let (status, updated_at) = (h.status, h.updated_at);
        work.put(state, h);
        let applied = UpdateResult::Applied {
            task_id: id,
            status,
            updated_at: Timestamp(updated_at),
        };
        (applied, target)
    }

    /// Unblocks, fails or cancels the dependents of a task that just
    /// finished, transitively, in the same batch.
    pub(super) async fn after_finish(
        &self,
        state: &mut OrgState,
        work: &mut Work,
        finished: TaskId,
        status: TaskStatus,
        now: i64,
    ) -> Result<(), EngineError> {
        let mut queue = vec![(finished, status)];
        while let Some((blocker, status)) = queue.pop() {
            let dependents = state.open.dependents(blocker).to_vec();
            if status == TaskStatus::Completed {
                let others: Vec<TaskId> = dependents
                    .iter()
                    .filter_map(|d| state.open.get(*d))
                    .flat_map(|h| h.blocked_by.iter().copied())
                    .collect();
                self.load(state, work, others).await?;
            }
            for d in dependents {
                let Some(mut h) = state.open.get(d).cloned() else {
                    continue;
                };
                if h.status != TaskStatus::Blocked {
                    continue;
                }
                let (to, note) = match status {
                    TaskStatus::Completed => {
                        if h.blocked_by
                            .iter()
                            .any(|b| work.is_live(state, *b) == Some(true))
                        {
                            continue;
                        }
                        (TaskStatus::Pending, format!("blocker {blocker} completed"))
                    }
                    TaskStatus::Failed => (TaskStatus::Failed, format!("blocker {blocker} failed")),
                    TaskStatus::Canceled => {
                        (TaskStatus::Canceled, format!("blocker {blocker} canceled"))
                    }
                    _ => continue,
                };
                work.transition(
                    state,
                    &mut h,
                    to,
                    SYSTEM_AGENT,
                    Some(&Text::Plain(note)),
                    now,
                );
                work.put(state, h);
                if to.is_terminal() {
                    queue.push((d, to));
                }
            }
        }
        Ok(())
    }
}

/// A failure with retries left (CONTRACT §9): the task goes back to
/// `pending` (or `blocked`, while a blocker is live) to wait out its
/// backoff, unassigned, with one state event whose note says which retry
/// and when; its dependents stay as they are. Answers the status it took.
fn retry_instead(
    state: &OrgState,
    work: &mut Work,
    h: &mut TaskHeader,
    u: &TaskUpdate,
    agent: &str,
    has_live: bool,
    now: i64,
) -> TaskStatus {
    let policy = h.retry.expect("a task that retries has a policy");
    let delay = policy.delay_seconds(h.retries, rand::random::<f64>());
    h.retries += 1;
    h.attempts = 0;
    h.assignee = None;
    h.run_at = Some(now + i64::try_from(delay).unwrap_or(i64::MAX / 2_000) * 1000);
    // A client-encrypted note cannot be read, so it is kept as sent.
    let note = match &u.note {
        Some(Text::Plain(note)) => Some(Text::Plain(retry_note(
            h.retries,
            policy.max_retries,
            delay,
            note,
        ))),
        other => other.clone(),
    };
    let to = if has_live {
        TaskStatus::Blocked
    } else {
        TaskStatus::Pending
    };
    work.transition(state, h, to, agent, note.as_ref(), now);
    to
}

/// Whether `to` is reachable from `from` through `blocked_by` links of open tasks.
fn reaches(state: &OrgState, from: TaskId, to: TaskId) -> bool {
    let mut seen = HashSet::new();
    let mut stack = vec![from];
    while let Some(id) = stack.pop() {
        if id == to {
            return true;
        }
        if !seen.insert(id) {
            continue;
        }
        if let Some(h) = state.open.get(id) {
            stack.extend(h.blocked_by.iter().copied());
        }
    }
    false
}

/// Whether the item carries a lease that is no longer the task's current
/// one (CONTRACT §3 fencing).
fn is_fenced_out(state: &OrgState, work: &Work, u: &TaskUpdate) -> bool {
    u.lease_id.is_some_and(|lease_id| {
        work.header(state, u.task_id)
            .is_some_and(|h| h.lease.map(|l| l.lease_id) != Some(lease_id))
    })
}
