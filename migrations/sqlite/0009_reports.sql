-- Computed reports: insights, failure clusters, runbooks and standups,
-- written by the reports actor and kept so a restart serves them at once.
-- `scope`, `cadence` and `period` key standups ('' for the other kinds);
-- `body` is the report's JSON sealed like task content (runbooks, labels
-- and standup bodies quote tasks), bound to the row's key.
CREATE TABLE reports (
    org_id      TEXT NOT NULL,
    kind        TEXT NOT NULL,
    scope       TEXT NOT NULL,
    cadence     TEXT NOT NULL,
    period      TEXT NOT NULL,
    computed_at INTEGER NOT NULL,
    body        BLOB NOT NULL,
    PRIMARY KEY (org_id, kind, scope, cadence, period)
);
CREATE INDEX reports_recent ON reports (org_id, kind, scope, computed_at);
