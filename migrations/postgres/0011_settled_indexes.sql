-- Events carry `indexed`, as on SQLite, so that both backends read a task's
-- events with the same statement. On PostgreSQL a commit writes every row
-- settled (a finished task's `finished_rank` at once, every event with
-- `indexed = 1`): its pages are not rewritten whole per commit, and an index
-- whose predicate names `status_rank` would keep claims from being heap-only
-- updates. `task_events_unindexed` stays empty; it lets the read of unsettled
-- events, which finds none, find none at once.
ALTER TABLE task_events ADD COLUMN indexed INTEGER NOT NULL DEFAULT 1;
CREATE INDEX task_events_unindexed ON task_events (event_id) WHERE indexed = 0;
