-- A worker may write a step that only moves its run on as the step's row alone, ahead of the
-- run's row (store.steps_ahead): the run's state and step counter then stay as its last full
-- checkpoint left them, and the newest completed step at or past that counter (within a
-- stretch's length) holds the state the run reached (every other completed step is below the
-- counter: full checkpoints move it past every number they write). A worker's next full checkpoint catches the row up; so does
-- its next claim (it reads the steps). A run that stops being in progress any other way, its
-- step counter unchanged (the claim ends a lost run, a cancel, a cancel at a step's end), is
-- caught up here, in the same update, so no ended run keeps a state behind its steps.
CREATE OR REPLACE FUNCTION agentflow_catch_up_steps() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    newest record;
BEGIN
    -- A stretch of steps written ahead is at most 64 long (store.steps_ahead.STRETCH).
    SELECT s.seq, s.state INTO newest FROM run_steps s
    WHERE s.workspace_id = NEW.workspace_id AND s.run_id = NEW.id AND s.seq >= NEW.step_seq
      AND s.seq < NEW.step_seq + 64 AND s.status = 'completed'
    ORDER BY s.seq DESC LIMIT 1;
    IF FOUND THEN
        NEW.step_seq := newest.seq + 1;
        NEW.state := coalesce(newest.state, NEW.state);
        NEW.attempt := 0;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER run_steps_caught_up BEFORE UPDATE OF status ON runs
    FOR EACH ROW
    WHEN (OLD.status = 'in_progress' AND NEW.status IS DISTINCT FROM 'in_progress'
          AND NEW.step_seq = OLD.step_seq)
    EXECUTE FUNCTION agentflow_catch_up_steps();
