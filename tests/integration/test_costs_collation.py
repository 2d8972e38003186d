"""A run's per-model costs come out in code point order whatever the database's collation:
the database merges them (migration 0041's ``agentflow_merged_costs``) in the order a worker
merges them for a running run's readers (``store.steps_ahead._merged``).

Only a database whose collation differs from code point order can show it. The embedded server
has no ICU and this machine kind no other libc locale, so there the test reads the function's
definition; on a server with ICU (Debian's PostgreSQL, through ``AGENTFLOW_TEST_DATABASE_URL``)
it also makes a database with ICU's root collation and merges in it (without migration 0041
that part fails: the database orders 'a' before 'B').
"""

from __future__ import annotations

import json
import os
from typing import Any

import asyncpg

from agentflow.connecting import upgrade_schema
from agentflow.store import steps_ahead
from tests.support.db import DatabaseServer, with_database

COSTS = [{"key_type": "openai:a-model", "input_tokens": 1, "output_tokens": 2, "cached_input_tokens": 0,
          "usd_cost": 0.1, "calls": 1}]  # fmt: skip
ADDED = [{"key_type": "openai:B-model", "input_tokens": 3, "output_tokens": 4, "cached_input_tokens": 0,
          "usd_cost": 0.2, "calls": 1}]  # fmt: skip
BY_CODE_POINT = ["openai:B-model", "openai:a-model"]


async def test_costs_are_merged_in_code_point_order_whatever_the_collation(
    database_url: str, pg_server: DatabaseServer
) -> None:
    by_worker = steps_ahead._merged(COSTS, ADDED)
    assert [entry["key_type"] for entry in by_worker] == BY_CODE_POINT
    conn = await asyncpg.connect(database_url)
    try:
        definition = await conn.fetchval("SELECT pg_get_functiondef('agentflow_merged_costs'::regproc)")
        assert 'ORDER BY k COLLATE "C"' in definition
        assert await _merged_in(conn) == by_worker
    finally:
        await conn.close()

    name = f"agentflow_icu_{os.getpid()}"
    admin = await asyncpg.connect(pg_server.admin_url)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        try:
            # ICU's root collation: letters in alphabetical order, case second ('a' < 'B').
            await admin.execute(
                f"CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'und'"
            )
        except asyncpg.PostgresError:
            return  # a server built without ICU, as the embedded one: the definition above tells
        url = with_database(pg_server.admin_url, name)
        await upgrade_schema(url)
        conn = await asyncpg.connect(url)
        try:
            ordered = await conn.fetch("SELECT k FROM unnest($1::text[]) AS k ORDER BY k", BY_CODE_POINT)
            # The database's own order is not code point order, so the merge can tell them apart.
            assert [row["k"] for row in ordered] == sorted(BY_CODE_POINT, key=str.lower)
            assert await _merged_in(conn) == by_worker
        finally:
            await conn.close()
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.close()


async def _merged_in(conn: asyncpg.Connection) -> Any:
    text = await conn.fetchval(
        "SELECT agentflow_merged_costs($1::jsonb, $2::jsonb)::text", json.dumps(COSTS), json.dumps(ADDED)
    )
    return json.loads(text)
