-- Per-org usage: this month's counters and the rate buckets' state, so a
-- restart neither resets a month nor hands out a fresh burst.

CREATE TABLE org_usage (
    org_id    TEXT PRIMARY KEY,
    -- the month the counters belong to, as YYYY-MM (UTC)
    month     TEXT NOT NULL,
    requests  BIGINT NOT NULL,
    tasks     BIGINT NOT NULL,
    plans     BIGINT NOT NULL,
    -- theoretical arrival time of each token bucket, nanoseconds since the epoch
    read_tat  BIGINT NOT NULL,
    write_tat BIGINT NOT NULL
);
