-- How many days an org keeps its finished tasks; NULL keeps them all.
ALTER TABLE orgs ADD COLUMN retention_days BIGINT;
-- When the operator deleted the org: its data key is gone, and its rows
-- are being removed; the row itself goes last.
ALTER TABLE orgs ADD COLUMN deleted_at BIGINT;
