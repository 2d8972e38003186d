"""The embedded server starts, keeps data across restarts and stops; connections carry timeouts."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import psutil

from agentflow.engine import Engine
from agentflow.settings import Settings
from agentflow.store.embedded import EmbeddedServer


def _postmaster_pid(pgdata: Path) -> int | None:
    pidfile = pgdata / "postmaster.pid"
    return int(pidfile.read_text().split()[0]) if pidfile.exists() else None


async def test_embedded_server_is_reused_across_starts_and_stops_cleanly(server_dir: Path) -> None:
    settings = Settings(data_dir=server_dir / "data", pool_min_size=1)
    async with Engine.open(settings) as engine:
        await engine.publish_workflow(
            {"name": "kept", "kind": "structured", "nodes": [{"id": "a", "type": "finish"}]}
        )
        pgdata = server_dir / "data" / "pg"
        pid = _postmaster_pid(pgdata)
        assert pid is not None and psutil.pid_exists(pid)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, (
        "server left running"
    )
    async with Engine.open(settings) as engine:
        assert [w.name for w in await engine.list_workflows()] == ["kept"], "data did not survive a restart"


async def test_engine_connections_carry_the_timeouts(database_url: str) -> None:
    settings = Settings(database_url=database_url, statement_timeout=1, idle_in_transaction_timeout=11)
    engine = await Engine.connect(settings, migrate_schema=False)
    try:
        async with engine.db.pool.acquire() as conn:
            assert await conn.fetchval("SHOW statement_timeout") == "1s"
            assert await conn.fetchval("SHOW idle_in_transaction_session_timeout") == "11s"
            assert await conn.fetchval("SHOW application_name") == "agentflow"
            try:
                await conn.execute("SELECT pg_sleep(3)")
            except asyncpg.QueryCanceledError:
                pass
            else:
                raise AssertionError("statement_timeout did not cancel a long statement")
    finally:
        await engine.close()


async def test_embedded_url_points_at_the_agentflow_database(server_dir: Path) -> None:
    server = EmbeddedServer(server_dir / "d")
    try:
        conn = await asyncpg.connect(server.url())
        assert await conn.fetchval("SELECT current_database()") == "agentflow"
        await conn.close()
    finally:
        server.stop()
