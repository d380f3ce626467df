-- The parent index holds only tasks that have a parent.
--
-- Most tasks have none, and every one of them sat in the index under the
-- same key, its org and NULL. PostgreSQL writes a new entry in every index
-- of a row that an update cannot keep on its page (a completion changes
-- the indexed `finished_rank`, so it never can), and the entries of one
-- key pile up in one place: the leaf pages of an org's NULL run were
-- split, deduplicated and cleared of dead versions over and over
-- (`heap_index_delete_tuples` led PostgreSQL's profile under
-- `taskq bench`). Lists by parent name a parent, which implies it is not
-- NULL, so they still use the index.
DROP INDEX tasks_parent;
CREATE INDEX tasks_parent ON tasks (org_id, parent_task_id) WHERE parent_task_id IS NOT NULL;
