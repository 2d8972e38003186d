"""A long-running command (``agentflow worker``, ``agentflow serve``) freezes what it made
while starting, so the collector's full passes skip it; a one-shot command leaves the heap
as it is (the library never touches it)."""

from __future__ import annotations

import asyncio
import gc

from agentflow.cli.common import run_with_engine
from agentflow.engine import Engine
from tests.conftest import make_settings


async def test_a_service_freezes_its_start_up_heap_and_a_command_does_not(database_url: str) -> None:
    async def frozen(_engine: Engine) -> int:
        return gc.get_freeze_count()

    settings = make_settings(database_url)
    gc.unfreeze()
    try:
        assert await asyncio.to_thread(run_with_engine, frozen, settings=settings) == 0
        assert await asyncio.to_thread(run_with_engine, frozen, settings=settings, service=True) > 0
    finally:
        gc.unfreeze()  # the test process's heap as it was
