-- Webhook deliveries read the event log itself, not a copy of it, as on
-- SQLite's own `0023_webhook_cursors` (which says why).
ALTER TABLE task_events ADD COLUMN lease_expired BIGINT;
CREATE INDEX task_events_org ON task_events (org_id, event_id);

-- `held_until`: a worker's hold, in milliseconds on the database's clock.
CREATE TABLE webhook_cursors (
    webhook_id TEXT PRIMARY KEY,
    org_id     TEXT NOT NULL,
    event_id   BIGINT NOT NULL,
    held_until BIGINT NOT NULL
);
INSERT INTO webhook_cursors (webhook_id, org_id, event_id, held_until)
SELECT w.webhook_id, w.org_id,
    COALESCE((SELECT MAX(e.event_id) FROM task_events e WHERE e.org_id = w.org_id), 0), 0
FROM webhooks w WHERE w.active <> 0;

-- What the packs still held becomes rows, behind the rows already there,
-- in the packs' order (the identity numbers them as the rows come).
INSERT INTO webhook_outbox (org_id, webhook_id, event_id, types, sent, task_key,
    from_status, to_status, agent_id, created_at, attempts, next_attempt_at)
SELECT q.* FROM (
    SELECT p.org_id, p.webhook_id, j.value ->> 0, j.value ->> 1, 0::BIGINT, j.value ->> 2,
        j.value ->> 3, j.value ->> 4, j.value ->> 5, (j.value ->> 6)::BIGINT, 0::BIGINT,
        0::BIGINT
    FROM webhook_outbox_packs p,
        jsonb_array_elements(p.entries::jsonb) WITH ORDINALITY AS j(value, n)
    WHERE j.n > p.start
    ORDER BY p.pack_id, j.n
) q;
DROP TABLE webhook_outbox_packs;

ALTER TABLE webhook_outbox ADD COLUMN held_until BIGINT NOT NULL DEFAULT 0;
