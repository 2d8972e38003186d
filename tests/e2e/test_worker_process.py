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


async def test_an_eager_worker_runs_the_runs_its_events_start_without_a_claim(
    engine: Engine, database_url: str
) -> None:
    published = await engine.publish_workflow(
        {
            "name": "on_signup",
            "kind": "structured",
            "trigger": {"topics": ["signup"]},
            "nodes": [
                {"id": "hello", "type": "tool", "tool": "echo", "args": {"value": "{{ payload.who }}"}}
            ],
        }
    )
    env = cli_env(database_url, AGENTFLOW_EAGER_START="true", AGENTFLOW_POLL_INTERVAL="0.2")
    proc = start_cli(["worker", "--import", "tests.support.tools", "--concurrency", "2"], env)
    try:
        assert proc.stdout is not None
        banner = await asyncio.to_thread(proc.stdout.readline)
        assert "running (2 at once; runs its events start run here eagerly)" in banner, banner
        name = banner.split()[1]
        await engine.events.publish([{"topic": "signup", "message_id": "s1", "data": {"who": "ada"}}])
        async with asyncio.timeout(30):
            while not (runs := await engine.list_runs(workflow=published.workflow.id)):
                await asyncio.sleep(0.05)
        done = await engine.wait_for_run(runs[0].id, timeout=30)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    steps = await engine.list_steps(done.id)
    assert done.status == "completed" and steps[0].output == {"value": "ada"}
    # Held by that worker from its insert, in the dispatcher's transaction: no claim took it.
    assert done.started_at == done.created_at and done.fencing_token == 1
    assert [s.worker for s in steps] == [name]
