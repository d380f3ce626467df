//! The statements of an org's deletion, the same text on both backends,
//! `$1` the org: the shredding (its data key and everything that acts for
//! it: keys, schedules, webhooks, board sessions), then the removal of its
//! rows a batch at a time, then its row itself.

/// Tables whose rows of one org can be many: removed `BATCH` at a time,
/// each by a column that tells its rows apart within the org.
pub(crate) const BATCHED: [(&str, &str); 5] = [
    ("task_events", "event_id"),
    ("task_vectors", "task_id"),
    ("webhook_deliveries", "delivery_id"),
    ("webhook_outbox", "outbox_id"),
    ("tasks", "task_id"),
];

/// Tables with few rows an org: removed whole in one step.
const WHOLE: [&str; 13] = [
    "api_keys",
    "org_deks",
    "schedules",
    "webhooks",
    "webhook_cursors",
    "board_sessions",
    "members",
    "tags",
    "teams",
    "team_members",
    "org_usage",
    "strikes",
    "reports",
];

/// What acts for the org, and its data key, go at once.
const SHRED: [&str; 7] = [
    "api_keys",
    "org_deks",
    "schedules",
    "webhooks",
    "webhook_cursors",
    "webhook_outbox",
    "board_sessions",
];

/// Rows of a batched table removed in one step.
const BATCH: usize = 1000;

/// Marks the org deleted (`$2` the time) and destroys its data key: the
/// wrap goes from the org's row (managed); `shred` removes the client's
/// envelope key row (BYOK). What is stored of the org can no longer be
/// opened.
pub(super) const MARK_DELETED: &str =
    "UPDATE orgs SET deleted_at = $2, wrapped_dek = NULL, master_key_id = NULL WHERE org_id = $1";

/// What acts for the org goes with its data key.
pub(super) fn shred() -> Vec<String> {
    SHRED
        .iter()
        .map(|t| format!("DELETE FROM {t} WHERE org_id = $1"))
        .collect()
}

/// One step of the removal of a deleted org's rows.
pub(super) fn step() -> Vec<String> {
    let mut statements: Vec<String> = BATCHED
        .iter()
        .map(|(t, k)| {
            format!(
                "DELETE FROM {t} WHERE org_id = $1 AND {k} IN \
                 (SELECT {k} FROM {t} WHERE org_id = $1 LIMIT {BATCH})"
            )
        })
        .collect();
    statements.extend(
        WHOLE
            .iter()
            .map(|t| format!("DELETE FROM {t} WHERE org_id = $1")),
    );
    statements
}

/// The org's row, once nothing else of it is left.
pub(super) fn drop_row() -> Vec<String> {
    vec!["DELETE FROM orgs WHERE org_id = $1 AND deleted_at IS NOT NULL".to_owned()]
}
