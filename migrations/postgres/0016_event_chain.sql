-- A task's events are found by a chain from the task row, not an index,
-- as on SQLite since its own `0013_event_chain`.
--
-- `task_events_task (task_id, event_id)` took an entry for every event in
-- the region of its task (two for each claim and completion) in the
-- largest index of the database, away from its right edge, each one
-- finding its leaf by text comparisons and dirtying a page of its own.
-- With the index simply dropped, PostgreSQL spent 15 to 22% less CPU per
-- cycle under `taskq bench` (docs/perf.md, twentieth step).
--
-- Now each event row names the task's event before it (`prev_event_id`)
-- and the task row its latest event (`last_event_id`). The commit
-- statement writes `last_event_id` in the row it already inserts or
-- updates for the task. Readers walk the chain back from the task row,
-- one primary-key lookup per event.
ALTER TABLE task_events ADD COLUMN prev_event_id BIGINT;
ALTER TABLE tasks ADD COLUMN last_event_id BIGINT;

UPDATE task_events e SET prev_event_id = p.prev_event_id
FROM (
    SELECT event_id,
           lag(event_id) OVER (PARTITION BY org_id, task_id ORDER BY event_id) AS prev_event_id
    FROM task_events
) p
WHERE p.event_id = e.event_id AND p.prev_event_id IS NOT NULL;

UPDATE tasks t SET last_event_id = l.last_event_id
FROM (
    SELECT org_id, task_id, MAX(event_id) AS last_event_id
    FROM task_events
    GROUP BY org_id, task_id
) l
WHERE t.org_id = l.org_id AND t.task_id = l.task_id;

DROP INDEX task_events_task;

-- The writers give events their ids, from the largest id stored, so
-- that a commit can bind each event's id and its predecessor's.
ALTER TABLE task_events ALTER COLUMN event_id DROP IDENTITY;
