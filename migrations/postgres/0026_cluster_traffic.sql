-- What each node's heartbeat says of the requests for an org it answered
-- since it started: how many, how many it forwarded to the org's owner,
-- and how many another node forwarded to it. Kept in its row so that
-- `GET /admin/cluster` gives the same figures whichever node is asked.
ALTER TABLE cluster_nodes
    ADD COLUMN requests           BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN requests_forwarded BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN requests_received  BIGINT NOT NULL DEFAULT 0;
