"""Following a run list live (issue 15): ``GET /api/runs/stream`` takes the list's filters,
sends the list first, then each run that appears on it or changes, and each that leaves it;
through a real server, with a worker moving the runs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from agentflow.api.app import create_app
from agentflow.engine import Engine
from tests.support.agents import running_worker, until
from tests.support.http_server import serve

WAITING = {
    "name": "parked",
    "kind": "structured",
    "nodes": [
        {"id": "pause", "type": "wait", "duration": "1h", "next": "done"},
        {"id": "done", "type": "finish"},
    ],
}
QUICK = {"name": "quick", "kind": "structured", "nodes": [{"id": "done", "type": "finish", "output": "hi"}]}


async def events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The events of a server-sent event stream as they come (comments skipped)."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line == "":
            if "event" in fields:
                yield {"event": fields["event"], "data": json.loads(fields["data"])}
            fields = {}
        elif not line.startswith(":") and ": " in line:
            name, value = line.split(": ", 1)
            fields[name] = value


async def test_a_filtered_list_is_sent_then_its_changes(engine: Engine) -> None:
    await engine.publish_workflow(WAITING)
    await engine.publish_workflow(QUICK)
    async with (
        running_worker(engine),
        serve(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as api,
    ):
        first = await engine.start_run("parked", {})
        await until(engine, first.id, lambda r: r.status == "waiting")
        async with api.stream(
            "GET", "/api/runs/stream", params={"status": "waiting"}, timeout=30
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            stream = events(response)
            listed = await anext(stream)
            assert listed["event"] == "list"
            assert [r["id"] for r in listed["data"]["runs"]] == [str(first.id)]
            # A run that comes to wait appears; a run of another status never does.
            await engine.start_run("quick", {})
            second = await engine.start_run("parked", {})
            appeared = await asyncio.wait_for(anext(stream), 15)
            assert appeared["event"] == "run" and appeared["data"]["run"]["id"] == str(second.id)
            assert appeared["data"]["run"]["status"] == "waiting"
            # A canceled run leaves the list.
            await engine.cancel_run(first.id)
            left = await asyncio.wait_for(anext(stream), 15)
            assert left == {"event": "removed", "data": {"run_id": str(first.id)}}


async def test_an_unfiltered_list_follows_a_run_to_its_end_and_bad_filters_are_refused(
    engine: Engine,
) -> None:
    await engine.publish_workflow(WAITING)
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as api:
        refused = await api.get("/api/runs/stream", params={"colour": "blue"})
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "query_parameter_unknown"
        async with api.stream("GET", "/api/runs/stream", timeout=30) as response:
            stream = events(response)
            assert (await anext(stream))["data"] == {"runs": []}
            run = await engine.start_run("parked", {})
            created = await asyncio.wait_for(anext(stream), 15)
            assert (
                created["data"]["run"]["id"] == str(run.id) and created["data"]["run"]["status"] == "created"
            )
            async with running_worker(engine):
                seen = []
                while not seen or seen[-1] != "waiting":
                    changed = await asyncio.wait_for(anext(stream), 15)
                    assert changed["data"]["run"]["id"] == str(run.id)
                    seen.append(changed["data"]["run"]["status"])
        other = await engine.workspaces.create("elsewhere")
        token = other[1]
        async with api.stream(
            "GET", "/api/runs/stream", headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as response:
            assert (await anext(events(response)))["data"] == {"runs": []}, "another workspace sees none"
