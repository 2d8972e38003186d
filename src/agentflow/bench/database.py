"""Where a benchmark runs: a server, and a fresh database on it for each workload.

Without ``AGENTFLOW_DATABASE_URL`` a new embedded PostgreSQL (pgserver) starts in a
temporary data directory, removed at the end; with it, the benchmark uses that server.
Either way each workload gets a new database (``agentflow_bench_<random>``), migrated
first and dropped after, so no workload sees another's rows and the order of workloads
does not change their figures.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from agentflow.connecting import upgrade_schema
from agentflow.core.frozen import frozen
from agentflow.store.embedded import EmbeddedServer


@frozen
class BenchServer:
    """The PostgreSQL server of a benchmark run.

    Attributes:
        admin_url: a database on it to create and drop benchmark databases from.
        kind: ``embedded`` (a new server in a temporary directory) or ``url``.
    """

    admin_url: str
    kind: str

    @asynccontextmanager
    async def database(self) -> AsyncIterator[str]:
        """A new, migrated database; yields its URL and drops it afterwards."""
        name = f"agentflow_bench_{uuid.uuid4().hex[:12]}"
        await _admin(self.admin_url, f"CREATE DATABASE {name}")
        try:
            url = with_database(self.admin_url, name)
            await upgrade_schema(url)
            yield url
        finally:
            await _admin(self.admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@asynccontextmanager
async def bench_server(server_url: str | None) -> AsyncIterator[BenchServer]:
    """``server_url``'s server, or a new embedded one when None (stopped and deleted after)."""
    if server_url is not None:
        yield BenchServer(server_url, "url")
        return
    data_dir = Path(tempfile.mkdtemp(prefix="agentflow-bench-"))
    try:
        server = await asyncio.to_thread(EmbeddedServer, data_dir)
        try:
            yield BenchServer(server.url("postgres"), "embedded")
        finally:
            await asyncio.to_thread(server.stop)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


async def _admin(url: str, statement: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def with_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` (query string, e.g. a socket host, kept)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))
