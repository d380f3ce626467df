-- Completions and events reach their per-task indexes in bulk.
--
-- Each org's finished tasks and each task's events sit in index pages of
-- their own, and a commit rewrites every page it touches: with many orgs
-- working at once, every completion and every event wrote a page of its
-- org's. Now a commit adds them to indexes keyed by time, whose pages all
-- orgs share, and the writer moves what accumulated into the per-org indexes
-- every few milliseconds, in the same transaction as a commit (it
-- "settles" them), so that each per-org page is written once for many rows.
--
-- * A task that finishes keeps `finished_rank` NULL: it stays in
--   `tasks_open` and enters `tasks_unsettled` (keyed by `updated_at`). A
--   settle sets `finished_rank`, which moves it to `tasks_finished_order`.
--   Lists read finished tasks from both.
-- * An event is inserted with `indexed = 0`, into `task_events_unindexed`
--   (keyed by `event_id`). A settle sets `indexed = 1`, which moves it to
--   `task_events_task`. A task's events are read from both.
ALTER TABLE task_events ADD COLUMN indexed INTEGER NOT NULL DEFAULT 1;
DROP INDEX task_events_task;
CREATE INDEX task_events_task ON task_events (task_id, event_id) WHERE indexed = 1;
CREATE INDEX task_events_unindexed ON task_events (event_id) WHERE indexed = 0;
CREATE INDEX tasks_unsettled ON tasks (updated_at) WHERE finished_rank IS NULL AND status_rank >= 5;
