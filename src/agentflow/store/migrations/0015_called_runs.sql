-- Runs of other workflows that a run_workflow node starts (issue 13). `parent_run_id` names
-- the run that started one (as for loop items and agent nodes' runs); `caller_node` names the
-- node. A waited child is its parent's one item (parent_step, item_index 0), so the loop
-- machinery wakes, cancels and retries it with its parent; a detached child (wait: false) has
-- no parent_step. Unlike loop items, such runs are listed with their own workflow's runs.
ALTER TABLE runs ADD COLUMN caller_node text;

-- The runs a run started, found from the parent: every kind (the unique index above covers
-- only those with a parent_step; a detached child has none).
CREATE INDEX runs_by_parent ON runs (workspace_id, parent_run_id) WHERE parent_run_id IS NOT NULL;
