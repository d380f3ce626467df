-- The table of the raw SKIP LOCKED loop (docs/perf.md): 300,000 pending rows.
DROP TABLE IF EXISTS q;
CREATE TABLE q (id bigserial PRIMARY KEY, status text NOT NULL, title text NOT NULL, output text, lease_expires_at timestamptz);
INSERT INTO q (status, title) SELECT 'pending', 'task ' || g FROM generate_series(1, 300000) g;
CREATE INDEX q_pending ON q (id) WHERE status = 'pending';
VACUUM ANALYZE q;
