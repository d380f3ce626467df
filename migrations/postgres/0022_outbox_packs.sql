-- One outbox row per commit and endpoint, not per change.
--
-- Since `0020_outbox_rows_per_change` a change seen by an endpoint was a
-- row of `webhook_outbox` with two index entries, inserted in the commit
-- of every claim and completion and deleted once delivered: about a tenth
-- of the claims' throughput with a receiver that takes nothing. Now a
-- commit writes each endpoint's changes as one pack, the entries (a JSON
-- array, in commit order) of up to a few hundred changes, and the
-- delivery worker deletes it once every entry is delivered.
--
-- An endpoint's packs go in order, one at a time (the first by `pack_id`;
-- `start` entries of it are already done). An entry that fails, or whose
-- task already has an event waiting in `webhook_outbox`, becomes a row of
-- `webhook_outbox` there, with its own schedule, behind its task's
-- earlier events. `held_until`: a PostgreSQL worker's hold.
CREATE TABLE webhook_outbox_packs (
    pack_id    BIGSERIAL PRIMARY KEY,
    org_id     TEXT NOT NULL,
    webhook_id TEXT NOT NULL,
    entries    TEXT NOT NULL,
    start      BIGINT NOT NULL,
    held_until BIGINT NOT NULL
);
CREATE INDEX webhook_outbox_packs_order ON webhook_outbox_packs (webhook_id, pack_id);
