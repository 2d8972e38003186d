"""Event consumers: read the log in order and apply effects with the cursor, atomically.

A consumer reads a batch below the transaction horizon, hands it to its handler inside one
transaction, and stores its new cursor in that same transaction: the effects and the cursor
commit together or not at all (at-least-once delivery, redelivery bounded by one batch after
a crash). The cursor row is locked while a batch is processed, so two instances of the same
consumer never process the same events concurrently. NOTIFY wakes consumers; polling backs it
up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from uuid import UUID

import asyncpg

from agentflow.core.events import Event
from agentflow.store import events
from agentflow.store.database import Connection, Database

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
    ) -> None:
        self.db = db
        self.name = name
        self.handler = handler
        self.workspace_id = workspace_id
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        """Finish the current batch, then return from ``run``."""
        self._stopping.set()
        self._wake.set()

    async def consume_batch(self) -> int:
        """Process one batch; return how many events it held (0: none ready, or locked)."""
        async with self.db.pool.acquire() as conn, conn.transaction():
            position = await events.lock_position(conn, self.name, self.workspace_id)
            if position is None:
                return 0  # another instance of this consumer is processing a batch
            batch = await events.read_after(conn, position, self.batch_size, self.workspace_id)
            if batch:
                await self.handler(conn, batch)
                await events.store_position(conn, self.name, batch[-1].position)
            return len(batch)

    async def run(self) -> None:
        """Consume until ``stop()``."""
        listener = await self._listen()
        try:
            while not self._stopping.is_set():
                self._wake.clear()
                try:
                    if await self.consume_batch() == self.batch_size:
                        continue  # more may be ready
                except (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError) as exc:
                    logger.warning("consumer %s: %s; retrying", self.name, exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_interval)
        finally:
            if listener is not None:
                with contextlib.suppress(OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                    await listener.close()

    async def _listen(self) -> asyncpg.Connection | None:
        try:
            return await self.db.listen(lambda _payload: self._wake.set(), events.EVENTS_CHANNEL)
        except (OSError, asyncpg.PostgresError) as exc:
            logger.warning("consumer %s: LISTEN failed (%s); polling only", self.name, exc)
            return None
