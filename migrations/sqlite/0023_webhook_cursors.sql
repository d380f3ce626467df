-- Webhook deliveries read the event log itself, not a copy of it.
--
-- Since `0022_outbox_packs` every commit with events for an endpoint
-- wrote a pack of them beside its state events. Now the state events are
-- what is delivered: each endpoint has a cursor (`webhook_cursors`, the
-- last event of its org it has been through, moved only by the delivery
-- worker) and a turn reads its org's events after it, in id order, which
-- is the org's commit order. A commit writes nothing for webhooks at all.
-- `task_events_org` finds an org's events after an id (the delivery
-- worker, and replay of the event stream); `lease_expired` marks the
-- changes a lease's expiry made, which a reader of the log cannot tell
-- from the statuses alone.
ALTER TABLE task_events ADD COLUMN lease_expired INTEGER;
CREATE INDEX task_events_org ON task_events (org_id, event_id);

-- `held_until`: a PostgreSQL worker's hold on the database's clock (unused
-- on SQLite, whose one server keeps what it took in memory).
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
-- in the packs' order; each entry is `[event_id, types, task_key,
-- from_status, to_status, agent_id, created_at]`.
INSERT INTO webhook_outbox (org_id, webhook_id, event_id, types, sent, task_key,
    from_status, to_status, agent_id, created_at, attempts, next_attempt_at)
SELECT p.org_id, p.webhook_id, json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]'),
    0, json_extract(j.value, '$[2]'), json_extract(j.value, '$[3]'),
    json_extract(j.value, '$[4]'), json_extract(j.value, '$[5]'),
    json_extract(j.value, '$[6]'), 0, 0
FROM webhook_outbox_packs p, json_each(p.entries) j
WHERE j.key >= p.start
ORDER BY p.pack_id, j.key;
DROP TABLE webhook_outbox_packs;

-- A row's schedule (`next_attempt_at`, the engine's clock) and a worker's
-- hold on it (`held_until`, the database's clock) are apart.
ALTER TABLE webhook_outbox ADD COLUMN held_until BIGINT NOT NULL DEFAULT 0;
