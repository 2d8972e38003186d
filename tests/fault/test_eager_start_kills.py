"""An eager start whose process dies (kill -9) before the run's first step: the run, inserted
held by that process's worker, is rescued once its lease expires, and each node runs once.

The starting process (a real subprocess: an engine with ``eager_start`` and its own worker) is
armed to kill itself as the run's first step begins (failpoint ``before_step``). It starts the
run through its engine (an API start), or its worker's dispatcher starts it for an event the
process published. The eager
insert began the run, so the death counts as a step cut off (``rescues``), never as a load that
failed. The negative control checks the kill really stranded the run: until the lease expires
nobody takes it, held by the dead owner with no step recorded, and it completes only once
another worker rescues it.
"""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from agentflow.bench.tools import NOOP
from agentflow.core.records import RunRecord
from agentflow.engine import Engine
from agentflow.store import runs
from tests.conftest import make_settings

pytestmark = pytest.mark.fault

LEASE_TTL = 2.0
FLOW = {
    "name": "eager_kill",
    "kind": "structured",
    "trigger": {"topics": ["eager.kill"]},
    "nodes": [{"id": n, "type": "tool", "tool": NOOP} for n in ("one", "two", "three")],
}
STARTER = """
import asyncio, sys
import agentflow.bench.tools
from agentflow.engine import Engine
from agentflow.settings import Settings

async def main() -> None:
    settings = Settings(database_url=sys.argv[1], eager_start=True, lease_ttl=float(sys.argv[2]),
                        pool_min_size=1, pool_max_size=4)
    engine = await Engine.connect(settings, migrate_schema=False)
    by_event = sys.argv[3] == "event"
    worker = engine.worker(concurrency=2, dispatch=by_event)
    task = asyncio.create_task(worker.run())
    await worker.wait_until_running()
    if by_event:  # the worker's dispatcher starts the run
        await engine.events.publish([{"topic": "eager.kill", "message_id": "k1", "data": {}}])
    else:
        run = await engine.start_run("eager_kill")
        print(run.id, run.status.value, run.lease_owner, flush=True)
    await task  # the first step's failpoint kills this process

asyncio.run(main())
"""


@pytest.mark.parametrize("way", ["api", "event"])
async def test_a_run_started_eagerly_by_a_process_that_dies_is_rescued_once(
    database_url: str, way: str
) -> None:
    engine = await Engine.connect(make_settings(database_url, lease_ttl=LEASE_TTL), migrate_schema=False)
    try:
        await engine.publish_workflow(FLOW)
        env = {**os.environ, "AGENTFLOW_FAILPOINTS": "before_step"}
        starter = await asyncio.create_subprocess_exec(
            sys.executable, "-c", STARTER, database_url, str(LEASE_TTL), way,
            stdout=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(starter.communicate(), 60)
        assert starter.returncode == -9, out  # killed by its failpoint
        if way == "api":
            run_id, status, owner = out.decode().split()
            assert status == "in_progress" and owner != "None"  # started held, eagerly
        else:
            [started] = await engine.list_runs(workflow="eager_kill")
            run_id, owner = str(started.id), started.lease_owner
            assert owner is not None and started.started_at == started.created_at  # held at insert

        # Negative control: the dead process stranded it, held and begun, with no step.
        stranded = await engine.get_run(run_id)
        assert stranded.status.value == "in_progress" and stranded.lease_owner == owner
        assert stranded.fencing_token == 1 and await engine.list_steps(run_id) == []

        # The eager insert began the run: once the lease expired, a claim counts the death as
        # a step cut off (with no rescue left, that claim fails the run saying so; rolled back).
        verdict = await claim_once_lapsed(engine, max_rescues=0)
        assert verdict.status.value == "failed" and verdict.error is not None
        assert verdict.error["details"] == {"while_step_ran": 1, "before_step_began": 0}

        worker = engine.worker(concurrency=2, dispatch=False)
        task = asyncio.create_task(worker.run())
        try:
            done = await engine.wait_for_run(run_id, timeout=60)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 15)
        assert done.status.value == "completed", done.error
        steps = await engine.list_steps(run_id)
        assert [s.node_id for s in steps] == ["one", "two", "three"]  # each once
        assert {s.worker for s in steps} == {worker.name}
        assert {s.fencing_token for s in steps} == {2}  # all under the rescuing claim
    finally:
        await engine.close()


async def claim_once_lapsed(engine: Engine, *, max_rescues: int) -> RunRecord:
    """What a claim makes of the lapsed run, in a transaction rolled back afterwards."""
    async with asyncio.timeout(30), engine.db.pool.acquire() as connection:
        while True:
            transaction = connection.transaction()
            await transaction.start()
            try:
                claimed = await runs.claim(connection, "probe", 1, LEASE_TTL, max_rescues)
            finally:
                await transaction.rollback()
            if claimed:
                return claimed[0].run
            await asyncio.sleep(0.1)
