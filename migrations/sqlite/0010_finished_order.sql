-- Claims and completions no longer move index entries.
--
-- The list order index held every task under its status rank, so each claim
-- moved the task's entry from the pending region of its org to the
-- in-progress one and each completion moved it again: four index writes per
-- cycle in up to three places per org, plus the lease index's two. The org
-- actor already holds every open task; it now serves the open part of a list
-- in order, and the store indexes only what the actor does not hold:
--
-- * `finished_rank` is the status rank of a finished task and NULL while the
--   task is open. It is written only when a task finishes or is reopened, so
--   an UPDATE of an open task's header never names it.
-- * `tasks_finished_order` orders finished tasks for lists. Its WHERE is
--   false before and after a claim, so SQLite skips it.
-- * `tasks_open` finds an org's open tasks when its actor starts. Neither of
--   its columns is in a claim's UPDATE, so SQLite does not open it then.
--
-- The lease index goes: the orgs that hold leases are found through
-- `tasks_open` when the server starts. The event index loses its org prefix:
-- task ids are time-ordered, so the events of tasks worked together land
-- together, rather than in one region per org.
ALTER TABLE tasks ADD COLUMN finished_rank INTEGER;
UPDATE tasks SET finished_rank = status_rank WHERE status_rank >= 5;
DROP INDEX tasks_list_order;
DROP INDEX tasks_leased;
CREATE INDEX tasks_open ON tasks (org_id) WHERE finished_rank IS NULL;
CREATE INDEX tasks_finished_order ON tasks (org_id, finished_rank, priority, created_at, task_id)
    WHERE finished_rank IS NOT NULL;
DROP INDEX task_events_task;
CREATE INDEX task_events_task ON task_events (task_id, event_id);
