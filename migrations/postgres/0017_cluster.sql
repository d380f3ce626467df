-- Several nodes on one database (CONTRACT.md §6): the nodes, which node
-- owns each org's actor, and event ids that no node counts on its own.
--
-- A node registers once at start and heartbeats every second on the
-- database's clock; it is live while its heartbeat is younger than the
-- lease TTL. An org's row names the node whose actor owns it and an epoch
-- that every takeover raises (a row is never deleted, so an epoch is never
-- given twice); its lease is its node's liveness, so one heartbeat renews
-- every org a node owns. A row with no node is an org its owner released;
-- `needs_owner` says its tasks hold leases, which some node must take it
-- for so that they expire. Every commit that writes an org's rows checks
-- its row, node and epoch, under FOR SHARE, in the same statement.
CREATE TABLE cluster_nodes (
    node_id       TEXT PRIMARY KEY,
    advertise_url TEXT NOT NULL,
    started_at    BIGINT NOT NULL,
    last_seen     TIMESTAMPTZ NOT NULL DEFAULT now(),
    leaving       BOOLEAN NOT NULL DEFAULT false,
    -- The fingerprints of the master keys it holds, its current one first.
    master_keys   TEXT NOT NULL DEFAULT ''
);

-- Settings every node follows: `master_key`, the fingerprint of the key
-- that makes new data-key wraps once a rotation began.
CREATE TABLE cluster_settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE org_owners (
    org_id      TEXT PRIMARY KEY,
    node_id     TEXT,
    epoch       BIGINT NOT NULL,
    needs_owner BOOLEAN NOT NULL DEFAULT false
);

-- Event ids come in blocks from one sequence: a writer takes a block
-- (one `nextval`) and numbers events from it, and takes a fresh one after
-- its node takes an org over, so an org's events keep rising across
-- owners.
CREATE SEQUENCE task_event_ids INCREMENT BY 1048576;
SELECT setval('task_event_ids', (SELECT COALESCE(MAX(event_id), 0) + 1 FROM task_events), false);

-- What a commit whose fence failed raises: the org is another node's now.
CREATE FUNCTION taskq_fenced() RETURNS BIGINT LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'an org of this commit is owned by another node' USING ERRCODE = 'TQ001';
END
$$;
