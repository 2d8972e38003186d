"""The checkpoint statement's parts: the fenced update of the run and the step's audit row,
and one fragment per kind of write a step may carry (each a CTE joined on the run's update
``r``, so it happens only when the fenced update did). ``agentflow.store.checkpoints``
assembles the statement a step needs from these.

Markers (``$ROWS``, ``$TASKS`` ...) stand for a fragment's parameter and are numbered when the
statement is assembled; ``$13`` is the step's number throughout.
"""

from __future__ import annotations

from agentflow.store.agent_reads import TASK_JSON

CHECKPOINT = """
WITH r AS (
    UPDATE runs SET$RUN_MOVE
        state = $STATE,
        output = $8,
        error = $9,
        step_seq = $25::int,
        attempt = CASE WHEN $10::int = 1 THEN 0 ELSE attempt + 1 END,
        rescues = CASE WHEN $10::int = 1 THEN 0 ELSE rescues END,
        unstarted_rescues = CASE WHEN $10::int = 1 THEN 0 ELSE unstarted_rescues END,$USAGE
        updated_at = now()
    -- IS TRUE keeps runs_by_status out of the plan: on a table of a few thousand runs the
    -- cached plan used it and read every run in progress in the workspace (benchmarks/README).
    WHERE workspace_id = $1 AND id = $2 AND fencing_token = $3 AND lease_owner = $4
      AND (status = 'in_progress') IS TRUE AND step_seq = $24::int
    RETURNING workspace_id, id, status, due_at, cancel_requested, inbox_seq,
              extract(epoch FROM due_at - now())::float8 AS due_in, now() AS db_now$RETURNED_STATE
)$PRIOR_STEPS, s AS (
    -- A completed step keeps the state it left (a rerun from a later step starts from it).
    INSERT INTO run_steps (workspace_id, run_id, seq, attempt, node_id, kind, name, status,
                           input, output, error, idempotency_key, worker, fencing_token,
                           started_at, finished_at, state$STEP_USAGE_COLUMNS)
    SELECT r.workspace_id, r.id, $13::int, $14, $15, $16, $17, $18, $19, $20, $21,
           r.id::text || ':' || $13::int, $4, $3,
           -- The transaction's time, as for the run's due_at: a checkpoint that shares its
           -- commit with others (group commit) runs after the transaction began, and a wait
           -- counted from now() must not end before the step's recorded finish plus the wait.
           now() - make_interval(secs => $22), now(),
           CASE WHEN $18 = 'completed' THEN $STEP_STATE END$STEP_USAGE_VALUES
    FROM r$AFTER_PRIOR
)
"""
# How the run moves ($RUN_MOVE): to any status. The lease, due_at and completed_at follow it.
RUN_MOVE = """
        status = $5,
        status_reason = $6,
        -- Going on here: the next step begins at once, under this same lease.
        began_token = CASE WHEN $5 = 'in_progress' THEN $3 ELSE began_token END,
        -- Going on (in_progress): the lease and due_at stay as they are (heartbeats extend
        -- them), so the update changes no indexed column and can be HOT.
        due_at = CASE $5
            WHEN 'in_progress' THEN due_at
            -- A wait for an event ('awaiting_event', core.inbox.AWAITING_EVENT) is due at once
            -- when a delivery arrived that the step did not see ($23: the count it saw). The
            -- count is read from this row, which a delivery updates, so a delivery that holds
            -- the row now is waited for and counted: no wake-up is lost.
            WHEN 'waiting' THEN CASE$CHILD_ENDS WHEN $6::text = 'awaiting_event' AND inbox_seq > $23::bigint
                                     THEN now()
                                     -- The sooner of a wait from now ($11) and a time ($12).
                                     WHEN $12::timestamptz IS NULL
                                     THEN now() + make_interval(secs => coalesce($11::float8, 0))
                                     WHEN $11::float8 IS NULL THEN greatest(now(), $12::timestamptz)
                                     ELSE greatest(now(), least(now() + make_interval(secs => $11::float8),
                                                                $12::timestamptz)) END END,
        lease_owner = CASE WHEN $5 = 'in_progress' THEN lease_owner END,
        lease_expires_at = CASE WHEN $5 = 'in_progress' THEN lease_expires_at END,
        completed_at = CASE WHEN $5 IN ('completed', 'failed') THEN now() END,"""
# The run goes on here ($RUN_MOVE when the step leaves it in progress): what RUN_MOVE does
# for 'in_progress', without naming the columns it leaves alone. Not naming status spares
# the row its AFTER UPDATE OF status trigger (about 0.02 ms of a 0.15 ms statement), and
# the statement then takes no $5, $11, $12 or $23 (checkpoints.GOING_ON_UNUSED).
GOING_ON = """
        status_reason = $6,
        began_token = $3,
        completed_at = NULL,"""
# The run's new state ($STATE) when it has timers: a graph run's new timers count from this
# commit, in the database's time. Without timers the state is the parameter as it is, and
# the statement skips this expression and returning the state (about 0.1x the floor).
TIMED_STATE = """CASE WHEN $7::jsonb ? 'timers' THEN jsonb_set($7::jsonb, '{timers}', (
                    SELECT jsonb_agg(CASE WHEN t ? 'secs'
                                          THEN (t - 'secs') || jsonb_build_object(
                                                   'at', now() + make_interval(secs => (t->>'secs')::float8))
                                          ELSE t END ORDER BY n)
                    FROM jsonb_array_elements($7::jsonb -> 'timers') WITH ORDINALITY AS x(t, n)))
                ELSE $7 END"""
TIMED_RETURNED = ",\n              state -> 'timers' AS timers, state AS state_after"
TIMED_STEP_STATE = "r.state_after"
UNTIMED_RETURNED = ", NULL::jsonb AS timers"
UNTIMED_STEP_STATE = "$7::jsonb"
# A wait for child runs is due at once when one of them ended after the count the step saw
# ($CHILD_ENDS, numbered last): migration 0036 counts each end on this row, which the end
# updates, so an end that holds the row now is waited for and counted, as a delivery is.
CHILD_ENDS = "\n                                     WHEN children_ended > $SEEN::bigint THEN now()"
# Steps of pure nodes (or an agent's decision) that ran before this one and were not
# checkpointed alone ($PRIOR: seq, attempt, node_id, kind, name, input, output, state, ran =
# seconds it ran, ago = seconds between its end and this statement; a decision's model call):
# their rows, in this step's commit ($PRIOR_STEPS, before the step's own row: AFTER_PRIOR makes
# that insert wait for these, so their ids come first, as readers order a run's steps by id).
PRIOR = """, pr AS (
    INSERT INTO run_steps (workspace_id, run_id, seq, attempt, node_id, kind, name, status,
                           input, output, idempotency_key, worker, fencing_token,
                           started_at, finished_at, state, model, input_tokens, output_tokens,
                           cached_input_tokens, usd_cost)
    SELECT r.workspace_id, r.id, (x.d->>'seq')::int, (x.d->>'attempt')::int, x.d->>'node_id',
           x.d->>'kind', x.d->>'name', 'completed', nullif(x.d->'input', 'null'),
           nullif(x.d->'output', 'null'),
           r.id::text || ':' || (x.d->>'seq'), $4, $3,
           now() - make_interval(secs => (x.d->>'ago')::float8 + (x.d->>'ran')::float8),
           now() - make_interval(secs => (x.d->>'ago')::float8), x.d->'state',
           -- A kept decision's model call (a pure node's row has none).
           x.d->>'model', coalesce((x.d->>'input_tokens')::bigint, 0),
           coalesce((x.d->>'output_tokens')::bigint, 0),
           coalesce((x.d->>'cached_input_tokens')::bigint, 0), coalesce((x.d->>'usd_cost')::numeric, 0)
    FROM r, jsonb_array_elements($PRIOR::jsonb) WITH ORDINALITY AS x(d, n)
    ORDER BY x.n
    RETURNING 1
)"""
AFTER_PRIOR = " WHERE (SELECT count(*) FROM pr) >= 0"
# Consuming the inbox rows the step saw ($ROWS), exactly once with the step (fenced by r).
CONSUME = """, c AS (
    UPDATE run_inbox i SET consumed_at = now(), consumed_seq = $13::int
    FROM r WHERE i.workspace_id = r.workspace_id AND i.run_id = r.id
      AND i.id = ANY($ROWS::bigint[]) AND i.consumed_at IS NULL
)"""
# Consuming the inbox rows a kept decision used (``consumed`` in $PRIOR), exactly once with
# it, under its own number: what a decision saw is found by that number (store.replays).
PRIOR_CONSUME = """, pc AS (
    UPDATE run_inbox i SET consumed_at = now(), consumed_seq = (x.d->>'seq')::int
    FROM r, jsonb_array_elements($PRIOR::jsonb) AS x(d),
         jsonb_array_elements_text(x.d->'consumed') AS c(id)
    WHERE i.workspace_id = r.workspace_id AND i.run_id = r.id
      AND i.id = c.id::bigint AND i.consumed_at IS NULL
)"""
# Inserting the tasks the step asked for ($TASKS), exactly once with the step.
TASKS = """, t AS (
    INSERT INTO tasks (workspace_id, id, run_id, origin_key, title, description, assignee,
                       due_at, priority, system_generated, account_id, metadata, expires_at)
    SELECT r.workspace_id, coalesce((x.doc->>'id')::uuid, gen_random_uuid()), r.id,
           r.id::text || ':' || $13::int || ':' || x.n,
           x.doc->>'title', x.doc->>'description', x.doc->>'assignee',
           (x.doc->>'due_at')::timestamptz, x.doc->>'priority', true, x.doc->>'account_id',
           coalesce(x.doc->'metadata', '{}'),
           coalesce((x.doc->>'expires_at')::timestamptz,
                    now() + make_interval(secs => (x.doc->>'expires_in')::float8))
    FROM r, jsonb_array_elements($TASKS::jsonb) WITH ORDINALITY AS x(doc, n)$TASKS_RETURNING
)"""
# The tasks it created as a decision reads them (an agent's worker keeps them), when asked for
# ($TASKS_RETURNING): one checkpoint's tasks share created_at, so the read orders them by id.
TASKS_RETURNING = "\n    RETURNING id, " + TASK_JSON.format(t="tasks") + " AS doc"
CREATED_TASKS = ", (SELECT jsonb_agg(t.doc ORDER BY t.id) FROM t) AS created_tasks"
# The notifications the step sends ($NOTES): outbox rows the notifier delivers afterwards.
# In-app notifications are delivered by being written.
NOTIFICATIONS = """, n AS (
    INSERT INTO notifications (workspace_id, id, run_id, origin_key, channel, recipient, subject,
                               body, kind, account_id, metadata, status, sent_at)
    SELECT r.workspace_id, (x.doc->>'id')::uuid, r.id, r.id::text || ':' || $13::int || ':n' || x.n,
           x.doc->>'channel', x.doc->>'recipient', x.doc->>'subject', coalesce(x.doc->>'body', ''),
           coalesce(x.doc->>'kind', 'message'), x.doc->>'account_id', coalesce(x.doc->'metadata', '{}'),
           CASE WHEN x.doc->>'channel' = 'in_app' THEN 'sent' ELSE 'pending' END,
           CASE WHEN x.doc->>'channel' = 'in_app' THEN now() END
    FROM r, jsonb_array_elements($NOTES::jsonb) WITH ORDINALITY AS x(doc, n)
)"""
# A side-effecting call waiting for a person ($APPROVAL), bound to the hash of its arguments.
APPROVAL = """, a AS (
    INSERT INTO requests (workspace_id, id, run_id, step_seq, tool, arguments, arguments_hash,
                          expires_at, kind, node_id, message, spec, assignees, channels,
                          timeout_action, link_tokens)
    SELECT r.workspace_id, (q.d->>'id')::uuid, r.id, $13::int, q.d->>'tool',
           coalesce(q.d->'arguments', '{}'), q.d->>'arguments_hash',
           now() + make_interval(secs => (q.d->>'expires_in')::float8),
           coalesce(q.d->>'kind', 'approval'), q.d->>'node_id', q.d->>'message', q.d->'spec',
           ARRAY(SELECT jsonb_array_elements_text(coalesce(q.d->'assignees', '[]'))),
           ARRAY(SELECT jsonb_array_elements_text(coalesce(q.d->'channels', '["in_app"]'))),
           q.d->>'timeout_action', coalesce(q.d->'link_tokens', '{}')
    FROM r, (SELECT $APPROVAL::jsonb AS d) AS q
    ON CONFLICT (workspace_id, run_id, step_seq, arguments_hash) DO NOTHING
)"""
# A loop's items as child runs ($CHILDREN), exactly once (one per item of the loop's step):
# the first ones due now, the others with due_at 'infinity' until the parent releases them.
# A run_workflow's child is a run of another workflow (workflow_id, workflow_version, input,
# its own id and caller_node); a detached one (wait: false) is no item of its parent's step.
# trace_parent: the parent run's span, when the worker traces (runtime.tracing).
CHILDREN = """, k AS (
    INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, input, state,
                      parent_run_id, parent_step, item_index, due_at, caller_node, trace_parent,
                      conversation)
    SELECT r.workspace_id, coalesce((x.doc->>'id')::uuid, gen_random_uuid()),
           coalesce((x.doc->>'workflow_id')::uuid, p.workflow_id),
           coalesce((x.doc->>'workflow_version')::int, p.workflow_version), 'created',
           CASE WHEN x.doc ? 'input' THEN x.doc->'input' ELSE p.input END,
           x.doc->'state', r.id,
           CASE WHEN (x.doc->>'detached')::boolean THEN NULL ELSE $13::int END,
           CASE WHEN (x.doc->>'detached')::boolean THEN NULL ELSE (x.doc->>'item_index')::int END,
           CASE WHEN (x.doc->>'released')::boolean THEN now() ELSE 'infinity' END,
           x.doc->>'caller_node', x.doc->>'trace_parent', x.doc->'conversation'
    FROM r JOIN runs p ON p.workspace_id = r.workspace_id AND p.id = r.id,
         jsonb_array_elements($CHILDREN::jsonb) AS x(doc)
    -- One per item (runs_one_child_per_item), or per id for a detached child.
    ON CONFLICT DO NOTHING
    RETURNING pg_notify('agentflow_runs', '')
)"""
# Let a loop's items below an index run ($RELEASE: [[loop step, index], ...]).
RELEASE = """, rl AS (
    UPDATE runs c SET due_at = now(), updated_at = now()
    FROM r, jsonb_array_elements($RELEASE::jsonb) AS q(x)
    WHERE c.workspace_id = r.workspace_id AND c.parent_run_id = r.id
      AND c.parent_step = (q.x->>0)::int AND c.item_index < (q.x->>1)::int AND c.due_at = 'infinity'
    RETURNING pg_notify('agentflow_runs', '')
)"""
# Cancel a failed loop's unfinished items ($CANCEL: loop steps), and theirs (nested loops): at
# once when no worker holds them, at their step's end otherwise.
CANCEL_LOOPS = """, ct AS (
    SELECT c.workspace_id, c.id FROM runs c, r
    WHERE c.workspace_id = r.workspace_id AND c.parent_run_id = r.id
      AND c.parent_step IN (SELECT value::int FROM jsonb_array_elements_text($CANCEL::jsonb))
    UNION
    SELECT c.workspace_id, c.id FROM runs c JOIN ct ON c.workspace_id = ct.workspace_id
      AND c.parent_run_id = ct.id AND c.parent_step IS NOT NULL
), cl AS (
    UPDATE runs c SET
        cancel_requested = true,
        status = CASE WHEN c.lease_owner IS NULL THEN 'canceled' ELSE c.status END,
        status_reason = CASE WHEN c.lease_owner IS NULL THEN 'loop_failed' ELSE c.status_reason END,
        due_at = CASE WHEN c.lease_owner IS NULL THEN NULL ELSE c.due_at END,
        canceled_at = CASE WHEN c.lease_owner IS NULL THEN now() ELSE c.canceled_at END,
        updated_at = now()
    FROM ct WHERE c.workspace_id = ct.workspace_id AND c.id = ct.id AND c.active
)"""
# Lifecycle events ($EVENTS: topic, message_id, data) in the log, with the change they tell of.
EVENTS = """, ev AS (
    INSERT INTO events (workspace_id, topic, message_id, data, account_id, published_at)
    SELECT r.workspace_id, e.doc->>'topic', e.doc->>'message_id', e.doc->'data',
           e.doc->'data'->>'account_id', now()
    FROM r, jsonb_array_elements($EVENTS::jsonb) AS e(doc)
    ON CONFLICT (workspace_id, topic, message_id) DO NOTHING
)"""
# A model call's tokens and cost, also on the workspace's day (UTC) for its daily budget.
WORKSPACE_USAGE = """, u AS (
    INSERT INTO workspace_usage AS w (workspace_id, day, input_tokens, output_tokens,
                                      cached_input_tokens, usd_cost, model_calls)
    SELECT r.workspace_id, (now() AT TIME ZONE 'UTC')::date, $IN, $OUT, $CACHED, $USD, $CALLS FROM r
    ON CONFLICT (workspace_id, day) DO UPDATE SET
        input_tokens = w.input_tokens + excluded.input_tokens,
        output_tokens = w.output_tokens + excluded.output_tokens,
        cached_input_tokens = w.cached_input_tokens + excluded.cached_input_tokens,
        usd_cost = w.usd_cost + excluded.usd_cost,
        model_calls = w.model_calls + excluded.model_calls
    -- The day's totals with this step's: the run's next model call checks its budget on them.
    RETURNING w.usd_cost::float8 AS usd, w.input_tokens + w.output_tokens AS tokens
)"""
# What the checkpoint answers with a model call's usage: the workspace's spend today (``u``)
# and its own daily limits, as this commit leaves them (``u`` has a row whenever ``r`` has).
SPEND_COLUMNS = (
    ", u.usd AS spend_usd, u.tokens AS spend_tokens, b.daily_usd::float8 AS daily_usd, b.daily_tokens"
)
SPEND_JOIN = " CROSS JOIN u LEFT JOIN workspace_budgets b ON b.workspace_id = r.workspace_id"
# The run's totals and its per-model breakdown (seed 002 costs[]), merged by key_type, ordered
# by it. The usual run calls one model: its first call and every call after it are plain
# expressions; only a run that calls another model regroups the array with migration 0040's
# agentflow_merged_costs (a regrouping that cost 0.04 ms of a 0.22 ms statement when every
# call went through it).
RUN_USAGE = """
        input_tokens = input_tokens + $IN,
        output_tokens = output_tokens + $OUT,
        cached_input_tokens = cached_input_tokens + $CACHED,
        usd_cost = usd_cost + $USD,
        costs = CASE
            WHEN costs = '[]' THEN jsonb_build_array(jsonb_build_object(
                'key_type', $MODEL::text, 'input_tokens', $IN, 'output_tokens', $OUT,
                'cached_input_tokens', $CACHED, 'usd_cost', round($USD, 6), 'calls', $CALLS))
            WHEN jsonb_array_length(costs) = 1 AND costs -> 0 ->> 'key_type' = $MODEL::text
            THEN jsonb_build_array(jsonb_build_object(
                'key_type', $MODEL::text,
                'input_tokens', (costs -> 0 -> 'input_tokens')::bigint + $IN,
                'output_tokens', (costs -> 0 -> 'output_tokens')::bigint + $OUT,
                'cached_input_tokens', (costs -> 0 -> 'cached_input_tokens')::bigint + $CACHED,
                'usd_cost', round((costs -> 0 -> 'usd_cost')::numeric + $USD, 6),
                'calls', (costs -> 0 -> 'calls')::bigint + $CALLS))
            ELSE agentflow_merged_costs(costs, jsonb_build_array(jsonb_build_object(
                'key_type', $MODEL::text, 'input_tokens', $IN, 'output_tokens', $OUT,
                'cached_input_tokens', $CACHED, 'usd_cost', $USD, 'calls', $CALLS))) END,"""
# The run's totals and costs after steps written ahead of its row ($USAGE instead of RUN_USAGE,
# in the first full checkpoint after them, fenced on the row's counter $24): the usage of the
# completed steps from that counter to this one (their rows hold it; the day counted it when
# they were written, migration 0040), with this step's own ($OWN_USAGE) when it called a model.
RUN_USAGE_AHEAD = """
        (input_tokens, output_tokens, cached_input_tokens, usd_cost, costs) = (
            SELECT runs.input_tokens + coalesce(sum(a.i), 0), runs.output_tokens + coalesce(sum(a.o), 0),
                   runs.cached_input_tokens + coalesce(sum(a.c), 0), runs.usd_cost + coalesce(sum(a.d), 0),
                   CASE WHEN count(*) = 0 THEN runs.costs ELSE agentflow_merged_costs(runs.costs, jsonb_agg(
                       jsonb_build_object('key_type', a.k, 'input_tokens', a.i, 'output_tokens', a.o,
                                          'cached_input_tokens', a.c, 'usd_cost', a.d, 'calls', a.n))) END
            FROM (SELECT s.model, s.input_tokens, s.output_tokens, s.cached_input_tokens, s.usd_cost, 1
                  FROM run_steps s
                  WHERE s.workspace_id = $1 AND s.run_id = $2 AND s.seq >= $24::int AND s.seq < $13::int
                    AND s.status = 'completed' AND s.model IS NOT NULL$OWN_USAGE) AS a(k, i, o, c, d, n)
        ),"""
OWN_USAGE = """
                  UNION ALL SELECT $MODEL, $IN, $OUT, $CACHED, $USD, $CALLS"""
# Messages an agent step adds to its memory ($MEMORY: namespace, key, role, content,
# retention seconds), in the order given, exactly once with the step.
MEMORY = """, mm AS (
    INSERT INTO memory_messages (workspace_id, namespace, memory_key, run_id, step_seq, role, content,
                                 expires_at)
    SELECT r.workspace_id, x.doc->>'namespace', x.doc->>'key', r.id, $13::int, x.doc->>'role',
           x.doc->>'content', now() + make_interval(secs => (x.doc->>'retention')::float8)
    FROM r, jsonb_array_elements($MEMORY::jsonb) WITH ORDINALITY AS x(doc, n)
    ORDER BY x.n
)"""
# A memory's new summary ($MEMSUM), kept only when it covers more than the stored one.
MEMORY_SUMMARY = """, ms AS (
    INSERT INTO memory_summaries AS m (workspace_id, namespace, memory_key, through_seq, summary,
                                       expires_at)
    SELECT r.workspace_id, q.d->>'namespace', q.d->>'key', (q.d->>'through_seq')::bigint,
           q.d->>'summary', now() + make_interval(secs => (q.d->>'retention')::float8)
    FROM r, (SELECT $MEMSUM::jsonb AS d) AS q
    ON CONFLICT (workspace_id, namespace, memory_key) DO UPDATE SET
        through_seq = excluded.through_seq, summary = excluded.summary, updated_at = now(),
        expires_at = excluded.expires_at
    WHERE m.through_seq < excluded.through_seq
)"""
