"""Connection pool and LISTEN connections, with the engine's session settings.

Also what counts as "the database is unavailable" (``unavailable``): the errors every loop
retries after a pause and the API answers with 503 and ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from agentflow.settings import Settings
from agentflow.store import json_codec

logger = logging.getLogger(__name__)

WAKE_CHANNEL = "agentflow_runs"

Connection = asyncpg.Connection | PoolConnectionProxy
"""A connection, direct or borrowed from the pool (inside a transaction when it matters)."""


async def _init_connection(conn: asyncpg.Connection) -> None:
    for typename in ("jsonb", "json"):
        await conn.set_type_codec(
            typename, encoder=json_codec.encode, decoder=json_codec.decode, schema="pg_catalog"
        )


async def _no_reset(conn: asyncpg.Connection) -> None:
    # The engine never leaves session state behind (no advisory locks, cursors or
    # LISTEN on pooled connections), so skip asyncpg's reset round trip on release.
    return None


UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = (
    OSError,  # refused, reset, unreachable: the server is down or restarting
    TimeoutError,
    asyncpg.PostgresConnectionError,  # class 08, and a connection lost in the middle of a statement
    asyncpg.OperatorInterventionError,  # class 57: shutting down, starting up, statement canceled
    asyncpg.InsufficientResourcesError,  # class 53: too many connections, out of memory or disk
    asyncpg.ReadOnlySQLTransactionError,  # a standby (after a failover): the primary comes back
    asyncpg.InterfaceError,  # only "connection is closed" ones; see ``unavailable``
    asyncpg.InternalClientError,  # only a protocol a lost connection left halfway; see ``unavailable``
)
"""What to catch around database calls that should wait for the database; ``unavailable`` decides."""


TRANSACTION_CONFLICTS: tuple[type[Exception], ...] = (asyncpg.TransactionRollbackError,)
"""Deadlocks and serialization failures: the transaction was rolled back; run it again."""


def unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says "the database cannot serve this now" (retry later, HTTP 503).

    The client's side of a lost connection is an ``InterfaceError`` ("connection is closed",
    "the underlying connection is closed"); other interface errors are misuse, i.e. bugs. A
    backend terminated while its connection sat idle in a transaction can also leave asyncpg's
    protocol halfway ("cannot switch to state 15; another operation (2) is in progress", an
    ``InternalClientError`` raised by the next statement, the connection closed): that is the
    same lost connection.
    """
    if isinstance(exc, asyncpg.InterfaceError):
        return "connection is closed" in str(exc)
    if isinstance(exc, asyncpg.InternalClientError):
        return "cannot switch to state" in str(exc)
    return isinstance(exc, UNAVAILABLE_ERRORS)


def describe(exc: BaseException) -> str:
    """``exc`` for a log line: its type, and its message when it has one (a client timeout,
    a reply that never came, has none)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Database:
    """The engine's handle on PostgreSQL: a pool plus helpers.

    Attributes:
        pool: the asyncpg pool; use it only inside ``agentflow.store``.
        url: the server URL.
    """

    def __init__(self, pool: asyncpg.Pool, url: str, settings: Settings) -> None:
        self.pool = pool
        self.url = url
        self.settings = settings

    @classmethod
    async def connect(cls, url: str, settings: Settings) -> Database:
        """Open a pool with ``statement_timeout`` and ``idle_in_transaction_session_timeout``,
        whose statements wait ``Settings.reply_timeout`` at most for their reply."""
        pool = await asyncpg.create_pool(
            url,
            min_size=min(settings.pool_min_size, settings.pool_max_size),
            max_size=settings.pool_max_size,
            init=_init_connection,
            reset=_no_reset,
            server_settings=server_settings(settings),
            # A reply that never comes (a silent link) fails its statement instead of holding
            # its caller forever; asyncpg then gives the connection up.
            command_timeout=settings.reply_timeout,
        )
        return cls(pool, url, settings)

    async def close(self) -> None:
        """Close every connection."""
        await self.pool.close()

    async def listen(self, callback: Callable[[str], None], channel: str = WAKE_CHANNEL) -> Listener:
        """Call ``callback(payload)`` on each NOTIFY on ``channel``, through database restarts.

        Returns once the first LISTEN connection is open (or failed: the listener then keeps
        trying in the background); ``close()`` it when done. See ``Listener``.
        """
        listener = Listener(self, callback, channel)
        await listener.start()
        return listener

    async def ping(self) -> bool:
        """True when the server answers within two seconds."""
        try:
            async with asyncio.timeout(2):
                return bool(await self.pool.fetchval("SELECT true"))
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
            return False


def server_settings(settings: Settings) -> dict[str, str]:
    """Session settings for every engine connection."""
    return {
        "application_name": "agentflow",
        "statement_timeout": str(int(settings.statement_timeout * 1000)),
        "idle_in_transaction_session_timeout": str(int(settings.idle_in_transaction_timeout * 1000)),
    }


class Listener:
    """A LISTEN connection that comes back after the database does.

    It calls ``callback(payload)`` on each NOTIFY on ``channel``. When its connection is lost
    (a database restart, a network cut) it reconnects in the background with backoff, and
    then calls ``callback("")`` once: NOTIFYs sent while it was away are gone, so its owner
    should look for work as if woken. A silent half-open connection is found by a ``SELECT 1``
    every ``check_interval`` seconds. NOTIFY only wakes early; polling still backs it up.

    Args:
        db: the database.
        callback: called with each payload (and ``""`` after a reconnection).
        channel: the channel.
        check_interval: seconds between liveness checks of an idle connection.
        max_backoff: the longest wait between reconnection attempts.
    """

    def __init__(
        self,
        db: Database,
        callback: Callable[[str], None],
        channel: str,
        *,
        check_interval: float = 30.0,
        max_backoff: float = 5.0,
    ) -> None:
        self.db = db
        self.callback = callback
        self.channel = channel
        self.check_interval = check_interval
        self.max_backoff = max_backoff
        self.reconnects = 0
        self._conn: asyncpg.Connection | None = None
        self._lost = asyncio.Event()
        self._closed = False
        self._keeper: asyncio.Task[None] | None = None

    @property
    def listening(self) -> bool:
        """Whether a LISTEN connection is open right now."""
        return self._conn is not None and not self._conn.is_closed()

    async def start(self) -> None:
        """Open the connection now if the database answers; keep it open from then on."""
        try:
            await self._connect()
        except Exception as exc:
            if not unavailable(exc) and not isinstance(exc, asyncpg.PostgresError):
                raise
            logger.warning("LISTEN %s failed (%s); retrying in the background", self.channel, describe(exc))
        self._keeper = asyncio.create_task(self._keep(), name=f"agentflow-listen-{self.channel}")

    async def close(self) -> None:
        """Stop listening and close the connection."""
        self._closed = True
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
        await self._drop()

    async def _connect(self) -> None:
        conn: asyncpg.Connection = await asyncpg.connect(
            self.db.url,
            server_settings=server_settings(self.db.settings),
            command_timeout=self.db.settings.reply_timeout,
        )
        try:

            def on_notify(_c: Any, _pid: int, _channel: str, payload: object) -> None:
                self.callback(str(payload))

            await conn.add_listener(self.channel, on_notify)
            # Only the current connection's end matters (an old one may report late).
            conn.add_termination_listener(lambda c: self._lost.set() if c is self._conn else None)
        except BaseException:
            conn.terminate()
            raise
        self._lost.clear()
        self._conn = conn

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 2)
            if not conn.is_closed():
                conn.terminate()

    async def _keep(self) -> None:
        backoff = 0.0
        while not self._closed:
            if not self.listening:
                await self._drop()
                try:
                    await self._connect()
                except Exception as exc:
                    if not unavailable(exc) and not isinstance(exc, asyncpg.PostgresError):
                        logger.exception("LISTEN %s: unexpected error; retrying", self.channel)
                    backoff = min(max(backoff * 2, 0.1), self.max_backoff)
                    await asyncio.sleep(backoff)
                    continue
                backoff = 0.0
                self.reconnects += 1
                logger.info("LISTEN %s: listening again", self.channel)
                self.callback("")  # whatever was notified meanwhile is lost: look now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lost.wait(), self.check_interval)
            if self._lost.is_set():
                self._lost.clear()  # the loop's first test tells a lost connection from a stale signal
                if not self.listening and not self._closed:
                    logger.warning("LISTEN %s: connection lost; reconnecting", self.channel)
            else:
                await self._check()

    async def _check(self) -> None:
        """Find a connection that died without the socket saying so."""
        conn = self._conn
        if conn is None or conn.is_closed():
            return
        try:
            await asyncio.wait_for(conn.fetchval("SELECT 1"), 5)
        except Exception as exc:
            logger.warning(
                "LISTEN %s: connection check failed (%s); reconnecting", self.channel, describe(exc)
            )
            conn.terminate()
