-- One outbox row per change and endpoint, carrying every type of the
-- change the endpoint takes (`types`, space-separated, in delivery order;
-- `sent` of them already delivered), and the change's ids and statuses
-- rather than a finished body: the delivery worker writes the body, the
-- same bytes on every attempt. A claim seen by an endpoint subscribed to
-- `*` was two rows with two bodies; it is one short row. The type of the
-- `sent`-th entry has `attempts` failed attempts so far. The order index
-- leaves out `org_id`: a webhook id is unique on its own.
ALTER TABLE webhook_outbox RENAME COLUMN type TO types;
ALTER TABLE webhook_outbox ADD COLUMN sent BIGINT NOT NULL DEFAULT 0;
ALTER TABLE webhook_outbox ADD COLUMN from_status TEXT;
ALTER TABLE webhook_outbox ADD COLUMN to_status TEXT;
ALTER TABLE webhook_outbox ADD COLUMN agent_id TEXT;

-- Events already in the outbox keep their ids, order and schedule; their
-- stored bodies hold the fields (a test event's has none of them).
UPDATE webhook_outbox SET
    from_status = body::json -> 'data' ->> 'from_status',
    to_status = CASE WHEN types = 'webhook.test' THEN NULL
        ELSE body::json -> 'data' ->> 'to_status' END,
    agent_id = body::json -> 'data' ->> 'agent_id';

ALTER TABLE webhook_outbox DROP COLUMN body;
ALTER TABLE webhook_outbox ALTER COLUMN sent DROP DEFAULT;
DROP INDEX webhook_outbox_order;
CREATE INDEX webhook_outbox_order ON webhook_outbox (webhook_id, task_key, outbox_id);
