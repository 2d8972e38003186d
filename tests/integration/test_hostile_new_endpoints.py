"""Hostile input to every endpoint of the events issue: documented 4xx, never 5xx, nothing stored."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.engine import Engine
from tests.conftest import make_settings
from tests.integration.test_api import HOSTILE, _chunks
from tests.support.http_server import error_code, serve

HUGE_ID = "x" * 10_240


@pytest.fixture
async def setup(database_url: str) -> AsyncIterator[tuple[httpx.AsyncClient, Engine, dict[str, str]]]:
    settings = make_settings(database_url, secret_key=base64.b64encode(os.urandom(32)).decode())
    engine = await Engine.connect(settings, migrate_schema=False)
    await engine.publish_workflow(
        {"name": "hooked", "kind": "structured", "nodes": [{"id": "done", "type": "finish"}]}
    )
    _, api_key = await engine.keys.create("api", "k")
    _, trigger_key = await engine.keys.create("trigger", "t")
    task_id = await engine.db.pool.fetchval(
        "INSERT INTO tasks (workspace_id, id, title) VALUES ('00000000-0000-0000-0000-000000000001',"
        " gen_random_uuid(), 'call them') RETURNING id"
    )
    try:
        async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
            yield http, engine, {"api": api_key, "trigger": trigger_key, "task": str(task_id)}
    finally:
        await engine.close()


def body_endpoints(ids: dict[str, str]) -> list[tuple[str, str, dict[str, str]]]:
    bearer = {"Authorization": f"Bearer {ids['api']}"}
    return [
        ("POST", "/api/private/trigger/hooked", bearer),
        ("POST", f"/api/public/trigger/{ids['trigger']}/hooked", {}),
        ("POST", "/api/public/trigger/hooked", {"X-Agentflow-Trigger-Key": ids["trigger"]}),
        ("POST", "/api/keys", {}),
        ("PATCH", f"/api/tasks/{ids['task']}", {}),
        ("POST", "/api/events", {}),
    ]


@pytest.mark.parametrize(("name", "body", "headers", "status", "code"), HOSTILE, ids=[h[0] for h in HOSTILE])
async def test_hostile_bodies_on_new_endpoints(
    setup: tuple[httpx.AsyncClient, Engine, dict[str, str]],
    name: str,
    body: Any,
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    http, engine, ids = setup
    for method, path, auth in body_endpoints(ids):
        content = _chunks(2 << 20) if body == "chunked" else body
        response = await http.request(
            method, path, content=content, headers={"content-type": "application/json", **auth, **headers}
        )
        assert error_code(response, status) == code, (method, path[:40], response.text[:200])
    counts = await engine.db.pool.fetchrow(
        "SELECT (SELECT count(*) FROM events) AS events, (SELECT count(*) FROM runs) AS runs,"
        " (SELECT count(*) FROM access_keys) AS keys, (SELECT revision FROM tasks) AS task_revision"
    )
    assert dict(counts) == {"events": 0, "runs": 0, "keys": 2, "task_revision": 0}, "nothing was stored"


async def test_huge_and_strange_ids_in_paths_queries_and_headers(
    setup: tuple[httpx.AsyncClient, Engine, dict[str, str]],
) -> None:
    http, engine, ids = setup
    bearer = {"Authorization": f"Bearer {ids['api']}"}
    cases: list[tuple[str, str, dict[str, str], int, str]] = [
        ("POST", f"/api/private/trigger/{HUGE_ID}", bearer, 404, "workflow_not_found"),
        ("POST", f"/api/public/trigger/{HUGE_ID}/hooked", {}, 401, "unauthorized"),
        ("POST", f"/api/public/trigger/{ids['trigger']}/{HUGE_ID}", {}, 404, "workflow_not_found"),
        ("POST", "/api/public/trigger/hooked", {"X-Agentflow-Trigger-Key": HUGE_ID}, 401, "unauthorized"),
        ("POST", "/api/private/trigger/hooked", {"Authorization": "Bearer " + HUGE_ID}, 401, "unauthorized"),
        (
            "POST",
            "/api/private/trigger/hooked",
            {**bearer, "Idempotency-Key": HUGE_ID},
            422,
            "request_id_invalid",
        ),
        ("PUT", f"/api/ai/workflows/{HUGE_ID}/webhook-secret", {}, 404, "workflow_not_found"),
        ("DELETE", f"/api/ai/workflows/{HUGE_ID}/webhook-secret", {}, 404, "workflow_not_found"),
        ("GET", f"/api/ai/workflows/{HUGE_ID}/decisions", {}, 404, "workflow_not_found"),
        (
            "GET",
            "/api/ai/workflows/hooked/decisions?before=99999999999999999999999",
            {},
            422,
            "invalid_request",
        ),
        ("GET", "/api/ai/workflows/hooked/decisions?limit=0", {}, 422, "invalid_request"),
        ("DELETE", f"/api/keys/{HUGE_ID}", {}, 404, "key_not_found"),
        ("GET", f"/api/tasks/{HUGE_ID}", {}, 404, "task_not_found"),
        ("PATCH", f"/api/tasks/{HUGE_ID}", {}, 404, "task_not_found"),
        ("POST", f"/api/tasks/{HUGE_ID}/complete", {}, 404, "task_not_found"),
        ("GET", f"/api/tasks?run_id={HUGE_ID}", {}, 422, "invalid_request"),
        ("GET", f"/api/accounts/{HUGE_ID}/events", {}, 422, "account_invalid"),
        ("GET", "/api/accounts/acme/events?source=" + "A" * 300, {}, 422, "source_invalid"),
        ("GET", "/api/accounts/acme/events?hours=1e400", {}, 422, "invalid_request"),
        ("GET", "/api/accounts/acme/events?hours=-1", {}, 422, "invalid_request"),
    ]
    for method, path, headers, status, code in cases:
        kwargs: dict[str, Any] = {"json": {}} if method in ("POST", "PATCH") else {}
        response = await http.request(method, path, headers=headers, **kwargs)
        assert error_code(response, status) == code, (method, path[:60], response.text[:200])
    assert await engine.db.pool.fetchval("SELECT count(*) FROM events") == 0
