-- Org administration: the tag vocabulary, teams and their memberships, and
-- the identity-provider enrollment flag.

ALTER TABLE orgs ADD COLUMN idp_enrolled INTEGER NOT NULL DEFAULT 0;

CREATE TABLE tags (
    org_id      TEXT NOT NULL,
    name        TEXT NOT NULL,
    strict      INTEGER NOT NULL,
    is_default  INTEGER NOT NULL,
    description TEXT,
    created_by  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (org_id, name)
);

CREATE TABLE teams (
    org_id      TEXT NOT NULL,
    name        TEXT NOT NULL,
    tags        TEXT NOT NULL,
    description TEXT,
    idp_only    INTEGER NOT NULL,
    created_by  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (org_id, name)
);

-- One row per (team, member); `manual` and `idp` are the membership's sources.
CREATE TABLE team_members (
    org_id   TEXT NOT NULL,
    team     TEXT NOT NULL,
    email    TEXT NOT NULL,
    manual   INTEGER NOT NULL,
    idp      INTEGER NOT NULL,
    added_by TEXT NOT NULL,
    added_at INTEGER NOT NULL,
    PRIMARY KEY (org_id, team, email)
);
