"""An engine whose worker runs in the test's own process, for eager-start tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agentflow.core.tools import ToolRegistry
from agentflow.engine import Engine
from agentflow.runtime.metrics import REGISTRY
from agentflow.runtime.worker import Worker
from tests.conftest import make_settings


@asynccontextmanager
async def engine_with_worker(
    url: str, tools: ToolRegistry, *, eager: bool, concurrency: int, dispatch: bool
) -> AsyncIterator[tuple[Engine, Worker]]:
    """An engine (``eager_start`` as given) and its running worker; both stopped after."""
    engine = await Engine.connect(make_settings(url, eager_start=eager), migrate_schema=False)
    worker = engine.worker(concurrency=concurrency, tools=tools, dispatch=dispatch)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_until_running(), 10)
        yield engine, worker
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)
        await engine.close()


def counted(name: str) -> float:
    """The process's ``agentflow_<name>_total`` counter."""
    return REGISTRY.get_sample_value(f"agentflow_{name}_total") or 0.0
