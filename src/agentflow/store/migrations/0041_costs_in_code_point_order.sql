-- A run's per-model costs are ordered by key_type in code point order, whatever the database's
-- collation: the worker merges them in that order for a running run's readers
-- (store.steps_ahead._merged), and a database made with another collation (an ICU or a
-- language's one, say 'en-US', where 'a' comes before 'B') must not order the stored array
-- otherwise. Migration 0040's function, with its ORDER BY in the "C" collation.
CREATE OR REPLACE FUNCTION agentflow_merged_costs(costs jsonb, added jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'key_type', k, 'input_tokens', i, 'output_tokens', o,
               'cached_input_tokens', c, 'usd_cost', round(d, 6), 'calls', n) ORDER BY k COLLATE "C"), '[]')
    FROM (
        SELECT e->>'key_type' AS k, sum((e->>'input_tokens')::bigint) AS i,
               sum((e->>'output_tokens')::bigint) AS o,
               sum((e->>'cached_input_tokens')::bigint) AS c,
               sum((e->>'usd_cost')::numeric) AS d, sum((e->>'calls')::bigint) AS n
        FROM jsonb_array_elements(coalesce(costs, '[]') || coalesce(added, '[]')) AS e
        GROUP BY 1
    ) AS merged
$$;
