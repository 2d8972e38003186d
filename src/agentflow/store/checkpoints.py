"""The checkpoint: record a step and move its run in one statement, fenced on the lease.

A step's writes to the engine's own tables ride in the same statement (one commit), so they
happen exactly once with the step: consuming inbox rows, tasks, notifications (an outbox the
notifier delivers afterwards), an approval request, and a model call's tokens and cost (on the
step, the run, its per-model ``costs`` and the workspace's day). Each part is added to the
statement only when the step has one, so the common step pays for none of them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import asyncpg

_CHECKPOINT = """
WITH r AS (
    UPDATE runs SET
        status = $5,
        status_reason = $6,
        -- A graph run's new timers count from this commit, in the database's time.
        state = CASE WHEN $7::jsonb ? 'timers' THEN jsonb_set($7::jsonb, '{timers}', (
                    SELECT jsonb_agg(CASE WHEN t ? 'secs'
                                          THEN (t - 'secs') || jsonb_build_object(
                                                   'at', now() + make_interval(secs => (t->>'secs')::float8))
                                          ELSE t END ORDER BY n)
                    FROM jsonb_array_elements($7::jsonb -> 'timers') WITH ORDINALITY AS x(t, n)))
                ELSE $7 END,
        output = $8,
        error = $9,
        step_seq = $25::int,
        attempt = CASE WHEN $10::int = 1 THEN 0 ELSE attempt + 1 END,
        rescues = CASE WHEN $10::int = 1 THEN 0 ELSE rescues END,
        unstarted_rescues = CASE WHEN $10::int = 1 THEN 0 ELSE unstarted_rescues END,
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
            WHEN 'waiting' THEN CASE WHEN $6::text = 'awaiting_event' AND inbox_seq > $23::bigint
                                     THEN now()
                                     -- The sooner of a wait from now ($11) and a time ($12).
                                     WHEN $12::timestamptz IS NULL
                                     THEN now() + make_interval(secs => coalesce($11::float8, 0))
                                     WHEN $11::float8 IS NULL THEN greatest(now(), $12::timestamptz)
                                     ELSE greatest(now(), least(now() + make_interval(secs => $11::float8),
                                                                $12::timestamptz)) END END,
        lease_owner = CASE WHEN $5 = 'in_progress' THEN lease_owner END,
        lease_expires_at = CASE WHEN $5 = 'in_progress' THEN lease_expires_at END,
        completed_at = CASE WHEN $5 IN ('completed', 'failed') THEN now() END,$USAGE
        updated_at = now()
    WHERE workspace_id = $1 AND id = $2 AND fencing_token = $3 AND lease_owner = $4
      AND status = 'in_progress' AND step_seq = $24::int
    RETURNING workspace_id, id, status, due_at, cancel_requested, inbox_seq,
              extract(epoch FROM due_at - now())::float8 AS due_in, now() AS db_now,
              state -> 'timers' AS timers
), s AS (
    INSERT INTO run_steps (workspace_id, run_id, seq, attempt, node_id, kind, name, status,
                           input, output, error, idempotency_key, worker, fencing_token,
                           started_at, finished_at$STEP_USAGE_COLUMNS)
    SELECT r.workspace_id, r.id, $13::int, $14, $15, $16, $17, $18, $19, $20, $21,
           r.id::text || ':' || $13::int, $4, $3,
           clock_timestamp() - make_interval(secs => $22), clock_timestamp()$STEP_USAGE_VALUES
    FROM r
)
"""
# Consuming the inbox rows the step saw ($ROWS), exactly once with the step (fenced by r).
_CONSUME = """, c AS (
    UPDATE run_inbox i SET consumed_at = now(), consumed_seq = $13::int
    FROM r WHERE i.workspace_id = r.workspace_id AND i.run_id = r.id
      AND i.id = ANY($ROWS::bigint[]) AND i.consumed_at IS NULL
)"""
# Inserting the tasks the step asked for ($TASKS), exactly once with the step.
_TASKS = """, t AS (
    INSERT INTO tasks (workspace_id, id, run_id, origin_key, title, description, assignee,
                       due_at, priority, system_generated, account_id, metadata, expires_at)
    SELECT r.workspace_id, coalesce((x.doc->>'id')::uuid, gen_random_uuid()), r.id,
           r.id::text || ':' || $13::int || ':' || x.n,
           x.doc->>'title', x.doc->>'description', x.doc->>'assignee',
           (x.doc->>'due_at')::timestamptz, x.doc->>'priority', true, x.doc->>'account_id',
           coalesce(x.doc->'metadata', '{}'),
           coalesce((x.doc->>'expires_at')::timestamptz,
                    now() + make_interval(secs => (x.doc->>'expires_in')::float8))
    FROM r, jsonb_array_elements($TASKS::jsonb) WITH ORDINALITY AS x(doc, n)
)"""
# The notifications the step sends ($NOTES): outbox rows the notifier delivers afterwards.
# In-app notifications are delivered by being written.
_NOTIFICATIONS = """, n AS (
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
_APPROVAL = """, a AS (
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
_CHILDREN = """, k AS (
    INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, input, state,
                      parent_run_id, parent_step, item_index, due_at, caller_node)
    SELECT r.workspace_id, coalesce((x.doc->>'id')::uuid, gen_random_uuid()),
           coalesce((x.doc->>'workflow_id')::uuid, p.workflow_id),
           coalesce((x.doc->>'workflow_version')::int, p.workflow_version), 'created',
           CASE WHEN x.doc ? 'input' THEN x.doc->'input' ELSE p.input END,
           x.doc->'state', r.id,
           CASE WHEN (x.doc->>'detached')::boolean THEN NULL ELSE $13::int END,
           CASE WHEN (x.doc->>'detached')::boolean THEN NULL ELSE (x.doc->>'item_index')::int END,
           CASE WHEN (x.doc->>'released')::boolean THEN now() ELSE 'infinity' END,
           x.doc->>'caller_node'
    FROM r JOIN runs p ON p.workspace_id = r.workspace_id AND p.id = r.id,
         jsonb_array_elements($CHILDREN::jsonb) AS x(doc)
    -- One per item (runs_one_child_per_item), or per id for a detached child.
    ON CONFLICT DO NOTHING
    RETURNING pg_notify('agentflow_runs', '')
)"""
# Let a loop's items below an index run ($RELEASE: [[loop step, index], ...]).
_RELEASE = """, rl AS (
    UPDATE runs c SET due_at = now(), updated_at = now()
    FROM r, jsonb_array_elements($RELEASE::jsonb) AS q(x)
    WHERE c.workspace_id = r.workspace_id AND c.parent_run_id = r.id
      AND c.parent_step = (q.x->>0)::int AND c.item_index < (q.x->>1)::int AND c.due_at = 'infinity'
    RETURNING pg_notify('agentflow_runs', '')
)"""
# Cancel a failed loop's unfinished items ($CANCEL: loop steps), and theirs (nested loops): at
# once when no worker holds them, at their step's end otherwise.
_CANCEL_LOOPS = """, ct AS (
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
# A loop item that ended wakes its parent ($PARENT), which counts its loop's items.
_WAKE_PARENT = """, wp AS (
    UPDATE runs p SET due_at = now()
    FROM r WHERE r.status IN ('completed', 'failed', 'canceled')
      AND p.workspace_id = r.workspace_id AND p.id = $PARENT::uuid AND p.status = 'waiting'
      AND p.due_at > now()
    RETURNING pg_notify('agentflow_runs', '')
)"""
# Lifecycle events ($EVENTS: topic, message_id, data) in the log, with the change they tell of.
_EVENTS = """, ev AS (
    INSERT INTO events (workspace_id, topic, message_id, data, account_id, published_at)
    SELECT r.workspace_id, e.doc->>'topic', e.doc->>'message_id', e.doc->'data',
           e.doc->'data'->>'account_id', now()
    FROM r, jsonb_array_elements($EVENTS::jsonb) AS e(doc)
    ON CONFLICT (workspace_id, topic, message_id) DO NOTHING
)"""
# A model call's tokens and cost, also on the workspace's day (UTC) for its daily budget.
_WORKSPACE_USAGE = """, u AS (
    INSERT INTO workspace_usage AS w (workspace_id, day, input_tokens, output_tokens,
                                      cached_input_tokens, usd_cost, model_calls)
    SELECT r.workspace_id, (now() AT TIME ZONE 'UTC')::date, $IN, $OUT, $CACHED, $USD, $CALLS FROM r
    ON CONFLICT (workspace_id, day) DO UPDATE SET
        input_tokens = w.input_tokens + excluded.input_tokens,
        output_tokens = w.output_tokens + excluded.output_tokens,
        cached_input_tokens = w.cached_input_tokens + excluded.cached_input_tokens,
        usd_cost = w.usd_cost + excluded.usd_cost,
        model_calls = w.model_calls + excluded.model_calls
)"""
# The run's totals and its per-model breakdown (seed 002 costs[]), merged by key_type.
_RUN_USAGE = """
        input_tokens = input_tokens + $IN,
        output_tokens = output_tokens + $OUT,
        cached_input_tokens = cached_input_tokens + $CACHED,
        usd_cost = usd_cost + $USD,
        costs = (
            SELECT coalesce(jsonb_agg(jsonb_build_object(
                       'key_type', k, 'input_tokens', i, 'output_tokens', o,
                       'cached_input_tokens', c, 'usd_cost', round(d, 6), 'calls', n) ORDER BY k), '[]')
            FROM (
                SELECT e->>'key_type' AS k, sum((e->>'input_tokens')::bigint) AS i,
                       sum((e->>'output_tokens')::bigint) AS o,
                       sum((e->>'cached_input_tokens')::bigint) AS c,
                       sum((e->>'usd_cost')::numeric) AS d, sum((e->>'calls')::bigint) AS n
                FROM jsonb_array_elements(costs || jsonb_build_array(jsonb_build_object(
                    'key_type', $MODEL::text, 'input_tokens', $IN, 'output_tokens', $OUT,
                    'cached_input_tokens', $CACHED, 'usd_cost', $USD, 'calls', $CALLS))) AS e
                GROUP BY 1
            ) AS merged
        ),"""


@dataclass(frozen=True)
class StepWrite:
    """The audit row of one step attempt (``model`` and ``usage`` for a model call)."""

    seq: int
    attempt: int
    node_id: str | None
    kind: str
    name: str | None
    status: str
    input: Any
    output: Any
    error: dict[str, Any] | None
    duration: float


@dataclass(frozen=True)
class RunWrite:
    """How the run moves at a checkpoint.

    ``inbox_seen`` is the run's delivery count as of the inbox the step saw (a wait for an event
    is due at once when the row's count is higher); ``consumed`` lists the inbox rows the step
    used, consumed by this checkpoint; ``wake_parent`` is the loop's run, for a loop item
    (woken when the item ends). ``counter`` is the run's step counter as the worker knows
    it (the checkpoint is fenced on it; default: the step's number) and ``next_counter``
    what it becomes (default: one more when the step advances the run).
    """

    status: str
    status_reason: str | None
    state: dict[str, Any]
    output: Any
    error: dict[str, Any] | None
    advance: bool
    wake_after: float | None = None
    wake_at: datetime | None = None
    inbox_seen: int = 0
    consumed: tuple[int, ...] = ()
    wake_parent: UUID | None = None
    counter: int | None = None
    next_counter: int | None = None


@dataclass(frozen=True)
class ModelUsage:
    """A step's model calls: tokens, USD cost and how many calls, written on the step, the run
    and the workspace day."""

    model: str
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    usd_cost: float
    calls: int = 1


@dataclass(frozen=True)
class Effects:
    """A step's writes to the engine's own tables, made exactly once with its checkpoint.

    Attributes:
        tasks: task documents (``title``, ``description``, ``assignee``, ``due_at``, ``priority``,
            ``account_id``, ``metadata``, ``expires_at`` or ``expires_in`` seconds, optional ``id``).
        notifications: notification documents (``id``, ``channel``, ``recipient``,
            ``subject``, ``body``, ``kind``, ``account_id``, ``metadata``).
        approval: a request to a person (``id``, ``arguments_hash``, ``expires_in`` seconds;
            an agent's approval: ``tool``, ``arguments``; a user_input node's: ``kind``,
            ``node_id``, ``message``, ``spec``, ``assignees``, ``channels``, ``timeout_action``).
        usage: a model call's tokens and cost.
        children: a loop's items to insert as child runs (``item_index``, ``state``, ``released``).
        release: ``(loop step, index)``: let that loop's items below the index run.
        cancel_loops: loop steps whose unfinished items are canceled.
        events: lifecycle events to publish (``topic``, ``message_id``, ``data``).
    """

    tasks: list[dict[str, Any]] = field(default_factory=list)
    notifications: list[dict[str, Any]] = field(default_factory=list)
    approval: dict[str, Any] | None = None
    usage: ModelUsage | None = None
    children: list[dict[str, Any]] = field(default_factory=list)
    release: list[tuple[int, int]] = field(default_factory=list)
    cancel_loops: list[int] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


NO_EFFECTS = Effects()


@dataclass(frozen=True)
class Checkpointed:
    """A checkpoint that held: the run's new status, when due later how soon, its delivery
    count (higher than the step saw: something arrived meanwhile), the database's time, and
    a graph run's timers as stamped."""

    status: str
    due_in: float | None
    cancel_requested: bool
    inbox_seq: int = 0
    db_now: datetime | None = None
    timers: list[dict[str, Any]] | None = None


@functools.cache
def _statement(
    consume: bool,
    tasks: bool,
    notes: bool,
    approval: bool,
    usage: bool,
    loops: tuple[bool, bool, bool, bool] = (False, False, False, False),
    events: bool = False,
) -> str:
    """The checkpoint with only the parts this step needs (the common step needs none);
    ``loops``: children, release, cancel, wake the parent."""
    sql, number = _CHECKPOINT, 26
    parts = ""
    children, release, cancel, parent = loops
    for wanted, fragment, marker in (
        (consume, _CONSUME, "$ROWS"),
        (tasks, _TASKS, "$TASKS"),
        (notes, _NOTIFICATIONS, "$NOTES"),
        (approval, _APPROVAL, "$APPROVAL"),
        (children, _CHILDREN, "$CHILDREN"),
        (release, _RELEASE, "$RELEASE"),
        (cancel, _CANCEL_LOOPS, "$CANCEL"),
        (parent, _WAKE_PARENT, "$PARENT"),
        (events, _EVENTS, "$EVENTS"),
    ):
        if wanted:
            parts += fragment.replace(marker, f"${number}")
            number += 1
    if usage:
        names = {"$MODEL": number, "$IN": number + 1, "$OUT": number + 2, "$CACHED": number + 3}
        names["$USD"], names["$CALLS"] = number + 4, number + 5
        run_usage, workspace_usage = _RUN_USAGE, _WORKSPACE_USAGE
        for marker, n in sorted(names.items(), key=lambda kv: -len(kv[0])):
            cast = {"$USD": "::numeric", "$MODEL": "::text", "$CALLS": "::int"}.get(marker, "::bigint")
            run_usage = run_usage.replace(marker, f"${n}{cast}")
            workspace_usage = workspace_usage.replace(marker, f"${n}{cast}")
        sql = sql.replace("$USAGE", run_usage)
        sql = sql.replace(
            "$STEP_USAGE_COLUMNS", ", model, input_tokens, output_tokens, cached_input_tokens, usd_cost"
        )
        step_values = ", " + ", ".join(
            f"${number + i}::{t}" for i, t in enumerate(("text", "bigint", "bigint", "bigint", "numeric"))
        )
        sql = sql.replace("$STEP_USAGE_VALUES", step_values)
        parts += workspace_usage
    else:
        sql = sql.replace("$USAGE", "").replace("$STEP_USAGE_COLUMNS", "").replace("$STEP_USAGE_VALUES", "")
    if cancel:  # the items of nested loops are found recursively
        sql = sql.replace("WITH r AS (", "WITH RECURSIVE r AS (", 1)
    return sql.rstrip() + parts + "\nSELECT * FROM r"


async def checkpoint(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    run_id: UUID,
    token: int,
    owner: str,
    run: RunWrite,
    step: StepWrite,
    effects: Effects = NO_EFFECTS,
) -> Checkpointed | None:
    """Record a step, move the run and apply the step's effects in one statement, fenced on
    ``token``.

    Returns None when the lease was lost: nothing was written.
    """
    args: list[Any] = [
        workspace_id, run_id, token, owner,
        run.status, run.status_reason, run.state, run.output, run.error, int(run.advance),
        run.wake_after, run.wake_at,
        step.seq, step.attempt, step.node_id, step.kind, step.name, step.status,
        step.input, step.output, step.error, step.duration, run.inbox_seen,
    ]  # fmt: skip
    expected = step.seq if run.counter is None else run.counter
    args += [expected, expected + int(run.advance) if run.next_counter is None else run.next_counter]
    if run.consumed:
        args.append(list(run.consumed))
    if effects.tasks:
        args.append(effects.tasks)
    if effects.notifications:
        args.append(effects.notifications)
    if effects.approval is not None:
        args.append(effects.approval)
    if effects.children:
        args.append(effects.children)
    if effects.release:
        args.append([list(pair) for pair in effects.release])
    if effects.cancel_loops:
        args.append(effects.cancel_loops)
    if run.wake_parent is not None:
        args.append(run.wake_parent)
    if effects.events:
        args.append(effects.events)
    usage = effects.usage
    if usage is not None:
        args += [usage.model, usage.input_tokens, usage.output_tokens, usage.cached_input_tokens]
        args += [Decimal(str(round(usage.usd_cost, 6))), usage.calls]
    loops = (
        bool(effects.children),
        bool(effects.release),
        bool(effects.cancel_loops),
        run.wake_parent is not None,
    )
    sql = _statement(
        bool(run.consumed), bool(effects.tasks), bool(effects.notifications), effects.approval is not None,
        usage is not None, loops, bool(effects.events),
    )  # fmt: skip
    row = await pool.fetchrow(sql, *args)
    if row is None:
        return None
    return Checkpointed(
        row["status"], row["due_in"], row["cancel_requested"], row["inbox_seq"], row["db_now"], row["timers"]
    )
