-- Orgs, members, keys, tasks and their state events.
-- Integers are milliseconds since the Unix epoch or plain counts; ids are
-- canonical lowercase UUID strings; sealed content is a BLOB.

CREATE TABLE orgs (
    org_id      TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    tier        TEXT NOT NULL,
    encryption  TEXT NOT NULL,
    seats       INTEGER NOT NULL,
    suspended   INTEGER NOT NULL DEFAULT 0,
    limits      TEXT NOT NULL DEFAULT '{}',
    wrapped_dek BLOB,
    created_at  INTEGER NOT NULL
);

CREATE TABLE members (
    org_id       TEXT NOT NULL,
    email        TEXT NOT NULL,
    role         TEXT NOT NULL,
    seated       INTEGER NOT NULL,
    profile_tags TEXT NOT NULL DEFAULT '[]',
    joined_at    INTEGER NOT NULL,
    PRIMARY KEY (org_id, email)
);

CREATE TABLE api_keys (
    key_id      TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL,
    email       TEXT NOT NULL,
    name        TEXT NOT NULL,
    secret_hash BLOB NOT NULL,
    active      INTEGER NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE INDEX api_keys_member ON api_keys (org_id, email);

CREATE TABLE tasks (
    org_id           TEXT NOT NULL,
    task_id          TEXT NOT NULL,
    status           TEXT NOT NULL,
    status_rank      INTEGER NOT NULL,
    priority         INTEGER NOT NULL,
    assignee         TEXT,
    tags             TEXT NOT NULL,
    blocked_by       TEXT NOT NULL,
    parent_task_id   TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    lease_id         TEXT,
    lease_expires_at INTEGER,
    lease_seconds    INTEGER,
    title            BLOB NOT NULL,
    description      BLOB,
    metadata         BLOB,
    output           BLOB,
    PRIMARY KEY (org_id, task_id)
);
CREATE INDEX tasks_list_order ON tasks (org_id, status_rank, priority, created_at, task_id);
CREATE INDEX tasks_parent ON tasks (org_id, parent_task_id);
CREATE INDEX tasks_leased ON tasks (lease_expires_at) WHERE lease_expires_at IS NOT NULL;

CREATE TABLE task_events (
    event_id    INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id      TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    from_status TEXT,
    to_status   TEXT NOT NULL,
    agent_id    TEXT NOT NULL,
    at          INTEGER NOT NULL,
    note        BLOB
);
CREATE INDEX task_events_task ON task_events (org_id, task_id, event_id);
