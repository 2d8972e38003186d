-- A child run's end is counted on its parent (children_ended) whether the parent waits or
-- runs, so the end of a child can no longer slip between the parent's count of its items and
-- the checkpoint that puts it to sleep: that checkpoint makes it due at once when the counter
-- passed what its count saw (store.checkpoints, as inbox_seq does for deliveries). Before,
-- a child that ended while its parent ran only woke it at the loop's next poll (1 s).
--
-- The update holds the parent's row, so an end that meets the parent's checkpoint waits for
-- it and then finds the parent waiting: it wakes it. It changes no indexed column (HOT).
ALTER TABLE runs ADD COLUMN children_ended bigint NOT NULL DEFAULT 0;

CREATE OR REPLACE FUNCTION agentflow_child_ended() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    woke boolean;
BEGIN
    UPDATE runs SET children_ended = children_ended + 1,
                    due_at = CASE WHEN status = 'waiting' AND due_at > now() THEN now() ELSE due_at END
    WHERE workspace_id = NEW.workspace_id AND id = NEW.parent_run_id
      AND status IN ('waiting', 'in_progress')
    RETURNING status = 'waiting' AND due_at = now() INTO woke;
    IF woke THEN
        PERFORM pg_notify('agentflow_runs', '');
    END IF;
    RETURN NULL;
END $$;
