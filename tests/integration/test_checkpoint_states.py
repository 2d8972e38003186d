"""The state a checkpoint leaves, on the run and on the step's own row: the statement without
timers (the common step) and the one that stamps a graph run's new timers must write the
same thing in both places, as a rerun from a step starts from that step's row."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.engine import Engine
from agentflow.runtime.worker import Worker
from agentflow.store import checkpoints
from tests.integration.test_graph_runs import branch_with_a_wait, echo


async def _step_states(engine: Engine, run_id: UUID) -> list[tuple[str, dict[str, Any] | None]]:
    rows = await engine.db.pool.fetch(
        "SELECT node_id, state FROM run_steps WHERE run_id = $1 AND status = 'completed' ORDER BY seq", run_id
    )
    return [(row["node_id"], row["state"]) for row in rows]


async def test_an_untimed_checkpoint_leaves_its_state_on_the_run_and_the_step(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(
        {"name": "plain-chain", "kind": "structured", "nodes": [echo("a", 1), echo("b", 2), echo("c", 3)]}
    )
    run = await engine.start_run("plain-chain")
    done = await engine.wait_for_run(run.id, timeout=20)
    assert done.status == "completed", done.error
    states = await _step_states(engine, run.id)
    assert [node for node, _ in states] == ["a", "b", "c"]
    assert all(state is not None and "timers" not in state for _, state in states)
    assert states[-1][1] == done.state, "the last step's row holds the state the run ended with"
    assert len({repr(state) for _, state in states}) == 3, "each step's row holds its own state"


async def test_a_timed_checkpoint_stamps_the_timers_on_the_run_and_the_step_alike(
    engine: Engine, worker: Worker
) -> None:
    await engine.publish_workflow(branch_with_a_wait("timed-branch", "2s"))
    run = await engine.start_run("timed-branch")
    for _ in range(100):
        mid = await engine.get_run(run.id)
        if mid.status == "waiting":
            break
        await asyncio.sleep(0.05)
    assert mid.status == "waiting", mid.status
    timers = mid.state["timers"]
    assert [t["from"] for t in timers] == ["nap"] and "at" in timers[0] and "secs" not in timers[0]
    stamped = [state for _, state in await _step_states(engine, run.id) if state and "timers" in state]
    assert stamped, "the step that set the timer keeps the state with it"
    assert stamped[-1]["timers"] == timers, "the step's row has the timer as the database stamped it"
    done = await engine.wait_for_run(run.id, timeout=20)
    assert done.status == "completed", done.error


def test_only_a_state_with_timers_pays_for_stamping_them() -> None:
    untimed, timed = checkpoints._statement(timers=False), checkpoints._statement(timers=True)
    assert "jsonb_set" not in untimed and "state_after" not in untimed
    assert "jsonb_set" in timed and "r.state_after" in timed
    assert "$STATE" not in untimed + timed and "$STEP_STATE" not in untimed + timed
