-- A step's row is written only by a checkpoint, joined on the fenced update of its run's row,
-- or by a rerun's copy, joined on the insert of the new run: it cannot name a run that does
-- not exist. The foreign key checked that again on every checkpoint (a trigger that looks the
-- run up, about 0.02 ms of a 0.15 ms statement) and deleted a run's steps with it; the run's
-- deleters (retention, a workflow's deletion) now delete its steps first, as they do its
-- streamed text (run_deltas, which never had the key).
ALTER TABLE run_steps DROP CONSTRAINT run_steps_workspace_id_run_id_fkey;
