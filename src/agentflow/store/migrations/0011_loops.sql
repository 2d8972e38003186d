-- for_each (issue 11): each item of a loop runs as a child run of the run whose loop started
-- it, claimed by any worker.

-- parent_step: the parent's step that started the loop; item_index: the item's place in the
-- loop's list. A child not yet released (the loop's concurrency is taken) waits with
-- due_at = 'infinity': it is in no worker's way and any checkpoint can release it.
ALTER TABLE runs
    ADD COLUMN parent_step integer,
    ADD COLUMN item_index integer;

-- One child per item of a loop, however often the parent's checkpoint is retried; also how a
-- loop finds its children.
CREATE UNIQUE INDEX runs_one_child_per_item ON runs (workspace_id, parent_run_id, parent_step, item_index)
    WHERE parent_step IS NOT NULL;
