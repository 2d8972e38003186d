"""Loops that run beside a worker's claim loop (the dispatcher, the scheduler, the
gatekeeper, the notifier), kept running whatever fails in them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

logger = logging.getLogger("agentflow.runtime.worker")


class Companion(Protocol):
    """A loop that runs beside the worker's claim loop (the dispatcher, the scheduler)."""

    async def run(self) -> None: ...

    def stop(self) -> None: ...


async def keep_running(companion: Companion, stopping: asyncio.Event) -> None:
    """Run a companion; if it fails, log why and start it again after a pause.

    Companions wait out database outages themselves; this is the net under anything
    else, so that events and schedules are never left silently unhandled by a worker
    that still claims runs.
    """
    pause = 1.0
    while not stopping.is_set():
        try:
            await companion.run()
            return
        except Exception:
            logger.exception("%s failed; restarting it in %.0fs", type(companion).__name__, pause)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), pause)
        pause = min(pause * 2, 30.0)
