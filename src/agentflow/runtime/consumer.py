"""Event consumers: read the log in order and apply effects with the cursor, atomically.

A consumer reads a batch below the transaction horizon, hands it to its handler inside one
transaction, and stores its new cursor in that same transaction: the effects and the cursor
commit together or not at all (at-least-once delivery, redelivery bounded by one batch after
a crash). The cursor row is locked while a batch is processed, so two instances of the same
consumer never process the same events concurrently. NOTIFY wakes consumers; polling backs it
up, and database outages are waited out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from uuid import UUID

from agentflow.core.events import Event
from agentflow.store import events
from agentflow.store.database import (
    TRANSACTION_CONFLICTS,
    UNAVAILABLE_ERRORS,
    Connection,
    Database,
    unavailable,
)

logger = logging.getLogger(__name__)

Handler = Callable[[Connection, list[Event]], Awaitable[None]]
"""Applies a batch's effects on the given connection, inside the consumer's transaction."""


class EventConsumer:
    """Feeds the log to ``handler`` in (xid, seq) order, once per cursor position.

    Args:
        db: the database.
        name: the consumer's name (its cursor's key).
        handler: called with the transaction's connection and the batch.
        workspace_id: consume one workspace only (None: every workspace).
        batch_size: events per transaction.
        poll_interval: the longest it sleeps without a NOTIFY.
        settle: called after each batch's transaction with whether it committed (the
            dispatcher hands the runs it started held to its worker then).
    """

    def __init__(
        self,
        db: Database,
        name: str,
        handler: Handler,
        *,
        workspace_id: UUID | None = None,
        batch_size: int = 500,
        poll_interval: float = 1.0,
        settle: Callable[[bool], None] | None = None,
    ) -> None:
        self.db = db
        self.settle = settle
        self.name = name
        self.handler = handler
        self.workspace_id = workspace_id
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        # Events the next batch may hold: halved after a batch failed, doubled (up to
        # batch_size) after one committed. A batch is one transaction of a few statements per
        # event; on a flaky link a big one would fail every time, and events pile up while
        # it backs off, so a fixed size could stall the consumer for good.
        self.limit = batch_size
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        """Finish the current batch, then return from ``run``."""
        self._stopping.set()
        self._wake.set()

    async def consume_batch(self) -> int:
        """Process one batch; return how many events it held (0: none ready, or locked)."""
        committed = False
        try:
            async with self.db.pool.acquire() as conn, conn.transaction():
                position = await events.lock_position(conn, self.name, self.workspace_id)
                if position is None:
                    return 0  # another instance of this consumer is processing a batch
                batch = await events.read_after(conn, position, self.limit, self.workspace_id)
                if batch:
                    await self.handler(conn, batch)
                    await events.store_position(conn, self.name, batch[-1].position)
            committed = True
            return len(batch)
        finally:
            if self.settle is not None:
                self.settle(committed)

    async def run(self) -> None:
        """Consume until ``stop()``, through database outages.

        While the database is unavailable (down, restarting) it retries with backoff up to
        ``5 * poll_interval``; its LISTEN connection comes back on its own (see ``Listener``).
        """
        listener = await self.db.listen(lambda _payload: self._wake.set(), events.EVENTS_CHANNEL)
        backoff = 0.0
        try:
            while not self._stopping.is_set():
                self._wake.clear()
                delay = self.poll_interval
                try:
                    limit = self.limit
                    full = await self.consume_batch() == limit
                    backoff = 0.0
                    self.limit = min(self.batch_size, limit * 2)
                    if full:
                        continue  # more may be ready
                except TRANSACTION_CONFLICTS as exc:  # e.g. a deadlock with another writer: rolled back
                    logger.warning("consumer %s: %s; retrying the batch", self.name, exc)
                    self.limit = max(1, self.limit // 2)
                    delay = 0.05
                except UNAVAILABLE_ERRORS as exc:
                    if not unavailable(exc):
                        raise
                    self.limit = max(1, self.limit // 2)
                    backoff = min(max(backoff * 2, 0.1), 5 * self.poll_interval)
                    logger.warning("consumer %s: %s; retrying in %.1fs", self.name, exc, backoff)
                    delay = backoff
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
        finally:
            await listener.close()
