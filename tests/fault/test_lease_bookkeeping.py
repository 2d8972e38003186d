"""A live worker whose own lease lapsed (missed heartbeats) and that re-claims the run itself.

The heartbeat connection fails for 1.6 s (a network blip) while a step that needs
heartbeats runs (2.5 s, lease TTL 1 s). The lease lapses, the same worker's claim loop
rescues the run (a second driver, newer token) while the first driver is still in its
step. The first driver's checkpoint is then fenced off, as it must be; from then on the
run should be driven by the second driver alone and complete after this one rescue.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agentflow.core.tools import ToolRegistry, build_spec
from agentflow.engine import Engine
from agentflow.runtime.worker import Worker
from agentflow.store import runs
from tests.conftest import make_settings

pytestmark = pytest.mark.fault


async def long_step(seconds: float) -> dict[str, float]:
    """A step longer than the lease: it needs heartbeats."""
    await asyncio.sleep(seconds)
    return {"slept": seconds}


@pytest.mark.timeout(60)
async def test_worker_that_reclaims_its_own_lapsed_run_keeps_heartbeating_it(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(database_url, lease_ttl=1.0, poll_interval=0.1, max_rescues=3)
    registry = ToolRegistry()
    registry.register(build_spec(long_step))
    real_heartbeat = runs.heartbeat
    blip_until = time.monotonic() + 1.6

    async def flaky_heartbeat(*args: Any, **kwargs: Any) -> set[Any]:
        if time.monotonic() < blip_until:
            raise OSError("simulated network blip on the heartbeat connection")
        return await real_heartbeat(*args, **kwargs)

    monkeypatch.setattr(runs, "heartbeat", flaky_heartbeat)
    engine = await Engine.connect(settings, migrate_schema=False)
    worker = Worker(engine.db, settings, tools=registry, concurrency=4, name="lonely")
    task = asyncio.create_task(worker.run())
    try:
        await engine.publish_workflow(
            {
                "name": "long",
                "kind": "structured",
                "nodes": [{"id": "l", "type": "tool", "tool": "long_step", "args": {"seconds": 2.5}}],
            }
        )
        run = await engine.start_run("long")
        done = await engine.wait_for_run(run.id, timeout=30)
        steps = await engine.list_steps(run.id)
        print(
            f"\nlapsed own lease: status={done.status} reason={done.status_reason} rescues={done.rescues}"
            f" token={done.fencing_token} steps={[(s.seq, s.status, s.fencing_token) for s in steps]}"
        )
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)
        # With the bug, drivers the worker forgot outlive ``run()``; end them before the
        # pool closes so they do not leak into later tests on the shared event loop.
        leftovers = [t for t in asyncio.all_tasks() if t.get_name().startswith("agentflow-run-")]
        for leftover in leftovers:
            leftover.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)
        await engine.close()
    assert done.status == "completed", (done.status, done.status_reason, done.error)
    # One lapse, one rescue: the run was claimed twice (token 2) and checkpointed once.
    assert done.fencing_token == 2
    assert [(s.seq, s.status, s.fencing_token) for s in steps] == [(0, "completed", 2)]
