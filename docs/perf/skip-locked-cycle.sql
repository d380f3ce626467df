-- The raw SKIP LOCKED loop of docs/perf.md: one claim+complete cycle per
-- pgbench transaction (two transactions in PostgreSQL).
BEGIN;
SELECT id AS claimed FROM q WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED \gset
UPDATE q SET status = 'in_progress', lease_expires_at = now() + interval '300 seconds' WHERE id = :claimed;
COMMIT;
UPDATE q SET status = 'completed', output = '{"ok":true}', lease_expires_at = NULL WHERE id = :claimed;
