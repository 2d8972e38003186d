"""A checkpoint that leaves its run in progress (the common step) names only the columns it
changes: not the status, the lease or due_at, so the row's ``AFTER UPDATE OF status`` trigger
is not reached, and its statement takes only the parameters it uses. A checkpoint that moves
the run elsewhere (waiting, completed, failed) still names them all."""

from __future__ import annotations

import inspect
import re
from uuid import UUID

import pytest

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.engine import Engine
from agentflow.runtime.worker import Worker
from agentflow.store import agent_reads, checkpoints, runs
from tests.integration.test_graph_runs import echo

# A trigger of the test's own that counts, per run, every update naming runs.status.
COUNTER = """
CREATE TABLE status_updates (run_id uuid, old_status text, new_status text);
CREATE FUNCTION count_status_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO status_updates VALUES (NEW.id, OLD.status, NEW.status);
    RETURN NULL;
END $$;
CREATE TRIGGER count_status_update AFTER UPDATE OF status ON runs
    FOR EACH ROW EXECUTE FUNCTION count_status_update();
"""
UNCOUNT = """
DROP TRIGGER count_status_update ON runs;
DROP FUNCTION count_status_update();
DROP TABLE status_updates;
"""


@pytest.fixture
async def counted(engine: Engine) -> object:
    await engine.db.pool.execute(COUNTER)
    yield
    await engine.db.pool.execute(UNCOUNT)


async def _updates(engine: Engine, run_id: UUID) -> list[tuple[str, str]]:
    rows = await engine.db.pool.fetch(
        "SELECT old_status, new_status FROM status_updates WHERE run_id = $1", run_id
    )
    return [(row["old_status"], row["new_status"]) for row in rows]


async def test_steps_that_go_on_leave_the_status_unnamed_and_the_last_one_names_it(
    engine: Engine, counted: object, worker: Worker
) -> None:
    nodes = [echo(f"n{i}", i) for i in range(6)]
    await engine.publish_workflow({"name": "six-steps", "kind": "structured", "nodes": nodes})
    run = await engine.start_run("six-steps")
    done = await engine.wait_for_run(run.id, timeout=20)
    assert done.status == "completed", done.error
    steps = await engine.db.pool.fetchval("SELECT count(*) FROM run_steps WHERE run_id = $1", run.id)
    assert steps == 6
    # The claim moves it to in_progress and the last checkpoint to completed; the five
    # checkpoints between leave the status alone and do not reach the trigger.
    assert await _updates(engine, run.id) == [("created", "in_progress"), ("in_progress", "completed")]
    assert done.lease_owner is None and done.completed_at is not None


async def test_a_step_that_waits_still_moves_the_run_and_its_lease(
    engine: Engine, counted: object, worker: Worker
) -> None:
    nodes = [echo("a", 1), {"id": "nap", "type": "wait", "duration": "1s"}, echo("b", 2)]
    await engine.publish_workflow({"name": "nap-between", "kind": "structured", "nodes": nodes})
    run = await engine.start_run("nap-between")
    done = await engine.wait_for_run(run.id, timeout=20)
    assert done.status == "completed", done.error
    moves = await _updates(engine, run.id)
    assert ("in_progress", "waiting") in moves and moves[-1] == ("in_progress", "completed")
    assert len(moves) == 4, moves  # claim, wait, claim again, complete: no step in between


def test_a_going_on_statement_uses_every_parameter_it_is_given_and_no_other() -> None:
    for parts in (frozenset(), frozenset({"tasks", "events", "prior"})):
        for usage in (False, True):
            full = checkpoints._statement(parts, usage, timers=False)
            going_on = checkpoints._statement(parts, usage, timers=False, going_on=True)
            used_full = {int(n) for n in re.findall(r"\$(\d+)", full)}
            used = {int(n) for n in re.findall(r"\$(\d+)", going_on)}
            assert used == set(range(1, len(used_full) - len(checkpoints.GOING_ON_UNUSED) + 1))
            assert "status = $" not in going_on.split("WHERE")[0]
            assert "lease_owner =" not in going_on.split("WHERE")[0] and "due_at =" not in going_on


def test_renumbering_refuses_a_statement_that_still_uses_a_dropped_parameter() -> None:
    assert checkpoints._renumbered("SELECT $1, $3", (2,)) == "SELECT $1, $2"
    with pytest.raises(ValueError, match=r"still uses \$2"):
        checkpoints._renumbered("SELECT $1, $2", (2,))


async def _generic_plan(engine: Engine, statement: str) -> str:
    """The plan PostgreSQL caches for ``statement`` once it stops planning it per call, with
    the table's statistics taken while few of its runs are in progress and many then are
    (as in a busy worker's first minutes: W1 in benchmarks/README.md)."""
    count = max(int(n) for n in re.findall(r"\$(\d+)", statement))
    workflow = await engine.publish_workflow(
        {"name": "planned", "kind": "structured", "nodes": [echo("a", 1)]}
    )
    async with engine.db.pool.acquire() as conn:
        undone = conn.transaction()  # rolled back: the runs, the statistics and the plan go
        await undone.start()
        await conn.execute(
            "INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, input, state,"
            " completed_at) SELECT workspace_id, gen_random_uuid(), workflow_id, version, 'completed', '{}',"
            " '{}', now() FROM workflow_versions, generate_series(1, 400)"
            " WHERE workflow_id = $1 AND version = 1",
            workflow.workflow.id,
        )
        await conn.execute("ANALYZE runs")
        await conn.execute(
            "UPDATE runs SET status = 'in_progress', due_at = now() + interval '1 hour', completed_at = NULL"
            " WHERE id IN (SELECT id FROM runs WHERE workflow_id = $1 LIMIT 100)",
            workflow.workflow.id,
        )
        await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        await conn.execute(f"PREPARE looked_up AS {statement}")
        try:
            rows = await conn.fetch(f"EXPLAIN EXECUTE looked_up({', '.join(['NULL'] * count)})")
        finally:
            await undone.rollback()
            await conn.execute("DEALLOCATE looked_up")
    return "\n".join(row[0] for row in rows)


@pytest.mark.parametrize(
    "statement",
    [
        checkpoints._statement(timers=False),
        checkpoints._statement(timers=False, going_on=True),
        checkpoints._statement(frozenset({"tasks"}), True, going_on=True),
        runs._BEGIN,
        agent_reads._BEGUN_READS,
    ],
    ids=["checkpoint", "going-on", "going-on-with-usage", "begin", "begin-with-decision-reads"],
)
async def test_a_held_run_is_found_by_its_key_not_through_the_runs_in_progress(
    engine: Engine, statement: str
) -> None:
    assert "runs_by_status" not in await _generic_plan(engine, statement)


async def test_the_plain_status_condition_would_read_the_runs_in_progress(engine: Engine) -> None:
    # The control: the same lookup with a plain status condition, under the same statistics.
    plain = (
        "UPDATE runs SET began_token = $3 WHERE workspace_id = $1 AND id = $2 AND fencing_token = $3"
        " AND lease_owner = $4 AND status = 'in_progress' RETURNING id"
    )
    assert "runs_by_status" in await _generic_plan(engine, plain)


def test_release_looks_the_run_up_by_its_key() -> None:
    # The begins' statements are planned above; release's is written in place.
    assert inspect.getsource(runs.release).count("(status = 'in_progress') IS TRUE") == 1
