"""A worker killed (-9) while its run's row lags the steps it wrote ahead of it: the rescuing
claim catches up from the steps, runs none of them again, and every step is recorded once.

A step that only moves its run on is written as its row alone (``store.steps_ahead``); the
run's row keeps its last full checkpoint, or what its claim found (a new run's row is current
then, with no rescue counts to reset: its steps go ahead from the first). The starting process
(a real subprocess with its own worker) runs a chain whose fifth step kills it: by then steps
0-3 are written ahead and the row still says step 0. Once the lease expires a worker of this
process takes the run. The negative control rescues with a claim that does not catch up: it
runs step 0 again, which the one-completed-row-per-step index refuses, every time, until the
run fails ``worker_lost``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any
from uuid import UUID

import pytest

import agentflow
from agentflow.bench.tools import NOOP
from agentflow.engine import Engine
from agentflow.store import steps_ahead
from tests.conftest import make_settings
from tests.support.agents import running_worker

pytestmark = pytest.mark.fault

LEASE_TTL = 2.0
SWITCH = "ahead_kill_switch"
NODES = ["s0", "s1", "s2", "s3", "kill", "s5", "s6"]
FLOW = {
    "name": "ahead_kill",
    "kind": "structured",
    "nodes": [{"id": n, "type": "tool", "tool": SWITCH if n == "kill" else NOOP} for n in NODES],
}
STARTER = f"""
import asyncio, os, signal, sys
import agentflow, agentflow.bench.tools
import agentflow.runtime.pure_steps as pure_steps
from agentflow.engine import Engine
from agentflow.settings import Settings

pure_steps.AHEAD_SECS = 60.0  # a loaded machine must not end the stretch before the kill

@agentflow.tool(name={SWITCH!r})
async def switch() -> None:
    os.kill(os.getpid(), signal.SIGKILL)

async def main() -> None:
    settings = Settings(database_url=sys.argv[1], lease_ttl=float(sys.argv[2]), pool_min_size=1, pool_max_size=4)
    engine = await Engine.connect(settings, migrate_schema=False)
    worker = engine.worker(concurrency=1, dispatch=False)
    task = asyncio.create_task(worker.run())
    run = await engine.start_run("ahead_kill")
    print(run.id, flush=True)
    await task  # the kill switch kills this process

asyncio.run(main())
"""
SWITCHED: list[int] = []


@agentflow.tool(name=SWITCH)
async def harmless_switch() -> None:
    """The rescuing worker's kill switch: it only counts."""
    SWITCHED.append(1)


async def strand(engine: Engine, database_url: str) -> UUID:
    """A run whose worker died at its fifth step, its row four steps behind the steps written."""
    starter = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        STARTER,
        database_url,
        str(LEASE_TTL),
        stdout=asyncio.subprocess.PIPE,
        env=os.environ,
    )
    out, _ = await asyncio.wait_for(starter.communicate(), 60)
    assert starter.returncode == -9, out  # killed by its kill switch
    run_id = UUID(out.decode().split()[0])
    row = await engine.db.pool.fetchrow("SELECT status, step_seq, state FROM runs WHERE id = $1", run_id)
    assert row is not None and row["status"] == "in_progress"
    assert row["step_seq"] == 0, "the row keeps what the claim found"
    assert [s.seq for s in await engine.list_steps(run_id)] == [0, 1, 2, 3], "steps 0-3 were written ahead"
    return run_id


async def rescue(engine: Engine, run_id: UUID) -> tuple[Any, dict[int, list[int]]]:
    """Let a worker of this process take the run; its end and each step's fencing tokens."""
    async with running_worker(engine, dispatch=False):
        done = await engine.wait_for_run(run_id, timeout=60)
    rows = await engine.db.pool.fetch(
        "SELECT seq, array_agg(fencing_token) AS tokens FROM run_steps WHERE run_id = $1 AND status = 'completed'"
        " GROUP BY seq ORDER BY seq",
        run_id,
    )
    return done, {r["seq"]: list(r["tokens"]) for r in rows}


async def test_steps_written_ahead_survive_a_kill_and_run_once(database_url: str) -> None:
    engine = await Engine.connect(make_settings(database_url, lease_ttl=LEASE_TTL), migrate_schema=False)
    SWITCHED.clear()
    try:
        await engine.publish_workflow(FLOW)
        run_id = await strand(engine, database_url)
        done, tokens = await rescue(engine, run_id)
        assert done.status.value == "completed", done.error
        assert done.step_seq == len(NODES)
        first = tokens[0][0]
        assert tokens == {seq: [first if seq < 4 else first + 1] for seq in range(len(NODES))}, (
            "steps 0-3 kept from the dead worker, 4-6 by the rescuing claim, each once"
        )
        assert SWITCHED == [1], "only the step the kill cut off ran again"
    finally:
        await engine.close()


async def test_negative_control_a_claim_that_does_not_catch_up_runs_a_written_step_again(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def stale(_pool: Any, run: Any) -> Any:
        return run

    engine = await Engine.connect(
        make_settings(database_url, lease_ttl=LEASE_TTL, max_rescues=1), migrate_schema=False
    )
    try:
        await engine.publish_workflow(FLOW)
        run_id = await strand(engine, database_url)
        monkeypatch.setattr(steps_ahead, "caught_up", stale)
        done, tokens = await rescue(engine, run_id)
        assert done.status.value == "failed" and done.status_reason == "worker_lost", done
        assert tokens == {seq: [tokens[0][0]] for seq in range(4)}, (
            "step 0, written once, was refused a second row; no step ran past the written ones"
        )
    finally:
        await engine.close()
