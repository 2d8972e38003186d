"""A real `agentflow worker` process: SIGTERM finishes the step, releases the run, exits 0."""

from __future__ import annotations

import asyncio
import signal
import socket
import urllib.request

import tests.support.tools  # noqa: F401  (the in-process worker needs the tools)
from agentflow.engine import Engine
from tests.support.cli import cli_env, start_cli


async def test_sigterm_finishes_the_current_step_and_releases_the_run(
    engine: Engine, database_url: str
) -> None:
    await engine.publish_workflow(
        {
            "name": "two_slow",
            "kind": "structured",
            "nodes": [
                {"id": "first", "type": "tool", "tool": "sleepy", "args": {"seconds": 1.5}},
                {"id": "second", "type": "tool", "tool": "echo", "args": {"value": "after"}},
            ],
        }
    )
    run = await engine.start_run("two_slow")
    # A long lease: if the run were not released, nobody could continue it for 60 s.
    env = cli_env(database_url, AGENTFLOW_LEASE_TTL="60", AGENTFLOW_POLL_INTERVAL="0.2")
    proc = start_cli(["worker", "--import", "tests.support.tools", "--concurrency", "2"], env)
    try:
        for _ in range(300):
            if (await engine.get_run(run.id)).lease_owner is not None:
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError(f"worker never claimed the run: {proc.stdout.read() if proc.stdout else ''}")
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0
    released = await engine.get_run(run.id)
    steps = await engine.list_steps(run.id)
    assert [s.node_id for s in steps] == ["first"], "the running step was not allowed to finish"
    assert released.status == "in_progress" and released.lease_owner is None
    w = engine.worker(concurrency=2)
    task = asyncio.create_task(w.run())
    try:
        done = await engine.wait_for_run(run.id, timeout=5)
    finally:
        w.stop()
        await task
    assert done.status == "completed" and done.rescues == 0, "the run waited for a lease to expire"


async def test_worker_serves_its_own_counters(engine: Engine, database_url: str) -> None:
    await engine.publish_workflow(
        {"name": "counted", "kind": "structured", "nodes": [{"id": "e", "type": "tool", "tool": "echo"}]}
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = cli_env(database_url, AGENTFLOW_POLL_INTERVAL="0.2")
    proc = start_cli(["worker", "--import", "tests.support.tools", "--metrics-port", str(port)], env)
    try:
        runs = [await engine.start_run("counted") for _ in range(3)]
        for run in runs:
            assert (await engine.wait_for_run(run.id, timeout=20)).status == "completed"
        body = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        )
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 10)
    text = body.decode()
    assert "agentflow_claims_total 3.0" in text
    assert 'agentflow_steps_total{status="completed"} 3.0' in text
    assert 'agentflow_runs_terminal_total{status="completed"} 3.0' in text
