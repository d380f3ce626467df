-- Time in the queue (CONTRACT §9): when a pending task may be claimed
-- (`run_at`), its retry policy and the retries made, and the schedule
-- tick that created it; and the schedules themselves.
--
-- A schedule is written only by its org's actor. `task` is the template
-- of the tasks it creates, sealed like a task's content (bound to the org
-- and the schedule); `last_run_at` is the latest tick fired, committed
-- with that tick's task, so a tick is never fired twice.
ALTER TABLE tasks ADD COLUMN run_at BIGINT;
ALTER TABLE tasks ADD COLUMN retry TEXT;
ALTER TABLE tasks ADD COLUMN retries BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN schedule_id TEXT;
ALTER TABLE tasks ADD COLUMN scheduled_for BIGINT;
-- The orgs with waiting tasks, whose actors start with the server; only
-- tasks with a `run_at` take an entry.
CREATE INDEX tasks_waiting ON tasks (org_id) WHERE run_at IS NOT NULL AND status = 'pending';

CREATE TABLE schedules (
    org_id      TEXT NOT NULL,
    schedule_id TEXT NOT NULL,
    name        TEXT NOT NULL,
    cron        TEXT NOT NULL,
    timezone    TEXT NOT NULL,
    task        BYTEA NOT NULL,
    active      BIGINT NOT NULL,
    next_run_at BIGINT,
    last_run_at BIGINT,
    last_error  TEXT,
    created_by  TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (org_id, schedule_id)
);
CREATE UNIQUE INDEX schedules_name ON schedules (org_id, name);
