-- A child run that ends wakes the run waiting for it (a for_each's item, the one child of an
-- agent, run_workflow or run_employee node, an agent's attached run_workflow), however it
-- ended: its final checkpoint, a cancel (of it or of a loop it belongs to), or a claim that
-- fails it (worker_lost) or finds it canceled. Before, only the checkpoint woke the parent,
-- in the checkpoint statement, and the parent polled every second for the rest.
--
-- The parent is woken only while it waits with a later due time; one that is running counts
-- its items at its next wake (and polls as a backstop, core.loops). The NOTIFY channel is
-- agentflow.store.database.WAKE_CHANNEL.
CREATE FUNCTION agentflow_child_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE runs SET due_at = now()
    WHERE workspace_id = NEW.workspace_id AND id = NEW.parent_run_id
      AND status = 'waiting' AND due_at > now();
    IF FOUND THEN
        PERFORM pg_notify('agentflow_runs', '');
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER run_child_ended AFTER UPDATE OF status ON runs
    FOR EACH ROW
    WHEN (NEW.parent_step IS NOT NULL AND NEW.status IN ('completed', 'failed', 'canceled')
          AND OLD.status NOT IN ('completed', 'failed', 'canceled'))
    EXECUTE FUNCTION agentflow_child_ended();
