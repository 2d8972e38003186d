"""The run list's columns of seed 002 (issue 15): each row carries its model, trigger id and
URL, debounce key and the conversation's fields, flat, whichever way the run was started."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.engine import Engine
from tests.integration.test_debounce import close_all
from tests.integration.test_dispatch import dispatch_all

COLUMNS = ("model", "trigger_id", "trigger_url", "debounce_key", "conversation_id", "conversation_channel",
           "conversation_title", "employee_id", "parent_workflow")  # fmt: skip


def flow(name: str, **trigger: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "structured",
        "trigger": {"topics": [f"{name}.*"], **trigger} if trigger or name == "evented" else {"topics": []},
        "nodes": [{"id": "pause", "type": "wait", "duration": "1h"}],
    }


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


async def test_each_row_carries_the_seed_002_columns(engine: Engine, api: httpx.AsyncClient) -> None:
    for config in (
        flow("manual"),
        flow("evented"),
        flow("hooked"),
        flow("batched", debounce={"seconds": 60, "key": "k"}),
    ):
        await engine.publish_workflow(config)
    manual = (await engine.start_run_once("manual", {}, conversation={"id": "T-1", "channel": "email",
                                                                      "title": "Refund"})).run  # fmt: skip
    await engine.db.pool.execute(
        "UPDATE runs SET costs = $2 WHERE id = $1",
        manual.id,
        [{"key_type": "openai:gpt-4o-mini", "calls": 1}, {"key_type": "anthropic:claude-sonnet", "calls": 3}],
    )
    await engine.events.publish([
        {"topic": "evented.happened", "message_id": "ev-1", "data": {}},
        {"topic": "batched.happened", "message_id": "b-1", "data": {"k": 1}},
    ])  # fmt: skip
    await dispatch_all(engine)
    await close_all(engine)
    _, key = await engine.keys.create("api", "hooks", role="operator")
    fired = await api.post("/api/private/trigger/hooked", json={}, headers={"Authorization": f"Bearer {key}"})
    assert fired.status_code in (200, 201, 202), fired.text
    # A run the manual one started (as run_workflow's children are), and an employee's run.
    evented = (await engine.list_runs(workflow="evented"))[0]
    await engine.db.pool.execute("UPDATE runs SET parent_run_id = $2 WHERE id = $1", evented.id, manual.id)
    analyst = await engine.publish_workflow(
        {"name": "analyst", "kind": "employee", "prompt": "Answer briefly."}
    )
    await engine.db.pool.execute(
        "INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, input, state, due_at)"
        " VALUES ($1, gen_random_uuid(), $2, 1, 'created', '{}', '{}', now() + interval '1 hour')",
        manual.workspace_id, analyst.workflow.id,
    )  # fmt: skip
    rows = (await api.get("/api/runs", params={"exclude": "state"})).json()["runs"]
    by_workflow = {}
    for row in rows:
        name = (await engine.get_workflow(row["workflow_id"])).name
        by_workflow[name] = {column: row[column] for column in COLUMNS}
    assert by_workflow["manual"] == {
        "model": "anthropic:claude-sonnet", "trigger_id": None, "trigger_url": None, "debounce_key": None,
        "conversation_id": "T-1", "conversation_channel": "email", "conversation_title": "Refund",
        "employee_id": None, "parent_workflow": None,
    }  # fmt: skip
    assert by_workflow["evented"]["parent_workflow"] == "manual"
    assert by_workflow["analyst"]["employee_id"] == str(analyst.workflow.id)
    assert by_workflow["evented"]["trigger_id"] == "ev-1" and by_workflow["evented"]["trigger_url"] is None
    hooked = by_workflow["hooked"]
    assert hooked["trigger_url"] == f"/api/private/trigger/{(await engine.get_workflow('hooked')).id}"
    assert hooked["trigger_id"] is not None, "a webhook's event id"
    assert by_workflow["batched"]["debounce_key"] == "1", "the window of payload.k = 1"
    assert by_workflow["batched"]["trigger_id"] == "b-1"
