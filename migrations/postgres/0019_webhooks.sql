-- Outbound webhooks (CONTRACT §7). `webhooks` holds an org's endpoints,
-- written only by the org's actor (and a master-key rotation, which
-- re-seals `secret` and `previous_secret` conditionally); each secret is
-- sealed by the master key it names (`*_key_id`), like a data key.
CREATE TABLE webhooks (
    org_id                 TEXT NOT NULL,
    webhook_id             TEXT NOT NULL,
    url                    TEXT NOT NULL,
    events                 TEXT NOT NULL,
    description            TEXT,
    secret                 BYTEA NOT NULL,
    secret_key_id          TEXT NOT NULL,
    previous_secret        BYTEA,
    previous_secret_key_id TEXT,
    previous_until         BIGINT,
    active                 BIGINT NOT NULL,
    created_at             BIGINT NOT NULL,
    PRIMARY KEY (org_id, webhook_id)
);

-- The transactional outbox: one row per event and endpoint, inserted in the
-- commit of the change that made the event, deleted once delivered (or
-- when its endpoint is disabled or deleted). `outbox_id` orders an
-- endpoint's events of one task (`task_key`); `next_attempt_at` is when it
-- is due, moved ahead while a delivery worker holds it.
CREATE TABLE webhook_outbox (
    outbox_id       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id          TEXT NOT NULL,
    webhook_id      TEXT NOT NULL,
    event_id        TEXT NOT NULL,
    type            TEXT NOT NULL,
    task_key        TEXT NOT NULL,
    body            TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    attempts        BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL
);
CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_at);
CREATE INDEX webhook_outbox_order ON webhook_outbox (org_id, webhook_id, task_key, outbox_id);

-- Each delivery attempt, for `GET /webhooks/{id}/deliveries`; pruned by age.
CREATE TABLE webhook_deliveries (
    delivery_id     TEXT PRIMARY KEY,
    org_id          TEXT NOT NULL,
    webhook_id      TEXT NOT NULL,
    event_id        TEXT NOT NULL,
    type            TEXT NOT NULL,
    attempt         BIGINT NOT NULL,
    status_code     BIGINT,
    error           TEXT,
    response        TEXT,
    at              BIGINT NOT NULL,
    next_attempt_at BIGINT
);
CREATE INDEX webhook_deliveries_by_endpoint ON webhook_deliveries (org_id, webhook_id, at);
CREATE INDEX webhook_deliveries_by_age ON webhook_deliveries (at);
