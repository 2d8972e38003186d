-- A worker may write a model node's step ahead of its run's row too (store.steps_ahead): the
-- step's row carries its model call's usage, and the same statement adds it to the workspace's
-- day. The run's totals and its per-model costs follow with the row: the next full checkpoint
-- (the writer's, or the one after a claim that caught the run up) adds the usage of the
-- completed steps between the row's counter and its own step, and a run that stops being in
-- progress any other way has it added here, with its state.

-- ``costs`` (a run's per-model breakdown, seed 002 costs[]) with ``added`` entries merged in by
-- key_type, ordered by it.
CREATE OR REPLACE FUNCTION agentflow_merged_costs(costs jsonb, added jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'key_type', k, 'input_tokens', i, 'output_tokens', o,
               'cached_input_tokens', c, 'usd_cost', round(d, 6), 'calls', n) ORDER BY k), '[]')
    FROM (
        SELECT e->>'key_type' AS k, sum((e->>'input_tokens')::bigint) AS i,
               sum((e->>'output_tokens')::bigint) AS o,
               sum((e->>'cached_input_tokens')::bigint) AS c,
               sum((e->>'usd_cost')::numeric) AS d, sum((e->>'calls')::bigint) AS n
        FROM jsonb_array_elements(coalesce(costs, '[]') || coalesce(added, '[]')) AS e
        GROUP BY 1
    ) AS merged
$$;

CREATE OR REPLACE FUNCTION agentflow_catch_up_steps() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    newest record;
    spent record;
BEGIN
    -- A stretch of steps written ahead is at most 64 long (store.steps_ahead.STRETCH).
    SELECT s.seq, s.state INTO newest FROM run_steps s
    WHERE s.workspace_id = NEW.workspace_id AND s.run_id = NEW.id AND s.seq >= NEW.step_seq
      AND s.seq < NEW.step_seq + 64 AND s.status = 'completed'
    ORDER BY s.seq DESC LIMIT 1;
    IF FOUND THEN
        -- The model calls of the steps ahead: on the day already, not yet on the run.
        SELECT count(*) AS n, sum(s.input_tokens) AS i, sum(s.output_tokens) AS o,
               sum(s.cached_input_tokens) AS c, sum(s.usd_cost) AS d,
               jsonb_agg(jsonb_build_object(
                   'key_type', s.model, 'input_tokens', s.input_tokens,
                   'output_tokens', s.output_tokens, 'cached_input_tokens', s.cached_input_tokens,
                   'usd_cost', s.usd_cost, 'calls', 1)) AS costs
        INTO spent FROM run_steps s
        WHERE s.workspace_id = NEW.workspace_id AND s.run_id = NEW.id AND s.seq >= NEW.step_seq
          AND s.seq <= newest.seq AND s.status = 'completed' AND s.model IS NOT NULL;
        IF spent.n > 0 THEN
            NEW.input_tokens := NEW.input_tokens + spent.i;
            NEW.output_tokens := NEW.output_tokens + spent.o;
            NEW.cached_input_tokens := NEW.cached_input_tokens + spent.c;
            NEW.usd_cost := NEW.usd_cost + spent.d;
            NEW.costs := agentflow_merged_costs(NEW.costs, spent.costs);
        END IF;
        NEW.step_seq := newest.seq + 1;
        NEW.state := coalesce(newest.state, NEW.state);
        NEW.attempt := 0;
    END IF;
    RETURN NEW;
END $$;
