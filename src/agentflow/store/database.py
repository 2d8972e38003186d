"""Connection pool and LISTEN connection, with the engine's session settings."""

from __future__ import annotations

import asyncio
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
        """Open a pool with ``statement_timeout`` and ``idle_in_transaction_session_timeout``."""
        pool = await asyncpg.create_pool(
            url,
            min_size=min(settings.pool_min_size, settings.pool_max_size),
            max_size=settings.pool_max_size,
            init=_init_connection,
            reset=_no_reset,
            server_settings=server_settings(settings),
        )
        return cls(pool, url, settings)

    async def close(self) -> None:
        """Close every connection."""
        await self.pool.close()

    async def listen(
        self, callback: Callable[[str], None], channel: str = WAKE_CHANNEL
    ) -> asyncpg.Connection:
        """Open a dedicated connection that calls ``callback(payload)`` on each NOTIFY on ``channel``."""
        conn: asyncpg.Connection = await asyncpg.connect(
            self.url, server_settings=server_settings(self.settings)
        )

        def on_notify(_c: Any, _pid: int, _channel: str, payload: object) -> None:
            callback(str(payload))

        await conn.add_listener(channel, on_notify)
        return conn

    async def ping(self) -> bool:
        """True when the server answers within two seconds."""
        try:
            async with asyncio.timeout(2):
                return bool(await self.pool.fetchval("SELECT true"))
        except (OSError, asyncpg.PostgresError, TimeoutError):
            return False


def server_settings(settings: Settings) -> dict[str, str]:
    """Session settings for every engine connection."""
    return {
        "application_name": "agentflow",
        "statement_timeout": str(int(settings.statement_timeout * 1000)),
        "idle_in_transaction_session_timeout": str(int(settings.idle_in_transaction_timeout * 1000)),
    }
