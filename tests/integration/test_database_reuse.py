"""The test harness puts a used database back as the template made it, or refuses to."""

from __future__ import annotations

import asyncpg

from agentflow.engine import Engine
from tests.support.db import DatabaseServer
from tests.support.db_reset import put_back, rows_of

FLOW = {"name": "one", "kind": "structured", "nodes": [{"id": "a", "type": "tool", "tool": "echo"}]}


async def test_a_used_database_is_emptied_and_its_seeded_rows_and_sequences_restored(
    pg_server: DatabaseServer, engine: Engine, database_url: str
) -> None:
    await engine.publish_workflow(FLOW)
    await engine.start_run("one")
    await engine.events.publish([{"topic": "t", "message_id": "m1"}, {"topic": "t", "message_id": "m2"}])
    await engine.db.pool.execute("UPDATE workspaces SET name = 'renamed'")
    await engine.close()

    conn = await asyncpg.connect(database_url)
    try:
        assert await put_back(conn, pg_server.baseline)
        for table in pg_server.baseline.tables:
            rows = await conn.fetchval(rows_of(table))
            assert rows == pg_server.baseline.seeded.get(table, "[]"), table
        seq = await conn.fetchval(
            "INSERT INTO events (workspace_id, topic, message_id, data, published_at)"
            " SELECT id, 't', 'm3', '{}', now() FROM workspaces LIMIT 1 RETURNING seq"
        )
        assert seq == 1, "the sequences start again"
    finally:
        await conn.close()


async def test_a_database_whose_schema_changed_is_not_put_back(
    pg_server: DatabaseServer, database_url: str
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("DROP INDEX runs_one_active_per_key")
        assert not await put_back(conn, pg_server.baseline)
    finally:
        await conn.close()


async def test_a_database_someone_still_uses_is_not_put_back(
    pg_server: DatabaseServer, database_url: str
) -> None:
    conn, other = await asyncpg.connect(database_url), await asyncpg.connect(database_url)
    try:
        assert not await put_back(conn, pg_server.baseline)
        await other.close()
        assert await put_back(conn, pg_server.baseline)
    finally:
        await conn.close()
        await other.close()
