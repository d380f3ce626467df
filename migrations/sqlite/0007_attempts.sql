-- The poison guard: leases that ran out since the task was created or last
-- retried, and how many of them fail it.
ALTER TABLE tasks ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN max_attempts INTEGER NOT NULL DEFAULT 5;
