-- Sessions of the operator page, in the store so that every node of a
-- cluster knows them and a logout through one ends the session on all:
-- the SHA-256 of each session id and when it expires (ms since the epoch).
CREATE TABLE operator_sessions (
    id_hash    BLOB PRIMARY KEY,
    expires_at BIGINT NOT NULL
);
