//! Task states and the transition table of CONTRACT.md §3.

use std::fmt;

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Pending,
    Paused,
    InProgress,
    Feedback,
    Blocked,
    Canceled,
    Completed,
    Failed,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 8] = [
        TaskStatus::Pending,
        TaskStatus::Paused,
        TaskStatus::InProgress,
        TaskStatus::Feedback,
        TaskStatus::Blocked,
        TaskStatus::Canceled,
        TaskStatus::Completed,
        TaskStatus::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::Paused => "paused",
            TaskStatus::InProgress => "in_progress",
            TaskStatus::Feedback => "feedback",
            TaskStatus::Blocked => "blocked",
            TaskStatus::Canceled => "canceled",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// The lowest rank of a finished status: every rank from here on is
    /// finished, every rank below it open (migration 0010 relies on it).
    pub const FIRST_FINISHED_RANK: i64 = 5;

    /// Position in list order: open work first, then finished work.
    pub fn rank(self) -> i64 {
        match self {
            TaskStatus::Pending => 0,
            TaskStatus::Paused => 1,
            TaskStatus::InProgress => 2,
            TaskStatus::Feedback => 3,
            TaskStatus::Blocked => 4,
            TaskStatus::Canceled => 5,
            TaskStatus::Completed => 6,
            TaskStatus::Failed => 7,
        }
    }

    /// Finished work: the org actor keeps no in-memory state for these.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Canceled | TaskStatus::Completed | TaskStatus::Failed
        )
    }

    /// Moving here needs a note on the update item.
    pub fn needs_note(self) -> bool {
        self.is_terminal()
    }

    /// Leaving a holding state by update needs an assignee.
    pub fn is_holding(self) -> bool {
        matches!(self, TaskStatus::Pending | TaskStatus::Blocked)
    }

    /// The update transition table. `has_live_blocker` only matters when
    /// leaving `blocked`: any target but failed/canceled needs none.
    pub fn can_move_to(self, to: TaskStatus, has_live_blocker: bool) -> bool {
        use TaskStatus::*;
        match (self, to) {
            (_, Blocked) => false,
            (a, b) if a == b => false,
            (Pending | Paused | InProgress | Feedback, _) => true,
            (Blocked, Failed | Canceled) => true,
            (Blocked, _) => !has_live_blocker,
            (Failed | Canceled, Pending) => true,
            (Failed | Canceled | Completed, _) => false,
        }
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::TaskStatus::{self, *};

    fn allowed(from: TaskStatus) -> Vec<TaskStatus> {
        TaskStatus::ALL
            .into_iter()
            .filter(|to| from.can_move_to(*to, false))
            .collect()
    }

    #[test]
    fn finished_work_ranks_after_open_work() {
        for s in TaskStatus::ALL {
            assert_eq!(
                s.is_terminal(),
                s.rank() >= TaskStatus::FIRST_FINISHED_RANK,
                "{s:?}"
            );
        }
    }

    #[test]
    fn transition_table_matches_contract() {
        assert_eq!(
            allowed(Pending),
            vec![Paused, InProgress, Feedback, Canceled, Completed, Failed]
        );
        assert_eq!(
            allowed(Paused),
            vec![Pending, InProgress, Feedback, Canceled, Completed, Failed]
        );
        assert_eq!(
            allowed(InProgress),
            vec![Pending, Paused, Feedback, Canceled, Completed, Failed]
        );
        assert_eq!(
            allowed(Feedback),
            vec![Pending, Paused, InProgress, Canceled, Completed, Failed]
        );
        assert_eq!(allowed(Failed), vec![Pending]);
        assert_eq!(allowed(Canceled), vec![Pending]);
        assert!(allowed(Completed).is_empty());
    }

    #[test]
    fn blocked_leaves_only_to_terminal_while_a_blocker_lives() {
        let live: Vec<_> = TaskStatus::ALL
            .into_iter()
            .filter(|to| Blocked.can_move_to(*to, true))
            .collect();
        assert_eq!(live, vec![Canceled, Failed]);
        assert_eq!(
            allowed(Blocked),
            vec![Pending, Paused, InProgress, Feedback, Canceled, Completed, Failed]
        );
    }

    #[test]
    fn names_round_trip_and_rank_orders_open_work_first() {
        for s in TaskStatus::ALL {
            assert_eq!(TaskStatus::parse(s.as_str()), Some(s));
        }
        let mut sorted = TaskStatus::ALL;
        sorted.sort_by_key(|s| s.rank());
        assert_eq!(sorted, TaskStatus::ALL);
        assert!(TaskStatus::parse("done").is_none());
    }
}
