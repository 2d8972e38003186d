"""A worker that finds its lease lost stops the step it is running: the step is canceled where
it waits, nothing it would have written is written, and the worker's slot is free again.

The lease is taken away as another worker's claim would: a new token and owner on the run's
row (the heartbeat, every third of the lease TTL, then finds it lost)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

import agentflow
from agentflow.core.step_context import StepContext
from agentflow.core.tools import ToolRegistry
from agentflow.engine import Engine

TOOLS = ToolRegistry()
_STARTED: dict[str, asyncio.Event] = {}
_CANCELED: set[str] = set()
_FINISHED: set[str] = set()


@agentflow.tool(name="wait_for_a_long_time", registry=TOOLS)
async def wait_for_a_long_time(ctx: StepContext, label: str) -> str:
    """Signal the start, then wait far longer than the test, noting a cancel."""
    _STARTED.setdefault(label, asyncio.Event()).set()
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        _CANCELED.add(label)
        raise
    _FINISHED.add(label)
    return label


@agentflow.tool(name="quick", registry=TOOLS)
async def quick(ctx: StepContext) -> str:
    """Return at once."""
    return "ok"


def _flow(name: str, *, fans_out: bool) -> dict[str, object]:
    slow = {"id": "slow", "type": "tool", "tool": "wait_for_a_long_time", "args": {"label": name}}
    if not fans_out:
        return {"name": name, "kind": "structured", "nodes": [slow, {"id": "done", "type": "finish"}]}
    side = {"id": "side", "type": "tool", "tool": "wait_for_a_long_time", "args": {"label": f"{name}-side"}}
    return {
        "name": name,
        "kind": "structured",
        "nodes": [{"id": "start", "type": "tool", "tool": "quick"}, slow, side],
        "edges": [{"from": "start", "to": "slow"}, {"from": "start", "to": "side"}],
    }


async def _until(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("fans_out", [False, True], ids=["one node at a time", "branches at once"])
async def test_a_lost_lease_cancels_the_running_step_and_frees_the_slot(
    engine: Engine, caplog: pytest.LogCaptureFixture, fans_out: bool
) -> None:
    name = "lost-lease-" + ("branches" if fans_out else "sequence")
    await engine.publish_workflow(_flow(name, fans_out=fans_out))
    await engine.publish_workflow(
        {"name": "after", "kind": "structured", "nodes": [{"id": "q", "type": "tool", "tool": "quick"}]}
    )
    _STARTED[name] = asyncio.Event()
    worker = engine.worker(concurrency=1, tools=TOOLS, dispatch=False)
    task = asyncio.create_task(worker.run())
    caplog.set_level(logging.INFO, logger="agentflow.runtime.worker")
    try:
        run = await engine.start_run(name)
        await asyncio.wait_for(_STARTED[name].wait(), 10)
        steps_before = await engine.db.pool.fetchval(
            "SELECT count(*) FROM run_steps WHERE run_id = $1", run.id
        )
        # Another worker's claim: a new token and owner (the old worker's fence no longer holds).
        await engine.db.pool.execute(
            "UPDATE runs SET fencing_token = fencing_token + 1, lease_owner = 'another-worker' WHERE id = $1",
            run.id,
        )
        await _until(lambda: name in _CANCELED, 10, "the running step to be canceled")
        # The slot is free again: a new run completes on this one-slot worker.
        later = await engine.start_run("after")
        deadline = time.monotonic() + 10
        while (current := await engine.get_run(later.id)).status != "completed":
            assert time.monotonic() < deadline, f"the next run is still {current.status}"
            await asyncio.sleep(0.05)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)
    assert name not in _FINISHED
    steps_after = await engine.db.pool.fetchval("SELECT count(*) FROM run_steps WHERE run_id = $1", run.id)
    assert steps_after == steps_before, "the canceled step wrote nothing"
    row = await engine.db.pool.fetchrow("SELECT status, lease_owner FROM runs WHERE id = $1", run.id)
    assert (row["status"], row["lease_owner"]) == ("in_progress", "another-worker")
    assert "lease lost during its step" in caplog.text
