"""Versioned, forward-only migrations: numbered SQL files applied in order, once.

A hand-rolled runner on purpose (see docs/decisions.md): the schema is plain SQL in
``migrations/NNNN_name.sql``, the engine has one driver (asyncpg), and concurrent
start-ups serialise on one advisory lock.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources

import asyncpg

from agentflow.core.errors import AgentflowError
from agentflow.core.frozen import frozen

_LOCK_KEY = 0x6167656E74  # "agent"
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@frozen
class Migration:
    """One migration file."""

    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        """SHA-256 of the SQL, to catch edits to applied migrations."""
        return hashlib.sha256(self.sql.encode()).hexdigest()


def available() -> list[Migration]:
    """Every migration shipped with this version of agentflow, in order."""
    found = []
    for entry in resources.files("agentflow.store.migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    return sorted(found, key=lambda m: m.version)


async def applied_versions(conn: asyncpg.Connection) -> dict[int, str]:
    """Applied versions and their checksums (empty on a new database)."""
    exists = await conn.fetchval("SELECT to_regclass('agentflow_migrations') IS NOT NULL")
    if not exists:
        return {}
    rows = await conn.fetch("SELECT version, checksum FROM agentflow_migrations")
    return {row["version"]: row["checksum"] for row in rows}


async def upgrade(conn: asyncpg.Connection) -> list[Migration]:
    """Apply every pending migration; return those applied.

    Raises:
        AgentflowError: code ``migration_modified`` if an applied file has changed, or
            ``schema_too_new`` if the database is ahead of this agentflow.
    """
    await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
    try:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS agentflow_migrations (version integer PRIMARY KEY,"
            " name text NOT NULL, checksum text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = await applied_versions(conn)
        shipped = available()
        _check(done, shipped)
        applied = []
        for migration in shipped:
            if migration.version in done:
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO agentflow_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                    migration.version,
                    migration.name,
                    migration.checksum,
                )
            applied.append(migration)
        return applied
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)


def _check(done: dict[int, str], shipped: list[Migration]) -> None:
    known = {m.version: m for m in shipped}
    for version, checksum in done.items():
        if version not in known:
            raise AgentflowError(
                "schema_too_new",
                f"the database has migration {version}, which this agentflow does not know",
                solution="Upgrade agentflow to the version that created this database.",
            )
        if known[version].checksum != checksum:
            raise AgentflowError(
                "migration_modified",
                f"migration {version}_{known[version].name} changed after it was applied",
                solution="Never edit an applied migration; add a new one instead.",
            )
