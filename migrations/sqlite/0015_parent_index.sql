-- The parent index holds only tasks that have a parent.
--
-- Most tasks have none, and every one of them sat in the index under the
-- same key, its org and NULL: one more B-tree insert per created task,
-- for entries no query reads. Lists by parent name a parent, which
-- implies it is not NULL, so they still use the index. (PostgreSQL has
-- the same change for a larger reason: see its migration of this name.)
DROP INDEX tasks_parent;
CREATE INDEX tasks_parent ON tasks (org_id, parent_task_id) WHERE parent_task_id IS NOT NULL;
