"""A run's server-sent events: its detail now and at each change, until it ends."""

from __future__ import annotations

import json
from typing import Any

import httpx

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.api.app import create_app
from agentflow.engine import Engine
from tests.support.agents import running_worker
from tests.support.http_server import serve


async def events(response: httpx.Response) -> list[dict[str, Any]]:
    """The ``run`` events of a stream, until it closes."""
    found, kind = [], None
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            kind = line.removeprefix("event: ")
        elif line.startswith("data: ") and kind == "run":
            found.append(json.loads(line.removeprefix("data: ")))
    return found


async def test_the_stream_sends_the_run_at_each_change_until_it_ends(engine: Engine) -> None:
    await engine.publish_workflow({
        "name": "stepper", "kind": "structured",
        "nodes": [{"id": "one", "type": "tool", "tool": "add", "args": {"a": 1, "b": 1}},
                  {"id": "nap", "type": "wait", "duration": "0.4s"},
                  {"id": "two", "type": "tool", "tool": "add", "args": {"a": 2, "b": 2}}],
    })  # fmt: skip
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base, timeout=60) as api:
        run = await engine.start_run("stepper", {})
        path = f"/api/ai/workflows/stepper/runs/{run.id}/stream"
        async with running_worker(engine), api.stream("GET", path) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            seen = await events(response)
        ended = await api.get(path)  # an ended run: one event, then the stream closes
        missing = await api.get(f"/api/ai/workflows/stepper/runs/{engine_id()}/stream")
    statuses = [e["status"] for e in seen]
    assert statuses[-1] == "completed" and len(seen) >= 3, statuses
    assert [s["node_id"] for s in seen[-1]["steps"]] == ["one", "nap", "two"]
    assert "waiting" in statuses, "the wait was seen as it happened"
    assert ended.text.count("event: run") == 1 and '"status":"completed"' in ended.text
    assert missing.status_code == 404


def engine_id() -> str:
    return "00000000-0000-4000-8000-000000000000"
