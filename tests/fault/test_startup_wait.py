"""A worker started while its database is down (restarting, failed over) waits for it
(``AGENTFLOW_STARTUP_WAIT``) instead of exiting at once, then runs what is due; a command, or a
worker told not to wait, fails at once. Found by R8: a replacement worker started during a
PostgreSQL crash exited, leaving no worker."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncpg
import pytest

from agentflow.engine import Engine
from agentflow.settings import Settings
from tests.fault.test_r8_requests import cluster  # noqa: F401  (the fixture)
from tests.support.pg_cluster import PostgresCluster
from tests.support.processes import WorkerProcess, worker_env

FLOW = {
    "name": "after-the-outage",
    "kind": "structured",
    "nodes": [{"id": "done", "type": "finish", "output": 1}],
}


@pytest.mark.timeout(120)
async def test_connecting_waits_for_a_database_that_is_down_and_fails_at_once_without_waiting(
    cluster: tuple[PostgresCluster, str],  # noqa: F811
) -> None:
    pg, url = cluster
    pg.crash()
    began = time.monotonic()
    with pytest.raises((OSError, asyncpg.PostgresError)):
        await Engine.connect(Settings(database_url=url))  # the default: no wait
    assert time.monotonic() - began < 5

    async def start_later() -> None:
        await asyncio.sleep(1.5)
        await asyncio.to_thread(pg.start)

    later = asyncio.create_task(start_later())
    engine = await Engine.connect(Settings(database_url=url), wait=60)
    try:
        await later
        assert await engine.db.pool.fetchval("SELECT 1") == 1
        assert time.monotonic() - began >= 1.5, "it waited for the server"
    finally:
        await engine.close()


@pytest.mark.timeout(180)
async def test_a_worker_started_while_the_database_is_down_comes_up_with_it(
    cluster: tuple[PostgresCluster, str],  # noqa: F811
    log_dir: Path,
) -> None:
    pg, url = cluster
    async with Engine.open(Settings(database_url=url, pool_min_size=1, pool_max_size=2)) as engine:
        await engine.publish_workflow(FLOW)
        run = await engine.start_run("after-the-outage", None)
    pg.crash()
    patient = WorkerProcess("patient", worker_env(url, startup_wait=60), log_dir)
    hasty = WorkerProcess("hasty", worker_env(url, startup_wait=0), log_dir)
    try:
        await asyncio.sleep(3.0)
        assert patient.alive() and not patient.ready(), "it waits, not yet connected"
        assert hasty.proc.wait(timeout=30) == 1, "told not to wait, it fails at once (negative control)"
        assert "database unavailable" in patient.stderr(), patient.stderr()[-2000:]
        await asyncio.to_thread(pg.start)
        await asyncio.to_thread(patient.wait_ready, 60)
        async with Engine.open(Settings(database_url=url, pool_min_size=1, pool_max_size=2)) as engine:
            done = await engine.wait_for_run(run.id, timeout=60)
        assert (done.status, done.output) == ("completed", 1)
    finally:
        patient.stop()
        hasty.kill()
