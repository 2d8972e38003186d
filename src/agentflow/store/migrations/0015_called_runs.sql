-- Runs of other workflows that a run_workflow node starts (issue 13). `parent_run_id` names
-- the run that started one (as for loop items and agent nodes' runs); `caller_node` names the
-- node. A waited child is its parent's one item (parent_step, item_index 0), so the loop
-- machinery wakes, cancels and retries it with its parent; a detached child (wait: false) has
-- no parent_step. Unlike loop items, such runs are listed with their own workflow's runs.
ALTER TABLE runs ADD COLUMN caller_node text;
