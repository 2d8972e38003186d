-- Retention of finished runs (issue 16): each workspace may keep its finished runs (and their
-- steps, inbox, requests and streamed text) for its own number of days; NULL: the server's
-- AGENTFLOW_RUN_RETENTION_DAYS (0: forever). Finished runs are found by workspace and the time
-- they ended, oldest first, so a pass costs what it deletes, not what is kept. The index names
-- no column a checkpoint of an unfinished run changes (not updated_at), so those updates stay
-- HOT (see runs' fillfactor).
ALTER TABLE workspaces ADD COLUMN run_retention_days integer
    CHECK (run_retention_days >= 0 AND run_retention_days <= 36500);
CREATE INDEX runs_finished ON runs (workspace_id, (coalesce(completed_at, canceled_at, created_at)))
    WHERE status IN ('completed', 'failed', 'canceled');
