"""Put a test's database back as the template made it, when that is cheaper than a new one.

Emptying the tables a test wrote takes a few milliseconds; cloning the template takes a
checkpoint (a tenth of a second or more). A database is put back only when that is safe:
nobody else is connected to it any more (a process a test left behind would write into the
next test's data) and its schema is still the template's (a test may drop an index, add a
trigger or a table); otherwise the caller drops it and clones a new one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import asyncpg

CATALOG = """
SELECT md5(string_agg(entry, E'\\n' ORDER BY entry)) FROM (
    SELECT 'relation ' || c.relname || ' ' || c.relkind::text
    FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace
    UNION ALL
    SELECT 'column ' || a.attrelid::regclass::text || '.' || a.attname || ' '
        || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull || ' '
        || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
    FROM pg_attribute a
    JOIN pg_class c ON c.oid = a.attrelid AND c.relnamespace = 'public'::regnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace = 'public'::regnamespace
    UNION ALL
    SELECT 'index ' || indexrelid::regclass::text || ' ' || pg_get_indexdef(indexrelid)
    FROM pg_index WHERE indrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'public'::regnamespace)
    UNION ALL
    SELECT 'trigger ' || tgrelid::regclass::text || ' ' || tgname || ' ' || tgenabled::text || ' ' || tgfoid::regproc::text
    FROM pg_trigger WHERE NOT tgisinternal
    UNION ALL
    SELECT 'function ' || p.oid::regprocedure::text || ' ' || md5(coalesce(p.prosrc, ''))
    FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace
    UNION ALL
    SELECT 'extension ' || extname || ' ' || extversion FROM pg_extension
    UNION ALL
    SELECT 'setting ' || array_to_string(setconfig, ',') FROM pg_db_role_setting
    WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
) AS catalog(entry)
"""
"""A digest of everything in the schema a test could change (rows aside)."""

OTHERS = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
)
TABLES = "SELECT format('%I', tablename) FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
RESTART_SEQUENCES = """
SELECT setval(format('%I.%I', schemaname, sequencename)::regclass, start_value, false)
FROM pg_sequences WHERE schemaname = 'public' AND last_value IS NOT NULL
"""


def rows_of(table: str) -> str:
    """A query for the rows of ``table`` as JSON text, in a stable order."""
    return f"SELECT coalesce(json_agg(t ORDER BY t::text)::text, '[]') FROM {table} t"


@dataclass(frozen=True)
class Baseline:
    """What the template holds: its schema's digest, its tables, the rows it was seeded with."""

    catalog: str
    tables: tuple[str, ...]
    seeded: dict[str, str]
    """Tables with rows in the template (the migrations' record, the default workspace): their
    rows as JSON text."""


async def take_baseline(conn: asyncpg.Connection) -> Baseline:
    """The baseline of the database ``conn`` is connected to (the template)."""
    tables = tuple(row[0] for row in await conn.fetch(TABLES))
    seeded: dict[str, str] = {}
    for table in tables:
        rows = await conn.fetchval(rows_of(table))
        if rows != "[]":
            seeded[table] = rows
    return Baseline(await conn.fetchval(CATALOG), tables, seeded)


async def put_back(conn: asyncpg.Connection, baseline: Baseline) -> bool:
    """Empty what a test wrote and restore the seeded rows; False when it is not safe to."""
    for _ in range(20):  # a pool that has just closed: its backends take a moment to exit
        if await conn.fetchval(OTHERS) == 0:
            break
        await asyncio.sleep(0.01)
    else:
        return False
    if await conn.fetchval(CATALOG) != baseline.catalog:
        return False
    emptied = [table for table in baseline.tables if table not in baseline.seeded]
    full = await conn.fetchval(
        "SELECT array_remove(ARRAY[" + ", ".join(_if_full(table) for table in emptied) + "], NULL)"
    )
    async with conn.transaction():
        await conn.execute("SET LOCAL lock_timeout = '2s'")
        if full:
            await conn.execute(f"TRUNCATE {', '.join(full)} RESTART IDENTITY CASCADE")
        for table, rows in baseline.seeded.items():
            if await conn.fetchval(rows_of(table)) != rows:
                await conn.execute(f"DELETE FROM {table}")
                await conn.execute(
                    f"INSERT INTO {table} SELECT * FROM json_populate_recordset(NULL::{table}, $1)", rows
                )
        await conn.execute(RESTART_SEQUENCES)
    return True


def _if_full(table: str) -> str:
    return f"(SELECT '{table}' WHERE EXISTS (SELECT FROM {table}))"
