"""``kill -USR1`` on a real ``agentflow worker`` process logs what its run's driver awaits."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

from agentflow.engine import Engine
from tests.support.processes import WorkerProcess, worker_env
from tests.support.serve_process import ServeProcess

FLOW = {
    "name": "dump-me",
    "kind": "structured",
    "nodes": [{"id": "slow", "type": "tool", "tool": "sleepy", "args": {"seconds": 30}}],
}


async def test_sigusr1_logs_the_driver_of_a_running_run_down_to_its_tool(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    await engine.publish_workflow(FLOW)
    env = worker_env(database_url, lease_ttl=5, poll_interval=0.2)
    worker = WorkerProcess("dump-worker", env, tmp_path, concurrency=2)
    try:
        await asyncio.to_thread(worker.wait_ready)
        run = await engine.start_run("dump-me")
        deadline = time.monotonic() + 30
        while (await engine.get_run(run.id)).status.value != "in_progress" and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # the step is under way: its tool sleeps
        worker.proc.send_signal(signal.SIGUSR1)
        dumped = ""
        while time.monotonic() < deadline and "sleepy" not in dumped:
            await asyncio.sleep(0.1)
            dumped = worker.stderr()
        assert worker.alive(), "SIGUSR1 must not stop the worker"
    finally:
        worker.kill()  # its step sleeps on; the test's database goes with the test

    assert "tasks of agentflow worker dump-worker (pid" in dumped
    driver = dumped[dumped.index(f"agentflow-run-{run.id}") :].split("\nagentflow-")[0]
    assert "runtime/worker.py" in driver and "_drive" in driver
    assert "sleepy" in driver and "awaits <Future" in driver, driver
    assert "agentflow-heartbeat" in dumped


async def test_sigusr1_on_agentflow_serve_logs_its_tasks(database_url: str, tmp_path: Path) -> None:
    serve = ServeProcess(worker_env(database_url), tmp_path, concurrency=2)
    try:
        await asyncio.to_thread(serve.wait_ready)
        serve.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "agentflow-api" not in serve.stderr():
            await asyncio.sleep(0.1)
        assert serve.alive(), "SIGUSR1 must not stop the server"
    finally:
        serve.stop()

    dumped = serve.stderr()
    assert "tasks of agentflow serve (pid" in dumped
    assert "agentflow-api\n" in dumped and "agentflow-heartbeat\n" in dumped
