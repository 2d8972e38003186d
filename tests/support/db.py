"""A PostgreSQL server for the tests, and a fresh database per test cloned from a template.

The embedded server (pgserver) is used unless AGENTFLOW_TEST_DATABASE_URL names one. The
template is migrated once per session; each test gets a database cloned from it
(``CREATE DATABASE ... TEMPLATE``), or the last test's, put back as the template made it when
that is safe (tests/support/db_reset.py): a clone forces a checkpoint, a tenth of a second or
more, where emptying the tables a test wrote takes milliseconds. This happens between tests,
never while one runs: any open transaction in the cluster (a CREATE DATABASE is one) holds
back the horizon below which the event log's consumers read (``pg_snapshot_xmin``), and tests
of them expect a quiet server.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from agentflow.connecting import upgrade_schema
from agentflow.store.embedded import EmbeddedServer
from tests.support.db_reset import Baseline, put_back, take_baseline


def with_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name``."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


class DatabaseServer:
    """The server and the template database of one test session."""

    def __init__(self) -> None:
        self._spare: tuple[str, str] | None = None
        self._baseline: Baseline | None = None
        self._embedded: EmbeddedServer | None = None
        self._data_dir: Path | None = None
        url = os.environ.get("AGENTFLOW_TEST_DATABASE_URL")
        if not url:
            self._data_dir = data_dir = Path(tempfile.mkdtemp(prefix="agentflow-test-"))
            try:
                self._embedded = EmbeddedServer(data_dir)
            except BaseException:
                shutil.rmtree(data_dir, ignore_errors=True)
                raise
            url = self._embedded.url("postgres")
        self.admin_url = with_database(url, "postgres") if self._embedded else url
        self.template = f"agentflow_tpl_{os.getpid()}"
        self.pgdata = self._embedded.pgdata if self._embedded else None

    async def create_template(self) -> None:
        conn = await asyncpg.connect(self.admin_url)
        try:
            await conn.execute(f"DROP DATABASE IF EXISTS {self.template} WITH (FORCE)")
            await conn.execute(f"CREATE DATABASE {self.template}")
        finally:
            await conn.close()
        await upgrade_schema(with_database(self.admin_url, self.template))
        conn = await asyncpg.connect(with_database(self.admin_url, self.template))
        try:
            self._baseline = await take_baseline(conn)
        finally:
            await conn.close()

    async def create_database(self) -> tuple[str, str]:
        """A fresh database cloned from the template: its name and URL."""
        made, self._spare = self._spare, None
        return made or await self._clone_template()

    async def recycle_database(self, name: str) -> None:
        """Put database ``name`` back for the next test; or drop it while a new one is made."""
        if await self._put_back(name):
            self._spare = name, with_database(self.admin_url, name)
        else:
            _, self._spare = await asyncio.gather(self.drop_database(name), self._clone_template())

    @property
    def baseline(self) -> Baseline:
        """What the template holds (for ``put_back``)."""
        assert self._baseline is not None, "create_template first"
        return self._baseline

    async def _put_back(self, name: str) -> bool:
        try:
            conn = await asyncpg.connect(with_database(self.admin_url, name))
        except (OSError, asyncpg.PostgresError):
            return False  # a test that stopped the server, or dropped its database
        try:
            return await put_back(conn, self.baseline)
        except asyncpg.PostgresError:
            return False
        finally:
            await conn.close()

    async def _clone_template(self) -> tuple[str, str]:
        name = f"agentflow_t_{uuid.uuid4().hex[:12]}"
        conn = await asyncpg.connect(self.admin_url)
        try:
            await conn.execute(f"CREATE DATABASE {name} TEMPLATE {self.template} STRATEGY FILE_COPY")
        finally:
            await conn.close()
        return name, with_database(self.admin_url, name)

    async def drop_database(self, name: str) -> None:
        conn = await asyncpg.connect(self.admin_url)
        try:
            await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        finally:
            await conn.close()

    async def close(self) -> None:
        try:
            if self._spare is not None:
                await self.drop_database(self._spare[0])
            conn = await asyncpg.connect(self.admin_url)
            try:
                await conn.execute(f"DROP DATABASE IF EXISTS {self.template} WITH (FORCE)")
            finally:
                await conn.close()
        finally:  # even when the server is unwell: stop it and take its files away
            if self._embedded is not None:
                self._embedded.stop()
                self._remove_data_dir()

    def _remove_data_dir(self) -> None:
        """Delete the session's data directory (about 60 MB), once its server has stopped."""
        assert self._data_dir is not None
        if self._embedded is not None and self._embedded.running():
            # Another process still holds the server (it stops when that one exits); deleting
            # the files under a running server would only make it fail.
            return
        shutil.rmtree(self._data_dir, ignore_errors=True)
