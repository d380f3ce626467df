-- Org administration: the tag vocabulary, teams and their memberships, and
-- the identity-provider enrollment flag.

ALTER TABLE orgs ADD COLUMN idp_enrolled BIGINT NOT NULL DEFAULT 0;

CREATE TABLE tags (
    org_id      TEXT NOT NULL,
    name        TEXT NOT NULL,
    strict      BIGINT NOT NULL,
    is_default  BIGINT NOT NULL,
    description TEXT,
    created_by  TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (org_id, name)
);

CREATE TABLE teams (
    org_id      TEXT NOT NULL,
    name        TEXT NOT NULL,
    tags        TEXT NOT NULL,
    description TEXT,
    idp_only    BIGINT NOT NULL,
    created_by  TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (org_id, name)
);

-- One row per (team, member); `manual` and `idp` are the membership's sources.
CREATE TABLE team_members (
    org_id   TEXT NOT NULL,
    team     TEXT NOT NULL,
    email    TEXT NOT NULL,
    manual   BIGINT NOT NULL,
    idp      BIGINT NOT NULL,
    added_by TEXT NOT NULL,
    added_at BIGINT NOT NULL,
    PRIMARY KEY (org_id, team, email)
);
