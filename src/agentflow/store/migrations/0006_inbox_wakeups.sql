-- Run inboxes: every delivery is counted on the run's row, and wakes a run that waits for one.

-- How many deliveries (rows inserted unconsumed) the run has received. A worker remembers the value it
-- read together with the inbox rows it loaded; a checkpoint that finds it higher knows that
-- something arrived meanwhile. It lives on the run's row, not in a subquery over run_inbox,
-- because a checkpoint blocked behind a delivery's row lock re-reads the row (READ COMMITTED
-- re-evaluation) but keeps its statement snapshot for every other table.
ALTER TABLE runs ADD COLUMN inbox_seq bigint NOT NULL DEFAULT 0;

-- Every insert path (the dispatcher, task changes, webhooks, a hand-written INSERT) counts the
-- delivery and wakes the run if it waits for an event (status reason 'awaiting_event'), in
-- the inserting transaction. Rows inserted as already consumed (a run's trigger) do not count.
-- The NOTIFY channel is agentflow.store.database.WAKE_CHANNEL.
CREATE FUNCTION agentflow_inbox_delivered() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    woken boolean;
BEGIN
    UPDATE runs SET
        inbox_seq = inbox_seq + 1,
        due_at = CASE WHEN status = 'waiting' AND status_reason = 'awaiting_event' AND due_at > now()
                      THEN now() ELSE due_at END,
        updated_at = CASE WHEN status = 'waiting' AND status_reason = 'awaiting_event' AND due_at > now()
                          THEN now() ELSE updated_at END
    WHERE workspace_id = NEW.workspace_id AND id = NEW.run_id
    RETURNING status = 'waiting' AND status_reason = 'awaiting_event' AND due_at <= now() INTO woken;
    IF woken THEN
        PERFORM pg_notify('agentflow_runs', '');
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER run_inbox_delivered AFTER INSERT ON run_inbox
    FOR EACH ROW WHEN (NEW.consumed_at IS NULL) EXECUTE FUNCTION agentflow_inbox_delivered();
