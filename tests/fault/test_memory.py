"""10,000 waiting runs cost a worker no memory: timers live in the database, not in RAM.

A worker process runs while 10,000 runs wait (10 minutes, inserted in one statement);
its RSS is sampled before they exist and over ~10 s of polling after, and a fresh run
must still complete promptly. The control is a naive scheduler process that loads the
same waiting runs into in-memory timers: its RSS growth shows the bound can fail.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from agentflow.engine import DEFAULT_WORKSPACE, Engine
from tests.support.processes import REPO, WorkerProcess, worker_env
from tests.support.recording_server import RecordingServer

pytestmark = pytest.mark.fault

WAITING = 10_000
PAD = 1000  # bytes of payload per run: a modest, realistic input document
BOUND_MB = 15.0
MB = 1024 * 1024

_NAIVE_SCHEDULER = """
import asyncio, sys
import asyncpg
from agentflow.core.records import RunRecord
from agentflow.store.database import _init_connection

async def main():
    conn = await asyncpg.connect(sys.argv[1])
    await _init_connection(conn)
    print("ready", flush=True)
    sys.stdin.readline()
    loop = asyncio.get_running_loop()
    rows = await conn.fetch("SELECT *, extract(epoch FROM due_at - now())::float8 AS due_in"
                            " FROM runs WHERE status = 'waiting'")
    timers = [loop.call_later(r["due_in"], print, RunRecord.from_row(r).id) for r in rows]
    del rows
    print("loaded", len(timers), flush=True)
    sys.stdin.readline()
    await conn.close()

asyncio.run(main())
"""


async def sample_rss(pid: int, seconds: float, period: float = 0.1) -> list[int]:
    process = psutil.Process(pid)
    samples = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        samples.append(process.memory_info().rss)
        await asyncio.sleep(period)
    return samples


async def insert_waiting(engine: Engine) -> float:
    workflow = await engine.get_workflow("sleepers")
    began = time.monotonic()
    await engine.db.pool.execute(
        "INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, status_reason,"
        " input, state, step_seq, due_at, started_at)"
        " SELECT $1, gen_random_uuid(), $2, $3, 'waiting', 'timer',"
        " jsonb_build_object('i', g, 'pad', repeat('x', $4)),"
        " jsonb_build_object('node', 'after'),"
        " 2, now() + interval '10 minutes', now()"
        " FROM generate_series(1, $5) AS g",
        DEFAULT_WORKSPACE,
        workflow.id,
        workflow.latest_version,
        PAD,
        WAITING,
    )
    return time.monotonic() - began


@pytest.mark.timeout(120)
async def test_ten_thousand_waiting_runs_cost_the_worker_no_memory(
    engine: Engine, recorder: RecordingServer, log_dir: Path
) -> None:
    await engine.publish_workflow(
        {
            "name": "sleepers",
            "kind": "structured",
            "nodes": [
                {"id": "before", "type": "tool", "tool": "echo", "args": {"value": 1}},
                {"id": "nap", "type": "wait", "duration": "10m"},
                {"id": "after", "type": "tool", "tool": "echo", "args": {"value": 2}},
            ],
        }
    )
    await engine.publish_workflow(
        {"name": "fresh", "kind": "structured", "nodes": [{"id": "a", "type": "tool", "tool": "echo"}]}
    )
    env = worker_env(engine.db.url, recorder.url, lease_ttl=5, poll_interval=0.2)
    worker = WorkerProcess("memory", env, log_dir, concurrency=8)
    try:
        await asyncio.to_thread(worker.wait_ready)
        for _ in range(5):  # warm up: imports, config cache, pool connections
            warm = await engine.start_run("fresh")
            assert (await engine.wait_for_run(warm.id, timeout=10)).status == "completed"
        before = await sample_rss(worker.pid, 3.0)
        took = await insert_waiting(engine)
        after: list[int] = []
        latencies: list[float] = []
        sampler = asyncio.create_task(sample_rss(worker.pid, 10.0))
        for _ in range(5):
            await asyncio.sleep(1.5)
            began = time.monotonic()
            run = await engine.start_run("fresh")
            done = await engine.wait_for_run(run.id, timeout=10)
            assert done.status == "completed"
            latencies.append(time.monotonic() - began)
        after = await sampler
        assert worker.alive(), worker.stderr()[-2000:]
        counts = await engine.db.pool.fetchrow(
            "SELECT count(*) FILTER (WHERE status = 'waiting') AS waiting,"
            " count(*) FILTER (WHERE status = 'waiting' AND fencing_token = 0) AS untouched FROM runs"
        )
    finally:
        worker.stop()

    base = statistics.median(before)
    growth = (max(after) - base) / MB
    print(
        f"\nmemory: inserted {WAITING} waiting runs in {took:.2f}s; worker RSS {base / MB:.1f} MB before,"
        f" max {max(after) / MB:.1f} MB after (growth {growth:+.2f} MB);"
        f" fresh runs completed in {[round(x, 3) for x in latencies]} s"
    )
    assert counts["waiting"] == WAITING and counts["untouched"] == WAITING, "a waiting run was claimed early"
    assert growth < BOUND_MB
    assert max(latencies) < 1.0, latencies

    control = await naive_scheduler_growth(engine.db.url)
    print(f"memory control: a naive in-memory scheduler grew {control / MB:+.1f} MB for the same runs")
    assert control / MB > BOUND_MB, "the control does not exceed the bound: the bound proves nothing"


async def naive_scheduler_growth(url: str) -> int:
    """RSS growth of a process that loads every waiting run into an in-memory timer."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _NAIVE_SCHEDULER, url],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        assert (await asyncio.to_thread(proc.stdout.readline)).strip() == "ready"
        base = statistics.median(await sample_rss(proc.pid, 0.5, 0.05))
        proc.stdin.write("go\n")
        proc.stdin.flush()
        line = await asyncio.to_thread(proc.stdout.readline)
        assert line.startswith("loaded"), line
        loaded = max(await sample_rss(proc.pid, 0.5, 0.05))
        return int(loaded - base)
    finally:
        proc.kill()
        proc.wait(10)
