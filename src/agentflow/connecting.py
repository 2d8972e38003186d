"""Reaching the database: the embedded server when no URL is set, the schema, the pool."""

from __future__ import annotations

import asyncio
import logging
import time

import asyncpg

from agentflow.settings import Settings
from agentflow.store import migrate
from agentflow.store.database import UNAVAILABLE_ERRORS, Database, unavailable
from agentflow.store.embedded import EmbeddedServer

logger = logging.getLogger(__name__)


async def open_database(
    settings: Settings, *, migrate_schema: bool, wait: float
) -> tuple[Database, EmbeddedServer | None]:
    """The pool on ``settings.database_url``, or on the embedded server (started) when unset.

    Args:
        settings: where the database is, and the pool's sizes and timeouts.
        migrate_schema: apply pending migrations first.
        wait: seconds to keep trying while the database cannot serve yet (down, starting
            up, shutting down, too many connections); 0 fails at once.

    Returns:
        The pool, and the embedded server this process now holds (None with a URL).
    """
    url, embedded = await server_url(settings)
    try:
        return await _reach(url, settings, migrate_schema, wait), embedded
    except BaseException:
        if embedded is not None:
            embedded.stop()
        raise


async def server_url(settings: Settings) -> tuple[str, EmbeddedServer | None]:
    """``settings.database_url``, or the URL of the embedded server, started (then also the
    server this process now holds: ``stop()`` it when done)."""
    if settings.database_url is not None:
        return settings.database_url, None
    embedded = await asyncio.to_thread(EmbeddedServer, settings.data_dir)
    return embedded.url(), embedded


async def _reach(url: str, settings: Settings, migrate_schema: bool, wait: float) -> Database:
    """Migrate and open the pool, trying again for up to ``wait`` seconds while the database
    is unavailable (``store.database.unavailable``); other errors at once."""
    deadline = time.monotonic() + wait
    pause = 0.2
    while True:
        try:
            if migrate_schema:
                await upgrade_schema(url)
            return await Database.connect(url, settings)
        except UNAVAILABLE_ERRORS as exc:
            if not unavailable(exc) or time.monotonic() + pause > deadline:
                raise
            logger.warning("database unavailable (%s); trying again in %.1fs", exc, pause)
        await asyncio.sleep(pause)
        pause = min(pause * 2, 2.0)


async def upgrade_schema(url: str) -> list[migrate.Migration]:
    """Apply pending migrations on the database at ``url``."""
    conn = await asyncpg.connect(url)
    try:
        return await migrate.upgrade(conn)
    finally:
        await conn.close()
