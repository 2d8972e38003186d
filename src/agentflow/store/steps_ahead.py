"""Steps written ahead of their run's row: a step that only moves its run on, as one row.

A checkpoint writes two rows, the run's and the step's, and on PostgreSQL that commit costs
about 1.5x a one-row insert (benchmarks/README.md). A step that completed on its first
attempt and only moves its run on (still in progress, nothing else to write, no timers or
loops) needs just its own row: it holds the state the run reached. ``write_ahead`` inserts it
fenced on the lease as a checkpoint is, holding the run's row with ``FOR KEY SHARE`` until it
commits: a claim that moves the lease (``FOR UPDATE``) waits for it or skips the run, and one
that got there first leaves this insert nothing to write.

The run's row meanwhile keeps the state and the step counter of its last full checkpoint, and
the newest completed step at or past that counter is where the run stands (every other
completed step is below it). The worker's next full checkpoint is fenced on the row's counter
and catches the row up; a claim reads the steps ahead (``caught_up``); a run that stops being
in progress otherwise is caught up by a trigger (migration 0039); a reader of running runs
that must not lag reads ``caught_up`` or ``all_caught_up`` too (the engine's run reads do).
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.agent_state import WorkspaceSpend
from agentflow.core.records import RunRecord
from agentflow.core.statuses import RunStatus
from agentflow.store import checkpoint_sql as sql_parts
from agentflow.store.checkpoints import Checkpointed, ModelUsage, StepWrite
from agentflow.store.commit_groups import RowFetcher

STRETCH = 64
"""Steps written ahead of a run's row at most between two full checkpoints: a catch-up looks
no further past the row's counter (migration 0039's trigger says the same number)."""

_WRITE_AHEAD = """
WITH r AS (
    -- IS TRUE: found by its key, not through runs_by_status (see checkpoint_sql.CHECKPOINT).
    SELECT workspace_id, id, status, cancel_requested, inbox_seq FROM runs
    WHERE workspace_id = $1 AND id = $2 AND fencing_token = $3 AND lease_owner = $4
      AND (status = 'in_progress') IS TRUE AND step_seq = $5::int
    FOR KEY SHARE
), s AS (
    INSERT INTO run_steps (workspace_id, run_id, seq, attempt, node_id, kind, name, status,
                           input, output, idempotency_key, worker, fencing_token,
                           started_at, finished_at, state)
    SELECT r.workspace_id, r.id, $6::int, $7, $8, $9, $10, 'completed', $11, $12,
           r.id::text || ':' || $6::int, $4, $3, now() - make_interval(secs => $13), now(), $14::jsonb
    FROM r
)
SELECT r.workspace_id, r.id, r.status, r.cancel_requested, r.inbox_seq, now() AS db_now FROM r
"""
# A model node's step ahead: its row with its model call's usage ($15-$20), counted on the
# workspace's day in the same commit (the run's totals follow with its row, migration 0040),
# answering the day's spend as a full checkpoint does (the next call's budget check uses it).
_WRITE_AHEAD_USED = (
    _WRITE_AHEAD.replace(
        ", state)",
        ", state, model, input_tokens, output_tokens,\n"
        "                           cached_input_tokens, usd_cost)",
    )
    .replace("$14::jsonb\n", "$14::jsonb, $15, $16, $17, $18, $19\n")
    .replace(
        "\n)\nSELECT",
        "\n)"
        + sql_parts.WORKSPACE_USAGE.replace("$IN", "$16")
        .replace("$OUT", "$17")
        .replace("$CACHED", "$18")
        .replace("$USD", "$19")
        .replace("$CALLS", "$20::int")
        + "\nSELECT",
    )
    .replace("AS db_now FROM r", "AS db_now" + sql_parts.SPEND_COLUMNS + "\nFROM r" + sql_parts.SPEND_JOIN)
)


async def write_ahead(
    pool: RowFetcher,
    workspace_id: UUID,
    run_id: UUID,
    token: int,
    owner: str,
    counter: int,
    step: StepWrite,
    state: dict[str, Any],
    usage: ModelUsage | None = None,
) -> Checkpointed | None:
    """Write ``step`` (completed, leaving the run in ``state``) as its row alone, fenced on
    ``token`` and on ``counter``, the step counter the run's row holds; with ``usage`` (one
    model call), on its row and on the workspace's day.

    ``pool`` may be a ``CommitGroup``. Returns what a checkpoint that leaves the run in
    progress returns (with ``usage``, the day's spend), or None when the lease was lost:
    nothing was written.
    """
    args: list[Any] = [
        workspace_id, run_id, token, owner, counter,
        step.seq, step.attempt, step.node_id, step.kind, step.name, step.input, step.output,
        step.duration, state,
    ]  # fmt: skip
    if usage is not None:
        args += [usage.model, usage.input_tokens, usage.output_tokens, usage.cached_input_tokens]
        args += [Decimal(str(round(usage.usd_cost, 6))), usage.calls]
    row = await pool.fetchrow(_WRITE_AHEAD if usage is None else _WRITE_AHEAD_USED, *args)
    if row is None:
        return None
    spend: WorkspaceSpend | None = None
    if usage is not None:
        spend = (row["spend_usd"], row["spend_tokens"], row["daily_usd"], row["daily_tokens"])
    return Checkpointed(
        row["status"], None, row["cancel_requested"], row["inbox_seq"], row["db_now"], spend=spend
    )


# Each run's newest step looked up on its own (an index scan backwards from the end of its
# stretch): as a join of the runs with every completed step, the plan read all the workspace's
# completed steps on every call (5 ms at 12,000 steps; resumed runs waited behind it).
# With the usage of the model calls among those steps (``u``: the run's totals lack it until
# the row catches up), looked up only for a run with steps ahead.
_NEWEST_AHEAD_OF_EACH = f"""
SELECT r.id AS run_id, s.seq, s.state, u.n, u.i, u.o, u.c, u.d,
       agentflow_merged_costs(NULL, u.costs) AS costs
FROM unnest($2::uuid[], $3::int[]) AS r(id, counter)
CROSS JOIN LATERAL (
    SELECT s.seq, s.state FROM run_steps s
    WHERE s.workspace_id = $1 AND s.run_id = r.id AND s.status = 'completed'
      AND s.seq >= r.counter AND s.seq < r.counter + {STRETCH}
    ORDER BY s.seq DESC
    LIMIT 1
) s
CROSS JOIN LATERAL (
    SELECT count(*) AS n, sum(m.input_tokens) AS i, sum(m.output_tokens) AS o,
           sum(m.cached_input_tokens) AS c, sum(m.usd_cost) AS d,
           jsonb_agg(jsonb_build_object(
               'key_type', m.model, 'input_tokens', m.input_tokens, 'output_tokens', m.output_tokens,
               'cached_input_tokens', m.cached_input_tokens, 'usd_cost', m.usd_cost, 'calls', 1)) AS costs
    FROM run_steps m
    WHERE m.workspace_id = $1 AND m.run_id = r.id AND m.status = 'completed'
      AND m.seq >= r.counter AND m.seq <= s.seq AND m.model IS NOT NULL
) u
"""


async def all_caught_up(pool: asyncpg.Pool, workspace_id: UUID, found: list[RunRecord]) -> list[RunRecord]:
    """``found`` (runs of one workspace) with each running run as ``caught_up`` tells it, in one
    read, and only when some run is in progress."""
    running = [r for r in found if r.status == RunStatus.IN_PROGRESS]
    if not running:
        return found
    rows = await pool.fetch(
        _NEWEST_AHEAD_OF_EACH, workspace_id, [r.id for r in running], [r.step_seq for r in running]
    )
    newest = {row["run_id"]: row for row in rows}
    return [_moved(run, newest[run.id]) if run.id in newest else run for run in found]


async def caught_up(pool: asyncpg.Pool, run: RunRecord) -> RunRecord:
    """``run`` as its steps say it stands: with the state and the counter of the newest step
    written ahead of its row, if any (an in-progress run's row may lag its steps); ``run``
    itself otherwise, and without a read when it is not in progress."""
    [caught] = await all_caught_up(pool, run.workspace_id, [run])
    return caught


def _moved(run: RunRecord, newest: asyncpg.Record) -> RunRecord:
    """``run`` moved on to the step ``newest`` (its ``seq`` and ``state``), with the usage of
    the model calls up to it (``n`` of them) on its totals."""
    state = run.state if newest["state"] is None else newest["state"]
    moved = replace(run, state=state, step_seq=newest["seq"] + 1, attempt=0)
    if not newest["n"]:
        return moved
    return replace(
        moved,
        input_tokens=run.input_tokens + newest["i"],
        output_tokens=run.output_tokens + newest["o"],
        cached_input_tokens=run.cached_input_tokens + newest["c"],
        usd_cost=run.usd_cost + newest["d"],
        costs=_merged(run.costs or [], newest["costs"]),
    )


def _merged(costs: list[dict[str, Any]], added: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``costs`` (a run's per-model breakdown) with ``added`` entries merged in by key_type, as
    migration 0040's ``agentflow_merged_costs`` merges them."""
    merged: dict[str, dict[str, Any]] = {}
    for entry in [*costs, *added]:
        into = merged.setdefault(entry["key_type"], {"key_type": entry["key_type"]})
        for name in ("input_tokens", "output_tokens", "cached_input_tokens", "calls"):
            into[name] = into.get(name, 0) + int(entry.get(name) or 0)
        into["usd_cost"] = round(float(into.get("usd_cost", 0)) + float(entry.get("usd_cost") or 0), 6)
    return [merged[key] for key in sorted(merged)]
