-- How many days an org keeps its finished tasks; NULL keeps them all.
ALTER TABLE orgs ADD COLUMN retention_days BIGINT;
