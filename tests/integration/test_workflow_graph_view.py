"""A workflow's graph as the API shows it (issue 15: the console draws it): nodes with kinds and
ports, links with ports whichever way the config wrote them (``edges``, ``next``, list order),
nodes attached to an agent, and where a run starts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.engine import Engine
from tests.integration.test_graph_runs import DIAMOND

ATTACHED = {
    "name": "support",
    "kind": "structured",
    "nodes": [
        {"id": "helper", "type": "agent", "prompt": "Help.", "attach": ["lookup", "remember"]},
        {"id": "lookup", "type": "tool", "tool": "echo", "args": {"value": "{{ args.id }}"}},
        {"id": "remember", "type": "memory", "key": "{{ payload.customer }}"},
        {"id": "done", "type": "finish", "output": "{{ input.summary }}"},
    ],
}


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


async def graph_of(api: httpx.AsyncClient, config: dict[str, Any]) -> Any:
    assert (await api.post("/api/ai/workflows", json=config)).status_code == 201
    found = await api.get(f"/api/ai/workflows/{config['name']}")
    assert found.status_code == 200
    return found.json()["graph"]


async def test_a_diamond_shows_its_ports_links_and_entry(api: httpx.AsyncClient) -> None:
    graph = await graph_of(api, DIAMOND)
    assert graph["entry"] == "route"
    kinds = {n["id"]: (n["type"], n["ports"]) for n in graph["nodes"]}
    assert kinds["route"] == ("condition", ["big", "default"])
    assert kinds["join"][0] == "merge" and kinds["done"] == ("finish", [])
    links = {(link["from"], link["port"], link["to"]) for link in graph["links"]}
    assert ("route", "big", "audit") in links and ("route", "default", "small") in links
    assert ("join", "result", "done") in links and len(links) == 7


async def test_next_and_list_order_are_resolved_and_attached_nodes_named(api: httpx.AsyncClient) -> None:
    linear = {
        "name": "linear",
        "kind": "structured",
        "nodes": [
            {"id": "a", "type": "wait", "duration": "1s", "next": "c"},
            {"id": "c", "type": "wait", "duration": "1s"},
            {"id": "b", "type": "finish", "output": "b"},
        ],
    }
    graph = await graph_of(api, linear)
    assert [(link["from"], link["port"], link["to"]) for link in graph["links"]] == [
        ("a", "result", "c"),
        ("c", "result", "b"),
    ], "a's next, then list order"
    attached = await graph_of(api, ATTACHED)
    owners = {n["id"]: n["attached_to"] for n in attached["nodes"]}
    assert owners == {"helper": None, "lookup": "helper", "remember": "helper", "done": None}
    assert [(link["from"], link["to"]) for link in attached["links"]] == [("helper", "done")]
    assert attached["entry"] == "helper"


async def test_other_kinds_have_no_graph(api: httpx.AsyncClient) -> None:
    agent = {"name": "helper", "kind": "agent", "prompt": "Help."}
    assert await graph_of(api, agent) is None
