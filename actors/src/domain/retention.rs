//! Which finished tasks an org's retention removes. A task is eligible
//! when it is finished and its last change is older than the org keeps
//! finished tasks; an eligible task stays while a task that stays names it
//! as its parent or a blocker, so no kept task points at one that is gone.

use std::collections::{HashMap, HashSet};

use super::TaskId;

const DAY_MS: i64 = 86_400_000;

/// The instant before which a finished task's last change makes it
/// eligible, for an org keeping finished tasks `days` days.
pub fn cutoff(now_ms: i64, days: i64) -> i64 {
    now_ms.saturating_sub(days.saturating_mul(DAY_MS))
}

/// A task that names others, as the sweep reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referrer {
    pub task_id: TaskId,
    /// Whether the referrer itself is eligible.
    pub eligible: bool,
    /// Its parent and its blockers.
    pub names: Vec<TaskId>,
}

/// The tasks that stay whatever their age: those named, directly or
/// through other kept tasks, by a task that is not eligible.
pub fn pinned(referrers: &[Referrer]) -> HashSet<TaskId> {
    let by_id: HashMap<TaskId, &Referrer> = referrers.iter().map(|r| (r.task_id, r)).collect();
    let mut pinned = HashSet::new();
    let mut stack: Vec<TaskId> = referrers
        .iter()
        .filter(|r| !r.eligible)
        .flat_map(|r| r.names.iter().copied())
        .collect();
    while let Some(id) = stack.pop() {
        if pinned.insert(id) {
            if let Some(r) = by_id.get(&id) {
                stack.extend(r.names.iter().copied());
            }
        }
    }
    pinned
}

/// What a sweep in progress pins beyond what it read: the tasks named by
/// tasks written since it read the org's referrers, with what those name
/// in turn, so a page read before a task named its blocker or parent does
/// not remove it.
#[derive(Debug, Default)]
pub struct SweepPins {
    /// Each referrer the sweep read, and what it names.
    names: HashMap<TaskId, Vec<TaskId>>,
    pinned: HashSet<TaskId>,
}

impl SweepPins {
    /// Learns the referrers the sweep read, and pins what the tasks pinned
    /// so far name through them.
    pub fn learn(&mut self, referrers: &[Referrer]) {
        self.names = referrers
            .iter()
            .map(|r| (r.task_id, r.names.clone()))
            .collect();
        for id in std::mem::take(&mut self.pinned) {
            self.pin(id);
        }
    }

    /// Pins `id` and, through the referrers read, what it names.
    pub fn pin(&mut self, id: TaskId) {
        let mut stack = vec![id];
        while let Some(id) = stack.pop() {
            if self.pinned.insert(id) {
                if let Some(names) = self.names.get(&id) {
                    stack.extend(names.iter().copied());
                }
            }
        }
    }

    pub fn is_pinned(&self, id: TaskId) -> bool {
        self.pinned.contains(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_named_during_a_sweep_is_pinned_with_what_it_names() {
        let (x, y, z, other) = (
            TaskId::new_v7(),
            TaskId::new_v7(),
            TaskId::new_v7(),
            TaskId::new_v7(),
        );
        // x names y, y names z: all three eligible when read.
        let read = [
            Referrer {
                task_id: x,
                eligible: true,
                names: vec![y],
            },
            Referrer {
                task_id: y,
                eligible: true,
                names: vec![z],
            },
        ];
        let mut pins = SweepPins::default();
        pins.learn(&read);
        assert!(!pins.is_pinned(x));
        pins.pin(x);
        assert!(pins.is_pinned(x) && pins.is_pinned(y) && pins.is_pinned(z));
        assert!(!pins.is_pinned(other));

        // Named before the sweep's read arrived: pinned through it then.
        let mut early = SweepPins::default();
        early.pin(y);
        assert!(!early.is_pinned(z));
        early.learn(&read);
        assert!(early.is_pinned(y) && early.is_pinned(z) && !early.is_pinned(x));
    }

    fn id() -> TaskId {
        TaskId::new_v7()
    }

    #[test]
    fn the_cutoff_is_the_kept_days_before_now() {
        assert_eq!(cutoff(10 * DAY_MS, 3), 7 * DAY_MS);
        assert_eq!(cutoff(0, 3650), -3650 * DAY_MS);
    }

    #[test]
    fn a_kept_task_pins_its_parent_and_blockers_and_theirs() {
        let (root, parent, blocker, child, old_child, lone) = (id(), id(), id(), id(), id(), id());
        let referrers = vec![
            // A recent (kept) task under `parent`, blocked by `blocker`.
            Referrer {
                task_id: child,
                eligible: false,
                names: vec![parent, blocker],
            },
            // `parent` is old itself, but kept, so its own parent stays.
            Referrer {
                task_id: parent,
                eligible: true,
                names: vec![root],
            },
            // An old task whose parent is old too: both may go.
            Referrer {
                task_id: old_child,
                eligible: true,
                names: vec![lone],
            },
        ];
        let pinned = pinned(&referrers);
        assert_eq!(pinned, HashSet::from([parent, blocker, root]));
        assert!(!pinned.contains(&old_child) && !pinned.contains(&lone));
    }

    #[test]
    fn a_cycle_of_references_ends() {
        let (a, b) = (id(), id());
        let referrers = vec![
            Referrer {
                task_id: a,
                eligible: false,
                names: vec![b],
            },
            Referrer {
                task_id: b,
                eligible: true,
                names: vec![a],
            },
        ];
        assert_eq!(pinned(&referrers), HashSet::from([a, b]));
    }
}
