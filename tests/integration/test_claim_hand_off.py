"""The hand-off after a claim: a run a worker just claimed takes its first turn (its begin
goes out) before the worker's claim loop looks for the next due run, so that look's round
trip is not on the way to the run's first step."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentflow.engine import Engine
from agentflow.store import runs

FLOW = {
    "name": "hand-off",
    "kind": "structured",
    "nodes": [{"id": "done", "type": "finish", "output": {"ok": True}}],
}


async def test_a_claimed_run_begins_before_the_worker_looks_for_the_next_due_run(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    claim, begin, next_due = runs.claim, runs.begin, runs.seconds_to_next_due

    async def claiming(*args: Any, **kwargs: Any) -> list[runs.Claimed]:
        claimed = await claim(*args, **kwargs)
        calls.extend("claimed" for _ in claimed)
        return claimed

    async def beginning(*args: Any, **kwargs: Any) -> bool:
        calls.append("begin")
        return await begin(*args, **kwargs)

    async def looking(*args: Any, **kwargs: Any) -> float | None:
        calls.append("next due")
        return await next_due(*args, **kwargs)

    monkeypatch.setattr(runs, "claim", claiming)
    monkeypatch.setattr(runs, "begin", beginning)
    monkeypatch.setattr(runs, "seconds_to_next_due", looking)
    await engine.publish_workflow(FLOW)
    worker = engine.worker(concurrency=4, dispatch=False)  # free slots left: the loop looks
    task = asyncio.create_task(worker.run())
    try:
        await worker.wait_until_running()
        for _ in range(2):  # the first loads the version's config (a read of its own)
            run = await engine.start_run("hand-off", {})
            async with asyncio.timeout(10):
                while (await engine.get_run(run.id)).status != "completed":
                    await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
    at = len(calls) - 1 - calls[::-1].index("claimed")
    # The second run's begin comes right after its claim, the loop's look for the next due run
    # after it.
    assert calls[at : at + 3] == ["claimed", "begin", "next due"], calls
