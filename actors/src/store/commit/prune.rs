//! The statements of `WriteOp::PruneTasks`, the same text on both
//! backends: `$1` the org, `$2` the cutoff, `$3…` the task ids. Each
//! statement checks again that a task is finished and last changed before
//! the cutoff, so a task changed since the sweep read it stays.

use crate::domain::TaskStatus;

/// The statements, in order: a task's delivery log and history (found by
/// its event chain) go before the task row that starts the chain, then its
/// vector and outbox rows, then the row.
pub(super) fn statements(count: usize) -> Vec<String> {
    let ids: Vec<String> = (0..count).map(|i| format!("${}", i + 3)).collect();
    let ids = ids.join(", ");
    let doomed = |t: &str| {
        format!(
            "{t}org_id = $1 AND {t}task_id IN ({ids}) AND {t}status_rank >= {} \
             AND {t}updated_at < $2",
            TaskStatus::FIRST_FINISHED_RANK
        )
    };
    let chain = format!(
        "WITH RECURSIVE chain (event_id, prev_event_id) AS (\
         SELECT e.event_id, e.prev_event_id FROM tasks t \
         JOIN task_events e ON e.event_id = t.last_event_id WHERE {} \
         UNION ALL \
         SELECT e.event_id, e.prev_event_id FROM chain c \
         JOIN task_events e ON e.event_id = c.prev_event_id) ",
        doomed("t.")
    );
    let tasks = format!("SELECT task_id FROM tasks WHERE {}", doomed(""));
    vec![
        format!(
            "{chain}DELETE FROM webhook_deliveries WHERE org_id = $1 \
             AND event_id IN (SELECT 'evt_' || CAST(event_id AS TEXT) FROM chain)"
        ),
        format!("{chain}DELETE FROM task_events WHERE event_id IN (SELECT event_id FROM chain)"),
        format!("DELETE FROM task_vectors WHERE org_id = $1 AND task_id IN ({tasks})"),
        format!("DELETE FROM webhook_outbox WHERE org_id = $1 AND task_key IN ({tasks})"),
        format!("DELETE FROM tasks WHERE {}", doomed("")),
    ]
}
