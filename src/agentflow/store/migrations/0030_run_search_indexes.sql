-- Run search over a million runs (issue 15, S1): the run list is newest first, so a filter
-- that no index of its own serves (version, trigger, model, a run variable, a time range)
-- walks the workspace's runs newest first and stops at a page, instead of sorting them all;
-- an enrollment key is found by its own index (only runs that have one are in it). Neither
-- column changes after a run starts, so a checkpoint that leaves the status alone stays HOT;
-- an update that changes the status adds an entry here as in every index (measured in W1).
CREATE INDEX runs_newest ON runs (workspace_id, created_at DESC, id DESC);
CREATE INDEX runs_by_enrollment_key ON runs (workspace_id, enrollment_key) WHERE enrollment_key IS NOT NULL;
