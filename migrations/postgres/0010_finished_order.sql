-- Claims and completions no longer move index entries.
--
-- The list order index held every task under its status rank, so each claim
-- and completion rewrote its entry, and, with the lease index, kept every
-- header update from being a heap-only (HOT) update. The org actor already
-- holds every open task; it now serves the open part of a list in order, and
-- the store indexes only what the actor does not hold:
--
-- * `finished_rank` is the status rank of a finished task and NULL while the
--   task is open.
-- * `tasks_finished_order` orders finished tasks for lists; `tasks_open`
--   finds an org's open tasks when its actor starts.
--
-- No index now holds a column a claim changes, so a claim can be a HOT
-- update; the fill factor leaves room on each page for the new versions.
-- The lease index goes: the orgs that hold leases are found through
-- `tasks_open` when the server starts. The event index loses its org prefix:
-- task ids are time-ordered, so the events of tasks worked together land
-- together.
ALTER TABLE tasks ADD COLUMN finished_rank BIGINT;
UPDATE tasks SET finished_rank = status_rank WHERE status_rank >= 5;
DROP INDEX tasks_list_order;
DROP INDEX tasks_leased;
CREATE INDEX tasks_open ON tasks (org_id) WHERE finished_rank IS NULL;
CREATE INDEX tasks_finished_order ON tasks (org_id, finished_rank, priority, created_at, task_id)
    WHERE finished_rank IS NOT NULL;
DROP INDEX task_events_task;
CREATE INDEX task_events_task ON task_events (task_id, event_id);
ALTER TABLE tasks SET (fillfactor = 80);
