-- Sessions of the board (the members' web page), in the store so that
-- every node of a cluster knows them and a sign-out through one ends the
-- session on all: the SHA-256 of each session id, the key that signed in
-- (resolved again on every request, so a revoked key or a changed role
-- takes effect at once), and when the session expires (ms since the epoch).
CREATE TABLE board_sessions (
    id_hash    BLOB PRIMARY KEY,
    org_id     TEXT NOT NULL,
    key_id     TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX board_sessions_expiry ON board_sessions (expires_at);
