-- On SQLite, events are now settled by a watermark and read from a table
-- of their own (see the SQLite migration of the same name). PostgreSQL
-- indexes every event at once, as before; the `indexed` flag, which only
-- let both backends share one read, and its always empty index go.
DROP INDEX task_events_unindexed;
ALTER TABLE task_events DROP COLUMN indexed;
