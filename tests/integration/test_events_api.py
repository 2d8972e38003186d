"""POST /api/events through a real server, and `agentflow events` as a process."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.engine import Engine
from tests.support.cli import cli_env, invoke_cli
from tests.support.http_server import serve


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        serve(create_app(engine)) as base_url,
        httpx.AsyncClient(base_url=base_url, timeout=30) as http,
    ):
        yield http


async def test_publish_one_then_a_batch_idempotently(client: httpx.AsyncClient, engine: Engine) -> None:
    one = await client.post(
        "/api/events", json={"topic": "email.received", "message_id": "m1", "data": {"account_id": "acme"}}
    )
    assert one.status_code == 201, one.text
    body = one.json()
    assert body["created"] == 1 and body["events"][0]["account_id"] == "acme"
    again = await client.post(
        "/api/events", json={"topic": "email.received", "message_id": "m1", "data": {"other": 1}}
    )
    assert again.status_code == 200 and again.json()["events"][0]["seq"] == body["events"][0]["seq"]
    batch = await client.post(
        "/api/events",
        json={
            "events": [
                {"topic": "ticket.opened", "message_id": "t1"},
                {"topic": "email.received", "message_id": "m1"},
                {"topic": "note.added"},
            ]
        },
    )
    assert batch.status_code == 201
    assert [e["created"] for e in batch.json()["events"]] == [True, False, True]
    assert await engine.db.pool.fetchval("SELECT count(*) FROM events") == 3


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"topic": "bad topic"}, 422, "event_invalid"),
        ({"topic": "t", "data": "not an object"}, 422, "event_invalid"),
        ({"topic": "t", "published_at": "2026-01-01T00:00:00"}, 422, "event_invalid"),
        ({"topic": "t", "message_id": "x" * 10_000}, 422, "event_invalid"),
        ({"events": []}, 422, "event_invalid"),
        ({"events": [1, 2]}, 422, "event_invalid"),
        ({"events": [{"topic": "t"}] * 1001}, 422, "batch_too_large"),
        ({"topic": "t", "unknown": 1}, 422, "event_invalid"),
    ],
)
async def test_bad_events_get_documented_4xx(
    client: httpx.AsyncClient, engine: Engine, body: object, status: int, code: str
) -> None:
    response = await client.post("/api/events", json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert await engine.db.pool.fetchval("SELECT count(*) FROM events") == 0


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ('{"topic": "t", "data": {"x": "\\u0000"}}', "unstorable_text"),
        ('{"topic": "t", "data": {"x": "\\ud800"}}', "unstorable_text"),
        ('{"topic": "t", "data": {"x": 1e400}}', "number_out_of_range"),
        ("[" * 200 + "]" * 200, "too_deep"),
    ],
)
async def test_hostile_bodies_never_reach_the_log(
    client: httpx.AsyncClient, engine: Engine, raw: str, code: str
) -> None:
    response = await client.post("/api/events", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["code"] == code
    assert await engine.db.pool.fetchval("SELECT count(*) FROM events") == 0


async def test_unknown_workspace_is_404(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/api/events", json={"topic": "t"}, headers={"X-Agentflow-Workspace": str(uuid.uuid4())}
    )
    assert response.status_code == 404 and response.json()["error"]["code"] == "workspace_not_found"


def test_cli_publish_and_account_view(database_url: str) -> None:
    env = cli_env(database_url)
    first = invoke_cli(
        [
            "events",
            "publish",
            "email.received",
            "-m",
            "c1",
            "-d",
            json.dumps({"account_id": "acme", "s": "Hi"}),
        ],
        env,
    )
    assert first.returncode == 0 and "published email.received c1" in first.stdout, first.stderr
    again = invoke_cli(["events", "publish", "email.received", "-m", "c1"], env)
    assert "already published" in again.stdout
    shown = invoke_cli(["events", "account", "acme"], env)
    assert "email.received" in shown.stdout and "c1" in shown.stdout
    bad = invoke_cli(["events", "publish", "bad topic"], env)
    assert bad.returncode == 1 and "event_invalid" in bad.stderr and "Traceback" not in bad.stderr


async def test_metrics_show_consumer_lag(client: httpx.AsyncClient, engine: Engine) -> None:
    await engine.events.publish([{"topic": "t", "message_id": f"m{i}"} for i in range(3)])

    async def nothing(conn: object, batch: object) -> None:
        return None

    await engine.events.consumer("lag-test", nothing, batch_size=1).consume_batch()  # type: ignore[arg-type]
    text = (await client.get("/metrics")).text
    assert 'agentflow_consumer_lag_events{consumer="lag-test"} 2.0' in text
    assert 'agentflow_consumer_lag_seconds{consumer="lag-test"}' in text
