"""The claim finds ready runs through an index of ready runs, whatever the statistics say.

Queue tables change faster than their statistics: in W1 (benchmarks/README.md), 4,000 runs
became ready at once after the table was last analyzed, and the planner, guessing six ready
runs, read every run of the table and sorted the ready ones at each claim (3 ms a claim, 40 %
of PostgreSQL's time). An index whose predicate is a ready run's (``runs_ready``: no lease
holder, due) makes the index the cheaper plan under any estimate: few ready runs or many.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from uuid import UUID

import asyncpg
import pytest

from agentflow.engine import Engine
from agentflow.store import claims
from tests.integration.test_graph_runs import echo

CLAIMS = {
    "claim": claims._claim_for(16, telling=False, code=True),
    "claim-no-code": claims._claim_for(16, telling=False, code=False),
    "claim-telling": claims._claim_for(16, telling=True, code=True),
    "claim-telling-no-code": claims._claim_for(16, telling=True, code=False),
}
ARGS = "('w', 16, 30.0, 3, 10{telling})"
OLD_INDEX = "DROP INDEX runs_ready; CREATE INDEX runs_due_all ON runs (due_at) WHERE due_at IS NOT NULL"
"""The index the claim had before migration 0038 (the negative control)."""


@contextlib.asynccontextmanager
async def _stale_runs(engine: Engine, after: str = "") -> AsyncIterator[asyncpg.Connection]:
    """A connection inside a transaction where 1,500 of 2,000 runs turned ready after the
    table was analyzed while every one was held (rolled back afterwards: runs, statistics;
    then ``after`` runs, outside the transaction)."""
    workflow = await engine.publish_workflow(
        {"name": "planned", "kind": "structured", "nodes": [echo("a", 1)]}
    )
    async with engine.db.pool.acquire() as conn:
        undone = conn.transaction()
        await undone.start()
        try:
            await _stale_statistics(conn, workflow.workflow.id)
            yield conn
        finally:
            await undone.rollback()
            if after:
                await conn.execute(after)


async def _plan(engine: Engine, statement: str, *, generic: bool, before: str = "") -> str:
    """The claim's plan under ``_stale_runs``' statistics."""
    async with _stale_runs(engine, after="DEALLOCATE claiming") as conn:
        if before:
            await conn.execute(before)
        if generic:
            await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        await conn.execute(f"PREPARE claiming AS {statement}")
        telling = ", '{}'::uuid[], '{}'::uuid[]" if "told AS" in statement else ""
        rows = await conn.fetch(f"EXPLAIN EXECUTE claiming{ARGS.format(telling=telling)}")
    return "\n".join(row[0] for row in rows)


async def _stale_statistics(conn: asyncpg.Connection, workflow_id: UUID) -> None:
    execute = conn.execute
    # Analyzed while every run was held (by a worker that has since been gone a while)...
    await execute(
        "INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, input, state,"
        " lease_owner, lease_expires_at, due_at) SELECT workspace_id, gen_random_uuid(), workflow_id,"
        " version, 'in_progress', '{}', '{}', 'gone', now() - interval '1 minute', now() - interval '1 minute'"
        " FROM workflow_versions, generate_series(1, 2000) WHERE workflow_id = $1 AND version = 1",
        workflow_id,
    )
    await execute("ANALYZE runs")
    # ... then most became ready.
    await execute(
        "UPDATE runs SET status = 'created', lease_owner = NULL, lease_expires_at = NULL"
        " WHERE id IN (SELECT id FROM runs WHERE workflow_id = $1 LIMIT 1500)",
        workflow_id,
    )


@pytest.mark.parametrize("generic", [False, True], ids=["custom-plan", "generic-plan"])
@pytest.mark.parametrize("name", list(CLAIMS))
async def test_the_claim_reads_ready_runs_through_their_index(
    engine: Engine, name: str, generic: bool
) -> None:
    plan = await _plan(engine, CLAIMS[name], generic=generic)
    ready = _section(plan, "CTE ready")
    # Of runs: a claim for a worker with code steps off may also scan the few versions that
    # need code (workflow_versions, whichever way its statistics say; it failed here once
    # when a lane's earlier tests had left them analyzed one way), which is not what this is about.
    assert "Index Scan using runs_ready" in ready and "Seq Scan on runs" not in ready, plan
    # The claimed rows are found by their physical address, not by reading the table.
    assert "Tid Scan on runs r" in plan and "Seq Scan on runs" not in plan, plan


async def test_with_one_index_of_every_due_run_the_claim_reads_the_whole_table(engine: Engine) -> None:
    # The control: the index of every due run (held ones too) under the same statistics.
    plan = await _plan(engine, CLAIMS["claim"], generic=False, before=OLD_INDEX)
    assert "Seq Scan on runs" in _section(plan, "CTE ready"), plan


def _section(plan: str, heading: str) -> str:
    """The lines of ``plan`` under ``heading`` (more indented than it)."""
    lines = plan.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == heading)
    indent = len(lines[start]) - len(lines[start].lstrip())
    body = []
    for line in lines[start + 1 :]:
        if len(line) - len(line.lstrip()) <= indent:
            break
        body.append(line)
    return "\n".join(body)


async def _plans_made(
    engine: Engine, statement: str, claiming: Callable[[asyncpg.Connection], Awaitable[object]]
) -> asyncpg.Record:
    """Generic and custom plans PostgreSQL made for a claim sent eight times on one connection,
    under ``_stale_runs``' statistics."""
    async with _stale_runs(engine) as conn:
        try:
            for _ in range(8):
                await claiming(conn)
            row = await conn.fetchrow(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1",
                statement,
            )
        finally:
            await conn.reload_schema_state()  # its prepared statements go: the next test plans afresh
    assert row is not None
    return row


async def test_a_connection_plans_the_claim_once_and_keeps_the_plan(engine: Engine) -> None:
    statement = claims._claim_for(4, telling=False, code=True)
    made = await _plans_made(engine, statement, lambda conn: claims.claim(conn, "w", 3, 30.0, 3))  # type: ignore[arg-type]
    assert made["generic_plans"] >= 1, dict(made)
    assert made["custom_plans"] <= 5, dict(made)


async def test_with_the_limit_a_parameter_every_claim_is_planned_anew(engine: Engine) -> None:
    # The control: the same statement with its limit as a parameter, as the claim had it.
    statement = claims._CLAIM.replace("$BUCKET", "$2")
    made = await _plans_made(engine, statement, lambda conn: conn.fetch(statement, "w", 3, 30.0, 3, 10))
    assert made["generic_plans"] == 0 and made["custom_plans"] == 8, dict(made)
