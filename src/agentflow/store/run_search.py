"""Run search: one query for any combination of the run list's filters.

Only whitelisted columns and expressions go into the SQL; every value is a parameter.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.records import RunRecord
from agentflow.core.run_filters import RANGE_OPS, RunFilter

_EXACT = {
    "status": "status", "run_id": "id", "workflow_id": "workflow_id", "version": "workflow_version",
    "enrollment_key": "enrollment_key", "account_id": "account_id", "parent_run_id": "parent_run_id",
    # The conversation's fields, as the partial indexes runs_by_conversation and runs_by_channel
    # name them (the NOT NULL lets the planner use them).
    "conversation_id": "conversation IS NOT NULL AND conversation->>'id'",
    "channel": "conversation IS NOT NULL AND conversation->>'channel'",
    # The expression of the partial index runs_by_trigger_id (migration 0035).
    "trigger_id": "trigger IS NOT NULL"
                  " AND coalesce(trigger->'event'->>'message_id', trigger->>'scheduled_at')",
}  # fmt: skip
_RANGES = {
    "started": "started_at",
    "ended": "coalesce(completed_at, canceled_at)",
    "created": "created_at",
    "duration": "extract(epoch FROM coalesce(completed_at, canceled_at) - started_at) * 1000",
    "tokens": "(input_tokens + output_tokens)",
    "usd": "usd_cost",
}


async def search_runs(pool: asyncpg.Pool, workspace_id: UUID, wanted: RunFilter) -> list[RunRecord]:
    """Runs that match every filter of ``wanted``, newest first, one page. Loop items (and
    agent nodes' runs) are left out unless ``loop_of`` asks for a run's items; runs of other
    workflows that a run started (``run_workflow``) are listed."""
    args: list[Any] = [workspace_id]

    def arg(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    where = ["workspace_id = $1"]
    for name, value in wanted.exact.items():
        if name == "trigger":
            where.append("trigger IS NULL" if value == "manual" else f"trigger->>'source' = {arg(value)}")
        elif name == "model":  # called it at least once (the run's per-model costs name it)
            where.append(f"costs @> jsonb_build_array(jsonb_build_object('key_type', {arg(value)}::text))")
        elif name == "employee_id":  # runs of the employee with that id (none: not an employee)
            where.append(
                f"workflow_id = (SELECT id FROM workflows WHERE workspace_id = $1 AND id = {arg(value)}"
                " AND kind = 'employee')"
            )
        elif name == "employee":  # runs of the employee of that name
            where.append(
                f"workflow_id IN (SELECT id FROM workflows WHERE workspace_id = $1 AND kind = 'employee'"
                f" AND name = {arg(value)})"
            )
        else:
            where.append(f"{_EXACT[name]} = {arg(value)}")
    for key, value in wanted.state.items():
        where.append(f"state->'vars'->>{arg(key)} = {arg(value)}")
    for r in wanted.ranges:
        where.append(f"{_RANGES[r.field]} {RANGE_OPS[r.op]} {arg(r.value)}")
        if r.field == "ended":
            # Implied for a run that ended, and the expression runs_finished indexes: the
            # planner can read the range from it instead of every run.
            where.append(f"coalesce(completed_at, canceled_at, created_at) {RANGE_OPS[r.op]} ${len(args)}")
        if r.field in ("ended", "started") and r.op in ("lt", "lte"):
            # A run starts and ends after it was created: the newest runs that can match were
            # created before the bound, where the walk down runs_newest can begin.
            where.append(f"created_at {RANGE_OPS[r.op]} ${len(args)}")
    if wanted.loop_of is None:
        where.append("(parent_step IS NULL OR caller_node IS NOT NULL)")  # not parts of a run
    else:
        where.append(f"parent_run_id = {arg(wanted.loop_of)} AND parent_step IS NOT NULL")
    if wanted.before is not None:
        after = f"SELECT created_at, id FROM runs WHERE workspace_id = $1 AND id = {arg(wanted.before)}"
        where.append(f"(created_at, id) < ({after})")
    limit = arg(wanted.limit)
    sql = f"SELECT * FROM runs WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT {limit}"
    # The page's rows with what seed 002's list shows of their workflows: a few key lookups.
    sql = (
        f"WITH page AS ({sql}) SELECT page.*,"
        " CASE WHEN w.kind = 'employee' THEN page.workflow_id END AS employee_id, pw.name AS parent_workflow"
        " FROM page JOIN workflows w ON w.workspace_id = page.workspace_id AND w.id = page.workflow_id"
        " LEFT JOIN runs pr ON pr.workspace_id = page.workspace_id AND pr.id = page.parent_run_id"
        " LEFT JOIN workflows pw ON pw.workspace_id = pr.workspace_id AND pw.id = pr.workflow_id"
        " ORDER BY page.created_at DESC, page.id DESC"
    )
    rows = await pool.fetch(sql, *args)
    return [RunRecord.from_row(row) for row in rows]
