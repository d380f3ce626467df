-- Orgs, members, keys, tasks and their state events.
-- Integers are milliseconds since the Unix epoch or plain counts; ids are
-- canonical lowercase UUID strings; sealed content is a BYTEA (BLOB in SQLite).

CREATE TABLE orgs (
    org_id      TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    tier        TEXT NOT NULL,
    encryption  TEXT NOT NULL,
    seats       BIGINT NOT NULL,
    suspended   BIGINT NOT NULL DEFAULT 0,
    limits      TEXT NOT NULL DEFAULT '{}',
    wrapped_dek BYTEA,
    created_at  BIGINT NOT NULL
);

CREATE TABLE members (
    org_id       TEXT NOT NULL,
    email        TEXT NOT NULL,
    role         TEXT NOT NULL,
    seated       BIGINT NOT NULL,
    profile_tags TEXT NOT NULL DEFAULT '[]',
    joined_at    BIGINT NOT NULL,
    PRIMARY KEY (org_id, email)
);

CREATE TABLE api_keys (
    key_id      TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL,
    email       TEXT NOT NULL,
    name        TEXT NOT NULL,
    secret_hash BYTEA NOT NULL,
    active      BIGINT NOT NULL,
    created_at  BIGINT NOT NULL
);
CREATE INDEX api_keys_member ON api_keys (org_id, email);

CREATE TABLE tasks (
    org_id           TEXT NOT NULL,
    -- byte order, so keyset pages compare ids the way the engine does
    task_id          TEXT COLLATE "C" NOT NULL,
    status           TEXT NOT NULL,
    status_rank      BIGINT NOT NULL,
    priority         BIGINT NOT NULL,
    assignee         TEXT,
    tags             TEXT NOT NULL,
    blocked_by       TEXT NOT NULL,
    parent_task_id   TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    lease_id         TEXT,
    lease_expires_at BIGINT,
    lease_seconds    BIGINT,
    title            BYTEA NOT NULL,
    description      BYTEA,
    metadata         BYTEA,
    output           BYTEA,
    PRIMARY KEY (org_id, task_id)
);
CREATE INDEX tasks_list_order ON tasks (org_id, status_rank, priority, created_at, task_id);
CREATE INDEX tasks_parent ON tasks (org_id, parent_task_id);
CREATE INDEX tasks_leased ON tasks (lease_expires_at) WHERE lease_expires_at IS NOT NULL;

CREATE TABLE task_events (
    event_id    BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id      TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    from_status TEXT,
    to_status   TEXT NOT NULL,
    agent_id    TEXT NOT NULL,
    at          BIGINT NOT NULL,
    note        BYTEA
);
CREATE INDEX task_events_task ON task_events (org_id, task_id, event_id);
