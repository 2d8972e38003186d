"""A worker killed (-9) after pure steps ran but before the checkpoint that writes them: the
run is rescued, the pure steps run again, and every node is recorded once, in order.

Steps of pure nodes (condition, mapping, ...) are written in the next step's commit. The
starting process (a real subprocess with its own worker) kills itself at its first
checkpoint (failpoint ``before_checkpoint``): by then the condition and the mapping have run
and the tool after them too, and nothing of the run is stored but its start. Once the lease
expires another worker takes the run from that start. The negative control rescues the run
with a worker whose checkpoint drops the pure steps it was given: the count must find them
missing.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

from agentflow.bench.tools import NOOP
from agentflow.engine import Engine
from tests.conftest import make_settings
from tests.support.agents import running_worker
from tests.support.kills import drop_prior_steps, kill_at_first_checkpoint

pytestmark = pytest.mark.fault

LEASE_TTL = 2.0
NODES = ["size", "small", "act", "shape", "done"]
FLOW = {
    "name": "pure_kill",
    "kind": "structured",
    "nodes": [
        {"id": "size", "type": "condition", "branches": [
            {"port": "big", "when": {"path": "payload.n", "op": "gt", "value": 10}}]},
        {"id": "small", "type": "mapping", "output": {"n": "{{ payload.n }}", "doubled": "{{ payload.n * 2 }}"}},
        {"id": "act", "type": "tool", "tool": NOOP},
        {"id": "shape", "type": "mapping", "output": {"doubled": "{{ steps.small.doubled }}"}},
        {"id": "done", "type": "finish", "output": "{{ input }}"},
    ],
    "edges": [
        {"from": "size", "port": "default", "to": "small"},
        {"from": "small", "to": "act"},
        {"from": "act", "to": "shape"},
        {"from": "shape", "to": "done"},
    ],
}  # fmt: skip
STARTER = """
import asyncio, sys
import agentflow.bench.tools
from agentflow.engine import Engine
from agentflow.settings import Settings

async def main() -> None:
    settings = Settings(database_url=sys.argv[1], lease_ttl=float(sys.argv[2]), pool_min_size=1, pool_max_size=4)
    engine = await Engine.connect(settings, migrate_schema=False)
    worker = engine.worker(concurrency=1, dispatch=False)
    task = asyncio.create_task(worker.run())
    run = await engine.start_run("pure_kill", {"n": 4})
    print(run.id, flush=True)
    await task  # the first checkpoint's failpoint kills this process

asyncio.run(main())
"""


async def strand(engine: Engine, database_url: str) -> UUID:
    """A run whose worker died with its pure steps and its tool step run, none written."""
    run_id = await kill_at_first_checkpoint(STARTER, database_url, LEASE_TTL)
    stranded = await engine.get_run(run_id)
    assert stranded.status.value == "in_progress" and stranded.lease_owner is not None
    assert stranded.step_seq == 0 and await engine.list_steps(run_id) == [], "no pure step written alone"
    return run_id


async def rescue(engine: Engine, run_id: UUID) -> tuple[Any, dict[str, int]]:
    """Let a worker of this process finish the run; its status and completed rows by node."""
    async with running_worker(engine, dispatch=False):
        done = await engine.wait_for_run(run_id, timeout=60)
    rows = await engine.db.pool.fetch(
        "SELECT node_id, count(*) AS n FROM run_steps WHERE run_id = $1 AND status = 'completed' GROUP BY node_id",
        run_id,
    )
    return done, {r["node_id"]: r["n"] for r in rows}


async def test_pure_steps_cut_off_by_a_kill_run_again_and_are_recorded_once(database_url: str) -> None:
    engine = await Engine.connect(make_settings(database_url, lease_ttl=LEASE_TTL), migrate_schema=False)
    try:
        await engine.publish_workflow(FLOW)
        run_id = await strand(engine, database_url)
        done, counted = await rescue(engine, run_id)
        assert done.status.value == "completed", done.error
        assert done.output == {"doubled": 8}
        assert counted == dict.fromkeys(NODES, 1)
        steps = await engine.list_steps(run_id)
        assert [s.node_id for s in steps] == NODES and [s.seq for s in steps] == [0, 1, 2, 3, 4]
        assert {s.fencing_token for s in steps} == {2}, "all under the rescuing claim"
    finally:
        await engine.close()


async def test_negative_control_a_checkpoint_that_drops_its_pure_steps_is_caught(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = await Engine.connect(make_settings(database_url, lease_ttl=LEASE_TTL), migrate_schema=False)
    try:
        await engine.publish_workflow(FLOW)
        run_id = await strand(engine, database_url)
        drop_prior_steps(monkeypatch)
        done, counted = await rescue(engine, run_id)
        assert done.status.value == "completed"
        missing = [node for node in NODES if counted.get(node, 0) != 1]
        assert missing == ["size", "small", "shape"], counted
    finally:
        await engine.close()
