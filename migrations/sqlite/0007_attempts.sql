-- The poison guard: leases that ran out since the task was created or last
-- retried, and how many of them fail it.
--
-- The table is rebuilt rather than altered: SQLite appends an added column
-- after the content blobs, and reading a header column stored behind them
-- walks every overflow page of the row through the page cache. Header reads
-- must stay as cheap as they were, so the new columns go before the blobs.
CREATE TABLE tasks_new (
    org_id           TEXT NOT NULL,
    task_id          TEXT NOT NULL,
    status           TEXT NOT NULL,
    status_rank      INTEGER NOT NULL,
    priority         INTEGER NOT NULL,
    assignee         TEXT,
    tags             TEXT NOT NULL,
    blocked_by       TEXT NOT NULL,
    parent_task_id   TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    lease_id         TEXT,
    lease_expires_at INTEGER,
    lease_seconds    INTEGER,
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL DEFAULT 5,
    title            BLOB NOT NULL,
    description      BLOB,
    metadata         BLOB,
    output           BLOB,
    PRIMARY KEY (org_id, task_id)
);
INSERT INTO tasks_new (org_id, task_id, status, status_rank, priority, assignee, tags,
    blocked_by, parent_task_id, created_at, updated_at, lease_id, lease_expires_at,
    lease_seconds, title, description, metadata, output)
SELECT org_id, task_id, status, status_rank, priority, assignee, tags,
    blocked_by, parent_task_id, created_at, updated_at, lease_id, lease_expires_at,
    lease_seconds, title, description, metadata, output
FROM tasks;
DROP TABLE tasks;
ALTER TABLE tasks_new RENAME TO tasks;
CREATE INDEX tasks_list_order ON tasks (org_id, status_rank, priority, created_at, task_id);
CREATE INDEX tasks_parent ON tasks (org_id, parent_task_id);
CREATE INDEX tasks_leased ON tasks (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
