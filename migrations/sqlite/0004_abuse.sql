-- Abuse strikes and blocks. Strikes belong to a member's email across all
-- orgs; the org column lets enough strikes in one org suspend it.

CREATE TABLE strikes (
    strike_id INTEGER PRIMARY KEY AUTOINCREMENT,
    email     TEXT NOT NULL,
    org_id    TEXT NOT NULL,
    at        INTEGER NOT NULL
);
CREATE INDEX strikes_email ON strikes (email);
CREATE INDEX strikes_org ON strikes (org_id);

CREATE TABLE blocked_members (
    email      TEXT PRIMARY KEY,
    blocked_at INTEGER NOT NULL
);
