"""Idempotent starts (seed 003 createIfAbsent) through a real API server: one run per
workflow and key, whoever retries and however many at once; the same request gets its run
back, another request with the key is refused."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.core.errors import ConflictError
from agentflow.engine import Engine
from tests.support.http_server import serve

FLOW = {"name": "keyed-starts", "kind": "structured", "nodes": [{"id": "e", "type": "tool", "tool": "echo"}]}
OTHER = {**FLOW, "name": "other-starts"}
RUNS = "/api/ai/workflows/{}/runs"


async def count_runs(engine: Engine, name: str) -> int:
    workflow = await engine.get_workflow(name)
    return int(await engine.db.pool.fetchval("SELECT count(*) FROM runs WHERE workflow_id = $1", workflow.id))


@pytest.fixture
async def client(engine: Engine) -> Any:
    await engine.publish_workflow(FLOW)
    await engine.publish_workflow(OTHER)
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        yield http


async def test_the_same_start_again_returns_its_run(engine: Engine, client: httpx.AsyncClient) -> None:
    key = {"Idempotency-Key": str(uuid.uuid4())}
    first = await client.post(RUNS.format("keyed-starts"), json={"payload": {"n": 1}}, headers=key)
    again = await client.post(RUNS.format("keyed-starts"), json={"payload": {"n": 1}}, headers=key)
    assert (first.status_code, again.status_code) == (201, 200), again.text
    assert first.json()["replayed"] is False and again.json()["replayed"] is True
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["Location"].endswith(first.json()["id"])
    assert await count_runs(engine, "keyed-starts") == 1
    other = await client.post(RUNS.format("other-starts"), json={"payload": {"n": 1}}, headers=key)
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"], "keys are per workflow"


async def test_another_request_with_a_used_key_is_refused(engine: Engine, client: httpx.AsyncClient) -> None:
    key = {"Idempotency-Key": "order-42"}
    first = await client.post(RUNS.format("keyed-starts"), json={"payload": {"n": 1}}, headers=key)
    clash = await client.post(RUNS.format("keyed-starts"), json={"payload": {"n": 2}}, headers=key)
    assert first.status_code == 201
    assert clash.status_code == 409, clash.text
    body = clash.json()
    assert body["error"]["code"] == "idempotency_key_reused"
    assert body["error"]["details"]["run_id"] == first.json()["id"]
    assert await count_runs(engine, "keyed-starts") == 1


async def test_the_key_may_be_in_the_body_but_not_two_different_keys(client: httpx.AsyncClient) -> None:
    body = {"payload": {"n": 1}, "idempotency_key": "in-body"}
    first = await client.post(RUNS.format("keyed-starts"), json=body)
    again = await client.post(RUNS.format("keyed-starts"), json=body, headers={"Idempotency-Key": "in-body"})
    assert (first.status_code, again.status_code) == (201, 200)
    mismatch = await client.post(RUNS.format("keyed-starts"), json=body, headers={"Idempotency-Key": "other"})
    assert mismatch.status_code == 422 and mismatch.json()["error"]["code"] == "idempotency_key_mismatch"
    too_long = await client.post(RUNS.format("keyed-starts"), json={}, headers={"Idempotency-Key": "k" * 256})
    assert too_long.status_code == 422, too_long.text


async def test_many_identical_starts_at_once_make_one_run(engine: Engine, client: httpx.AsyncClient) -> None:
    key = {"Idempotency-Key": str(uuid.uuid4())}
    answers = await asyncio.gather(
        *(
            client.post(RUNS.format("keyed-starts"), json={"payload": {"n": 7}}, headers=key)
            for _ in range(40)
        )
    )
    assert sorted(a.status_code for a in answers) == [200] * 39 + [201], [a.text for a in answers[:2]]
    assert len({a.json()["id"] for a in answers}) == 1
    assert await count_runs(engine, "keyed-starts") == 1


async def test_the_engine_refuses_a_bad_key_and_keeps_other_conflicts(engine: Engine) -> None:
    await engine.publish_workflow(FLOW)
    with pytest.raises(Exception, match="idempotency key is 1 to 255"):
        await engine.start_run_once("keyed-starts", {}, idempotency_key="bad\nkey")
    made = await engine.start_run_once("keyed-starts", {}, enrollment_key="acct-1", idempotency_key="a")
    replay = await engine.start_run_once("keyed-starts", {}, enrollment_key="acct-1", idempotency_key="a")
    assert replay.replayed and replay.run.id == made.run.id, "a replay is not an enrollment conflict"
    with pytest.raises(ConflictError) as refused:
        await engine.start_run_once("keyed-starts", {}, enrollment_key="acct-1", idempotency_key="b")
    assert refused.value.code == "run_already_active"
