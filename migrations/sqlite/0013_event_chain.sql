-- A task's events are found by a chain from the task row, not an index.
--
-- Since `0012_event_watermark` a settle copied the key of every new event
-- into `task_event_order`, ordered by task: one B-tree insert per event in
-- the region of its task. Many orgs working at once put those inserts all
-- over the tree, each one splitting or rewriting a page of its own; that
-- copy was about a tenth of the server's time under `taskq bench --orgs 16`.
--
-- Now each event row names the task's event before it (`prev_event_id`)
-- and the task row its latest event (`last_event_id`). A commit appends
-- the event row, whose `prev_event_id` it reads from the task row, and
-- writes `last_event_id` in the same UPDATE that already rewrites the task
-- header, so an event costs no B-tree write besides its own row. Readers
-- walk the chain back from the task row, one rowid lookup per event.
ALTER TABLE task_events ADD COLUMN prev_event_id INTEGER;
ALTER TABLE tasks ADD COLUMN last_event_id INTEGER;

INSERT INTO task_event_order (task_id, event_id)
    SELECT task_id, event_id FROM task_events
    WHERE event_id > (SELECT event_id FROM events_settled);
UPDATE task_events SET prev_event_id = (
    SELECT MAX(o.event_id) FROM task_event_order o
    WHERE o.task_id = task_events.task_id AND o.event_id < task_events.event_id
);
UPDATE tasks SET last_event_id = (
    SELECT MAX(o.event_id) FROM task_event_order o WHERE o.task_id = tasks.task_id
);

DROP TABLE task_event_order;
DROP TABLE events_settled;
