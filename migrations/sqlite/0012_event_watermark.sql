-- A task's events reach their per-task order by a watermark, not a flag.
--
-- Since `0011_settled_indexes` an event was inserted with `indexed = 0`,
-- into `task_events_unindexed`, and a settle rewrote it with `indexed = 1`,
-- which took it out of that index and into `task_events_task`: besides the
-- row's own insert, four B-tree writes per event, two events per claim and
-- completion, on the commit path of every request. Event ids only grow
-- (AUTOINCREMENT), so "not yet settled" needs no mark on the row: it is
-- every event after the last one settled. A settle now copies the key of
-- each event after `events_settled.event_id` into `task_event_order` and
-- moves the watermark, in the same transaction: one B-tree write per event
-- besides its row, and the row itself is written once.
--
-- Readers take the settled events of a task from `task_event_order` and
-- the rest from the end of `task_events`, after the watermark, in one
-- statement (one snapshot).
CREATE TABLE task_event_order (
    task_id  TEXT NOT NULL,
    event_id INTEGER NOT NULL,
    PRIMARY KEY (task_id, event_id)
) WITHOUT ROWID;
INSERT INTO task_event_order (task_id, event_id) SELECT task_id, event_id FROM task_events;

CREATE TABLE events_settled (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    event_id INTEGER NOT NULL
);
INSERT INTO events_settled (id, event_id) SELECT 1, COALESCE(MAX(event_id), 0) FROM task_events;

DROP INDEX task_events_task;
DROP INDEX task_events_unindexed;
ALTER TABLE task_events DROP COLUMN indexed;
