"""A real `agentflow worker` process: SIGTERM finishes the step, releases the run, exits 0."""

from __future__ import annotations

import asyncio
import signal

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
