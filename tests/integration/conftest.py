"""Fixtures of the integration tests: a worker running in the test's event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from agentflow.engine import Engine
from agentflow.runtime.worker import Worker


@pytest.fixture
async def worker(engine: Engine) -> AsyncIterator[Worker]:
    """A worker (8 runs at once) on the test's engine, stopped after the test."""
    w = engine.worker(concurrency=8)
    task = asyncio.create_task(w.run())
    yield w
    w.stop()
    await asyncio.wait_for(task, 10)
