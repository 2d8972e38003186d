"""The leases a worker holds: each claim it drives (``Held``), the heartbeat that keeps them
while their runs have work, and handing a run back as the worker stops or after its step met
a database outage."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

import asyncpg

from agentflow.core.records import RunRecord, VersionRecord
from agentflow.store import runs
from agentflow.store.database import TRANSACTION_CONFLICTS, UNAVAILABLE_ERRORS, describe, unavailable
from agentflow.store.run_starts import Lease

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class Held:
    """One claim a worker holds: the run, its token, and the task driving it."""

    workspace_id: UUID
    run_id: UUID
    token: int
    task: asyncio.Task[None] | None = None
    steps: set[asyncio.Future[Any]] = field(default_factory=set)

    def cancel_steps(self) -> None:
        """Stop the run's running steps (their results would be fenced off anyway)."""
        for running in self.steps:
            running.cancel()


class LocalWorker(Protocol):
    """A worker that takes runs its own process starts, as they start (eager starts: an API
    start, a webhook call, its dispatcher's). ``reserve`` promises a free slot and gives the lease to insert
    the run with; each promise ends with ``take`` (the run was inserted held and committed) or
    ``unreserve`` (it was not)."""

    def reserve(self) -> Lease | None: ...  # pragma: no cover
    def take(self, run: RunRecord, version: VersionRecord) -> None: ...  # pragma: no cover
    def unreserve(self) -> None: ...  # pragma: no cover


class Promises:
    """Slots a worker promised to runs its own process is starting (eager starts). Each
    promise ends as a held run or given back; a stopping worker waits until none is open."""

    def __init__(self) -> None:
        self.open = 0
        self._none = asyncio.Event()
        self._none.set()

    def make(self) -> None:
        """Open a promise."""
        self.open += 1
        self._none.clear()

    def end(self) -> None:
        """Close a promise (its run is held now, or none came)."""
        self.open -= 1
        if not self.open:
            self._none.set()

    async def all_ended(self) -> None:
        """Return once no promise is open."""
        await self._none.wait()


async def keep_leases(pool: asyncpg.Pool, owner: str, held: dict[UUID, Held], lease_ttl: float) -> None:
    """Extend the lease of every claim in ``held`` every third of ``lease_ttl``, until canceled;
    a claim whose lease is lost has its running steps stopped."""
    interval = lease_ttl / 3
    while True:
        await asyncio.sleep(interval)
        claims = list(held.values())
        try:
            kept = await runs.heartbeat(
                pool, owner, [(h.workspace_id, h.run_id, h.token) for h in claims], lease_ttl
            )
        except (*UNAVAILABLE_ERRORS, *TRANSACTION_CONFLICTS) as exc:
            # A lease outlives two missed beats: the next one extends it.
            logger.warning("heartbeat failed: %s", describe(exc))
            continue
        for claim in claims:
            if claim.run_id not in kept:
                claim.cancel_steps()  # lease lost: stop wasting work; the fence rejects it anyway


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
