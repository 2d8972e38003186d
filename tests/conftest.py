"""Fixtures: a real PostgreSQL, a fresh database per test, an engine on it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentflow.engine import Engine
from agentflow.runtime import tracing
from agentflow.settings import Settings
from tests.support.db import DatabaseServer

# The per-package coverage bars (tests/coverage_gate.py); the code-quality gates, started
# in the background as the session begins (tests/quality_gates.py); the whole suite's two
# lanes (tests/lanes.py).
pytest_plugins = ["tests.coverage_gate", "tests.quality_gates", "tests.lanes"]


@pytest.fixture(scope="session")
async def pg_server() -> AsyncIterator[DatabaseServer]:
    server = DatabaseServer()
    try:
        await server.create_template()
        yield server
    finally:
        # Stops the embedded server and removes its data directory (see DatabaseServer.close).
        await server.close()


@pytest.fixture
async def database_url(pg_server: DatabaseServer) -> AsyncIterator[str]:
    name, url = await pg_server.create_database()
    yield url
    await pg_server.recycle_database(name)


def make_settings(url: str, **overrides: object) -> Settings:
    """Settings for tests: short leases and polls so faults resolve in seconds."""
    values: dict[str, object] = {
        "database_url": url,
        "lease_ttl": 3.0,
        "poll_interval": 0.2,
        "worker_concurrency": 8,
        "pool_min_size": 1,
        "pool_max_size": 10,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[Engine]:
    eng = await Engine.connect(make_settings(database_url), migrate_schema=False)
    yield eng
    await eng.close()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process; the spans it ends, as they end."""
    exporter = InMemorySpanExporter()
    tracing.install(processor=SimpleSpanProcessor(exporter))
    yield exporter
    tracing.uninstall()


@pytest.fixture
def server_dir() -> Iterator[Path]:
    """A fresh directory for an embedded server's data, outside pytest's ``tmp_path``.

    pgserver opens the folders above its data directory to its own user (o+rx) and runs
    ``pg_ctl`` as that user; any pytest session that starts meanwhile (CI runs three lanes)
    closes ``/tmp/pytest-of-<user>`` again (0700), and a server starting under it then cannot
    even create its log (CI failed so: ``pg_ctl`` exited before writing ``pg/log``).
    """
    path = Path(tempfile.mkdtemp(prefix="agentflow-server-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
