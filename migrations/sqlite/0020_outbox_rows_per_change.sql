-- One outbox row per change and endpoint, carrying every type of the
-- change the endpoint takes (`types`, space-separated, in delivery order;
-- `sent` of them already delivered), and the change's ids and statuses
-- rather than a finished body: the delivery worker writes the body, the
-- same bytes on every attempt. A claim seen by an endpoint subscribed to
-- `*` was two rows with two bodies; it is one short row. The type of the
-- `sent`-th entry has `attempts` failed attempts so far. The order index
-- leaves out `org_id`: a webhook id is unique on its own.
CREATE TABLE webhook_outbox_next (
    outbox_id       INTEGER PRIMARY KEY,
    org_id          TEXT NOT NULL,
    webhook_id      TEXT NOT NULL,
    event_id        TEXT NOT NULL,
    types           TEXT NOT NULL,
    sent            BIGINT NOT NULL,
    task_key        TEXT NOT NULL,
    from_status     TEXT,
    to_status       TEXT,
    agent_id        TEXT,
    created_at      BIGINT NOT NULL,
    attempts        BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL
);

-- Events already in the outbox keep their ids, order and schedule; their
-- stored bodies hold the fields (a test event's has none of them).
INSERT INTO webhook_outbox_next (outbox_id, org_id, webhook_id, event_id, types, sent,
    task_key, from_status, to_status, agent_id, created_at, attempts, next_attempt_at)
SELECT outbox_id, org_id, webhook_id, event_id, type, 0, task_key,
    json_extract(body, '$.data.from_status'),
    CASE WHEN type = 'webhook.test' THEN NULL ELSE json_extract(body, '$.data.to_status') END,
    json_extract(body, '$.data.agent_id'),
    created_at, attempts, next_attempt_at
FROM webhook_outbox;

DROP TABLE webhook_outbox;
ALTER TABLE webhook_outbox_next RENAME TO webhook_outbox;
CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_at);
CREATE INDEX webhook_outbox_order ON webhook_outbox (webhook_id, task_key, outbox_id);
