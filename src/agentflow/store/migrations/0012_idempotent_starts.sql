-- Idempotent starts (issue 15, seed 003 createIfAbsent): a start that names a key makes at
-- most one run per workflow and key, whoever retries it and however many at once. The
-- unique index decides; start_hash (of what the start asked for) tells a retry of the same
-- start from another start that reused the key.
ALTER TABLE runs
    ADD COLUMN start_key text,
    ADD COLUMN start_hash text;

CREATE UNIQUE INDEX runs_one_per_start_key ON runs (workspace_id, workflow_id, start_key)
    WHERE start_key IS NOT NULL;
