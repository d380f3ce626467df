-- Which master key made each org's data-key wrap (its fingerprint), so a
-- rotation can move wraps one by one and survive a crash in the middle.
-- NULL: a wrap made before wraps named their key.
ALTER TABLE orgs ADD COLUMN master_key_id TEXT;

-- A BYOK org's data key, wrapped by the client's own KMS; stored verbatim.
CREATE TABLE org_deks (
    org_id      TEXT PRIMARY KEY,
    wrapped_dek TEXT NOT NULL,
    kms_key_id  TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
