-- Each task's embedding, sealed like its content (vectors leak text): the
-- model that made it and its f32 components, little-endian. A task whose
-- title or description changes loses its row and is embedded again.
CREATE TABLE task_vectors (
    org_id  TEXT NOT NULL,
    task_id TEXT NOT NULL,
    model   TEXT NOT NULL,
    vector  BYTEA NOT NULL,
    PRIMARY KEY (org_id, task_id)
);
