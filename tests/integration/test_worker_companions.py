"""A worker's companions (dispatcher, scheduler, notifier ...) are restarted when they fail."""

from __future__ import annotations

import asyncio

import pytest

from agentflow.engine import Engine
from agentflow.runtime.companions import keep_running


class FailsOnce:
    """A companion whose first run fails."""

    def __init__(self) -> None:
        self.runs = 0

    async def run(self) -> None:
        self.runs += 1
        if self.runs == 1:
            raise RuntimeError("boom")

    def stop(self) -> None:
        pass


async def test_a_failed_companion_is_started_again_after_a_pause(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    worker = engine.worker(concurrency=1)
    companion = FailsOnce()
    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(keep_running(companion, worker._stopping), 10)
    assert companion.runs == 2
    assert asyncio.get_running_loop().time() - started >= 1.0, "it waited before starting again"
    assert "FailsOnce failed; restarting it in 1s" in caplog.text


async def test_a_stopping_worker_does_not_restart_a_failed_companion(engine: Engine) -> None:
    worker = engine.worker(concurrency=1)
    companion = FailsOnce()
    task = asyncio.create_task(keep_running(companion, worker._stopping))
    await asyncio.sleep(0.2)
    worker.stop()
    await asyncio.wait_for(task, 5)
    assert companion.runs == 1
