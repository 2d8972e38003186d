"""Eager starts (``Settings.eager_start``): a run started in a process whose worker has a
free slot is inserted held and begun by that worker and driven at once, with no claim."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

import agentflow
from agentflow.core.errors import ConfigError, ConflictError
from agentflow.core.tools import ToolRegistry
from agentflow.engine import Engine
from agentflow.runtime.worker import Worker
from tests.conftest import make_settings
from tests.support import local_worker
from tests.support.local_worker import counted
from tests.support.processes import worker_env
from tests.support.serve_process import ServeProcess

TOOLS = ToolRegistry()
CALLS: list[int] = []
GATE: dict[str, asyncio.Event] = {}


@agentflow.tool(name="eager_step", registry=TOOLS)
async def eager_step(n: int = 0) -> dict[str, Any]:
    """Counts its calls; holds its slot while the test's gate is closed."""
    CALLS.append(n)
    gate = GATE.get("open")
    if gate is not None:
        await gate.wait()
    return {"n": n}


FLOW = {
    "name": "eager",
    "kind": "structured",
    "nodes": [
        {"id": "one", "type": "tool", "tool": "eager_step", "args": {"n": "{{ payload.n }}"}},
        {"id": "two", "type": "tool", "tool": "eager_step", "args": {"n": 2}},
    ],
}


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()
    GATE.clear()


def engine_with_worker(
    url: str, *, eager: bool, concurrency: int = 2
) -> AbstractAsyncContextManager[tuple[Engine, Worker]]:
    return local_worker.engine_with_worker(url, TOOLS, eager=eager, concurrency=concurrency, dispatch=False)


async def test_an_eager_start_is_held_by_the_local_worker_and_runs_without_a_claim(database_url: str) -> None:
    async with engine_with_worker(database_url, eager=True) as (engine, worker):
        await engine.publish_workflow(FLOW)
        eager, claims = counted("eager_starts"), counted("claims")
        started = await engine.start_run("eager", {"n": 1})
        assert (counted("eager_starts"), counted("claims")) == (eager + 1, claims)
        # The insert made it held and begun by this process's worker.
        assert started.status.value == "in_progress"
        assert started.lease_owner == worker.name
        assert started.fencing_token == 1 and started.started_at == started.created_at
        done = await engine.wait_for_run(started.id, timeout=20)
        steps = await engine.list_steps(started.id)
    assert done.status.value == "completed"
    assert CALLS == [1, 2]
    assert [s.node_id for s in steps] == ["one", "two"]
    assert {s.worker for s in steps} == {worker.name}
    # No claim took it: a claim would have moved the token on (and counted nothing).
    assert done.fencing_token == 1 and done.rescues == 0


async def test_without_eager_start_the_run_waits_for_a_claim(database_url: str) -> None:
    async with engine_with_worker(database_url, eager=False) as (engine, worker):
        await engine.publish_workflow(FLOW)
        started = await engine.start_run("eager", {"n": 1})
        assert started.status.value == "created" and started.lease_owner is None
        done = await engine.wait_for_run(started.id, timeout=20)
        steps = await engine.list_steps(started.id)
    assert done.status.value == "completed"
    assert done.fencing_token == 1  # the claim's
    assert {s.worker for s in steps} == {worker.name}


async def test_a_worker_with_every_slot_taken_leaves_the_start_to_a_claim(database_url: str) -> None:
    GATE["open"] = asyncio.Event()
    async with engine_with_worker(database_url, eager=True, concurrency=1) as (engine, worker):
        await engine.publish_workflow(FLOW)
        first = await engine.start_run("eager", {"n": 1})
        assert first.lease_owner == worker.name
        second = await engine.start_run("eager", {"n": 3})
        assert second.status.value == "created" and second.lease_owner is None
        GATE["open"].set()
        assert (await engine.wait_for_run(first.id, timeout=20)).status.value == "completed"
        assert (await engine.wait_for_run(second.id, timeout=20)).status.value == "completed"
    assert sorted(CALLS) == [1, 2, 2, 3]


async def test_a_replayed_start_is_not_driven_twice(database_url: str) -> None:
    GATE["open"] = asyncio.Event()
    async with engine_with_worker(database_url, eager=True) as (engine, worker):
        await engine.publish_workflow(FLOW)
        first = await engine.start_run_once("eager", {"n": 1}, idempotency_key="k1")
        again = await engine.start_run_once("eager", {"n": 1}, idempotency_key="k1")
        assert again.replayed and again.run.id == first.run.id
        assert worker.reserve() is not None  # the replay gave its slot back: one is free
        worker.unreserve()
        GATE["open"].set()
        done = await engine.wait_for_run(first.run.id, timeout=20)
    assert done.status.value == "completed"
    assert CALLS == [1, 2]  # each node once: the replay did not drive the run again


async def test_a_refused_start_gives_its_slot_back(database_url: str) -> None:
    async with engine_with_worker(database_url, eager=True, concurrency=1) as (engine, worker):
        await engine.publish_workflow({**FLOW, "payload_format": {"n": "number"}})
        with pytest.raises(ConfigError):
            await engine.start_run("eager", {"n": "not a number"})
        lease = worker.reserve()  # the only slot is free again
        assert lease is not None and lease.owner == worker.name
        worker.unreserve()


async def test_a_start_refused_by_the_database_gives_its_slot_back(database_url: str) -> None:
    GATE["open"] = asyncio.Event()
    async with engine_with_worker(database_url, eager=True, concurrency=2) as (engine, worker):
        await engine.publish_workflow(FLOW)
        first = await engine.start_run("eager", {"n": 1}, enrollment_key="acct-1")
        assert first.lease_owner == worker.name
        with pytest.raises(ConflictError) as refused:  # the insert itself is refused
            await engine.start_run("eager", {"n": 2}, enrollment_key="acct-1")
        assert refused.value.code == "run_already_active"
        lease = worker.reserve()  # one run held, the refused start's slot free again
        assert lease is not None
        worker.unreserve()
        GATE["open"].set()
        assert (await engine.wait_for_run(first.id, timeout=20)).status.value == "completed"
    assert CALLS == [1, 2]


async def test_a_stopped_worker_takes_no_start(database_url: str) -> None:
    async with engine_with_worker(database_url, eager=True) as (engine, worker):
        await engine.publish_workflow(FLOW)
        worker.stop()
        started = await engine.start_run("eager", {"n": 1})
        assert started.status.value == "created" and started.lease_owner is None
    assert worker.reserve() is None


async def test_a_worker_without_code_steps_hands_a_code_run_back(database_url: str) -> None:
    publisher = await Engine.connect(make_settings(database_url, run_code="on"), migrate_schema=False)
    code = {"id": "c", "type": "run_code", "code": "def main(input):\n    return 1"}
    await publisher.publish_workflow({"name": "coded", "kind": "structured", "nodes": [code]})
    await publisher.close()
    async with engine_with_worker(database_url, eager=True) as (engine, worker):
        started = await engine.start_run("coded")
        assert started.lease_owner == worker.name  # taken with the insert ...
        async with asyncio.timeout(10):  # ... and given back for a worker that runs code
            while (run := await engine.get_run(started.id)).lease_owner is not None:
                await asyncio.sleep(0.02)
        assert run.status.value == "in_progress" and run.due_at is not None
        assert await engine.list_steps(started.id) == []


@pytest.mark.parametrize("eager", [True, False], ids=["eager", "claimed"])
async def test_agentflow_serve_starts_runs_on_its_own_worker_when_eager(
    database_url: str, tmp_path: Path, eager: bool
) -> None:
    settings = {"eager_start": "true"} if eager else {}
    server = ServeProcess(worker_env(database_url, **settings), tmp_path, concurrency=2)
    try:
        server.wait_ready()
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            flow = {
                "name": "eager_api",
                "kind": "structured",
                "nodes": [
                    {"id": "m", "type": "mapping", "output": {"hi": "{{ payload.name }}"}},
                    {"id": "done", "type": "finish", "output": "{{ input }}"},
                ],
            }
            published = await http.post("/api/ai/workflows", json=flow)
            assert published.status_code in (200, 201), published.text
            workflow_id = published.json()["workflow"]["id"]
            answer = await http.post(
                f"/api/ai/workflows/{workflow_id}/runs", json={"payload": {"name": "Ada"}}
            )
            assert answer.status_code == 201, answer.text
            started = answer.json()
            # Eager: the start's answer is the run already held by the server's worker.
            assert started["status"] == ("in_progress" if eager else "created")
            run = f"/api/ai/workflows/{workflow_id}/runs/{started['id']}"
            async with asyncio.timeout(20):
                while (await http.get(run)).json()["status"] != "completed":
                    await asyncio.sleep(0.05)
            assert (await http.get(run)).json()["output"] == {"hi": "Ada"}
    finally:
        assert server.stop() == 0
    assert server.error_logs() == {}
    banner = server.out_path.read_text()
    assert ("runs started here (API, webhooks, events) run here eagerly" in banner) is eager, banner
