"""Handing a held run back: as the worker stops, or after its step met a database outage."""

from __future__ import annotations

import asyncio
import contextlib
import time

import asyncpg

from agentflow.core.records import RunRecord
from agentflow.store import runs
from agentflow.store.database import UNAVAILABLE_ERRORS, unavailable


async def release_quietly(pool: asyncpg.Pool, run: RunRecord, token: int, owner: str) -> None:
    """Hand the run back as the worker stops (an outage leaves it to lease expiry)."""
    with contextlib.suppress(*UNAVAILABLE_ERRORS):
        await runs.release(pool, run.workspace_id, run.id, token, owner)


async def release_after_outage(
    pool: asyncpg.Pool, run: RunRecord, token: int, owner: str, lease_ttl: float
) -> None:
    """Release a run whose step met a database outage, retrying while the lease may hold.

    A release that waits out a short outage makes the run due at once, without costing it a
    rescue (``max_rescues`` counts lost workers, not database restarts). After one lease TTL
    it gives up: the claim then rescues the run. The local clock only bounds the retries; the
    fenced release decides (a stale token or owner changes nothing).
    """
    deadline = time.monotonic() + lease_ttl
    pause = 0.1
    while True:
        try:
            await runs.release(pool, run.workspace_id, run.id, token, owner)
            return
        except Exception as exc:
            if not unavailable(exc) or time.monotonic() + pause > deadline:
                return
        await asyncio.sleep(pause)
        pause = min(pause * 2, 1.0)
