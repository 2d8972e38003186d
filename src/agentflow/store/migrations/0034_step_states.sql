-- Reruns from a chosen step (issue 15): each completed step keeps the run's state as its
-- checkpoint left it, so a new run can start where the old one stood before that step. The
-- checkpoint already sends the state for the run's row; storing it again costs bytes, not a
-- round trip (a linear graph's state is a node name: tens of bytes). Rows written before
-- this migration have none, and a rerun from before them is refused.
ALTER TABLE run_steps ADD COLUMN state jsonb;

-- A rerun names the run and the step it was made from ({"run_id": ..., "step": ...}); its
-- steps before that one are copies of the old run's.
ALTER TABLE runs ADD COLUMN rerun_of jsonb;
