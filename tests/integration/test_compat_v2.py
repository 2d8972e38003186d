"""Seed 001's V2 routes over the engine: execute (asynchronously, synchronously, from a node),
get, resume a paused execution at its node, and /health; errors in the engine's own model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.api.app import create_app
from agentflow.engine import Engine
from tests.support.agents import running_worker
from tests.support.http_server import serve

FLOW: dict[str, Any] = {
    "name": "v2-approval",
    "kind": "structured",
    "nodes": [
        {"id": "prepare", "type": "mapping", "output": {"amount": "{{ payload.amount }}"}},
        {"id": "hil_node_1", "type": "user_input", "message": "Refund {{ input.amount }}?"},
        {"id": "yes", "type": "finish", "output": "approved: {{ input.reason }}"},
        {"id": "no", "type": "finish", "output": "rejected"},
    ],
    "edges": [
        {"from": "prepare", "to": "hil_node_1"},
        {"from": "hil_node_1", "port": "approved", "to": "yes"},
        {"from": "hil_node_1", "port": "rejected", "to": "no"},
    ],
}


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    await engine.publish_workflow(FLOW)
    async with (
        running_worker(engine),
        serve(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as client,
    ):
        yield client


async def test_a_synchronous_execute_waits_for_the_pause_and_resume_finishes_it(
    api: httpx.AsyncClient,
) -> None:
    started = await api.post(
        "/v2/workflows/v2-approval/execute", json={"trigger_data": {"amount": 40}, "async_execution": False}
    )
    assert started.status_code == 200, started.text
    body = started.json()
    assert body["success"] is True and body["execution"]["status"] == "PAUSED"
    assert (
        isinstance(body["execution"]["start_time"], int) and body["execution_id"] == body["execution"]["id"]
    )
    execution = body["execution_id"]
    wrong_node = await api.post(
        f"/v2/executions/{execution}/resume", json={"node_id": "prepare", "user_response": {"approved": True}}
    )
    resumed = await api.post(
        f"/v2/executions/{execution}/resume",
        json={"node_id": "hil_node_1", "user_response": {"approved": True, "comment": "Looks good!"}},
    )
    again = await api.post(
        f"/v2/executions/{execution}/resume",
        json={"node_id": "hil_node_1", "user_response": {"approved": False}},
    )
    assert wrong_node.status_code == 409 and wrong_node.json()["error"]["code"] == "node_not_waiting"
    assert resumed.status_code == 200, resumed.text
    assert again.status_code == 409
    for _ in range(200):
        got = (await api.get(f"/v2/executions/{execution}")).json()
        if got["execution"]["status"] != "RUNNING":
            break
        await asyncio.sleep(0.05)
    assert got["execution"]["status"] == "COMPLETED" and got["execution"]["output"] == "approved: Looks good!"
    assert isinstance(got["execution"]["end_time"], int)


async def test_an_asynchronous_execute_answers_at_once_and_can_start_from_a_node(
    api: httpx.AsyncClient,
) -> None:
    started = await api.post("/v2/workflows/v2-approval/execute", json={"trigger_data": {"amount": 1}})
    assert started.status_code == 200 and started.json()["execution"]["status"] in ("RUNNING", "PAUSED")
    from_node = await api.post(
        "/v2/workflows/v2-approval/execute",
        json={"start_from_node": "no", "async_execution": False, "timeout_seconds": 20},
    )
    assert from_node.json()["execution"]["status"] == "COMPLETED"
    assert from_node.json()["execution"]["output"] == "rejected"


async def test_mistakes_get_the_engines_errors(api: httpx.AsyncClient) -> None:
    unknown = await api.post("/v2/workflows/nowhere/execute", json={})
    bad_field = await api.post("/v2/workflows/v2-approval/execute", json={"trigger": {}})
    no_run = await api.get("/v2/executions/5f0c7a52-0b9c-4c50-9a2c-8d8a4bb0e9d1")
    not_uuid = await api.post("/v2/executions/abc/resume", json={"node_id": "x", "user_response": {}})
    health = await api.get("/health")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "workflow_not_found"
    assert bad_field.status_code == 422
    assert no_run.status_code == 404 and no_run.json()["error"]["code"] == "run_not_found"
    assert not_uuid.status_code == 404
    assert health.status_code == 200 and health.json() == {"status": "ok"}
