"""Run search through a real API server on the real database: exact filters, run variables,
ranges, pagination, light rows, and a 422 for every parameter it does not know."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.api.app import create_app
from agentflow.core.run_filters import parse_run_filter
from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from tests.integration.test_dispatch import dispatch_all
from tests.support.agents import running_worker, until
from tests.support.http_server import serve

TIERED = {
    "name": "tiered",
    "kind": "structured",
    "state_definition": {"tier": {"type": "string", "default": "basic"}},
    "nodes": [{"id": "e", "type": "tool", "tool": "echo"}],
}
PLAIN = {"name": "plain", "kind": "structured", "nodes": [{"id": "e", "type": "tool", "tool": "echo"}]}


@pytest.fixture
async def seeded(engine: Engine) -> dict[str, Any]:
    """Three completed runs over two workflows, then one canceled before it ran."""
    await engine.publish_workflow(TIERED)
    await engine.publish_workflow(PLAIN)
    before = datetime.now(UTC) - timedelta(seconds=5)
    gold = await engine.start_run("tiered", {}, state={"tier": "gold"}, enrollment_key="k1")
    silver = await engine.start_run("tiered", {}, state={"tier": "silver"})
    other = await engine.start_run("plain", {})
    worker = engine.worker(concurrency=4, dispatch=False)
    running = asyncio.create_task(worker.run())
    try:
        for run in (gold, silver, other):
            assert (await engine.wait_for_run(run.id, timeout=30)).status == "completed"
    finally:
        worker.stop()
        await asyncio.wait_for(running, 10)
    stopped = await engine.start_run("tiered", {})
    await engine.cancel_run(stopped.id)
    await engine.db.pool.execute("UPDATE runs SET account_id = 'acme' WHERE id = $1", gold.id)
    after = datetime.now(UTC) + timedelta(seconds=5)
    ids = {"gold": gold.id, "silver": silver.id, "other": other.id, "stopped": stopped.id}
    return {"ids": ids, "before": before, "after": after, "tiered": gold.workflow_id}


async def found(client: httpx.AsyncClient, params: dict[str, str], path: str = "/api/runs") -> set[str]:
    response = await client.get(path, params=params)
    assert response.status_code == 200, response.text
    return {run["id"] for run in response.json()["runs"]}


async def test_filters_find_exactly_the_matching_runs(engine: Engine, seeded: dict[str, Any]) -> None:
    ids = {name: str(run_id) for name, run_id in seeded["ids"].items()}
    window = {"started[gte]": seeded["before"].isoformat(), "ended[lte]": seeded["after"].isoformat()}
    cases: list[tuple[dict[str, str], set[str]]] = [
        ({}, set(ids.values())),
        ({"status": "completed"}, {ids["gold"], ids["silver"], ids["other"]}),
        ({"status": "canceled"}, {ids["stopped"]}),
        ({"workflow_id": str(seeded["tiered"])}, {ids["gold"], ids["silver"], ids["stopped"]}),
        ({"workflow_id": str(seeded["tiered"]), "version": "1", "status": "completed"}, {ids["gold"], ids["silver"]}),
        ({"version": "2"}, set()),
        ({"run_id": ids["silver"]}, {ids["silver"]}),
        ({"enrollment_key": "k1"}, {ids["gold"]}),
        ({"account_id": "acme"}, {ids["gold"]}),
        ({"state[tier]": "gold"}, {ids["gold"]}),
        ({"state[tier]": "basic"}, {ids["stopped"]}),
        ({"state[tier]": "gold", "state[other]": "x"}, set()),
        (window, {ids["gold"], ids["silver"], ids["other"]}),
        ({"ended[lt]": seeded["before"].isoformat()}, set()),
        ({"duration[gte]": "0", "status": "completed"}, {ids["gold"], ids["silver"], ids["other"]}),
        ({"tokens[gte]": "1"}, set()),
        ({"usd[lte]": "0"}, set(ids.values())),
        ({"trigger": "manual"}, set(ids.values())),
        ({"trigger": "event"}, set()),
        ({"created[gt]": seeded["after"].isoformat()}, set()),
    ]  # fmt: skip
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as client:
        for params, expected in cases:
            assert await found(client, params) == expected, params
        own = "/api/ai/workflows/tiered/runs"
        assert await found(client, {"state[tier]": "silver"}, own) == {ids["silver"]}
        assert await found(client, {"status": "completed"}, own) == {ids["gold"], ids["silver"]}


async def test_pages_and_light_rows(engine: Engine, seeded: dict[str, Any]) -> None:
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as client:
        first = (await client.get("/api/runs", params={"limit": "3", "exclude": "state"})).json()
        rest = (await client.get("/api/runs", params={"limit": "3", "before": first["next_before"]})).json()
    assert len(first["runs"]) == 3 and first["next_before"] == first["runs"][-1]["id"]
    assert {r["state"] == {} for r in first["runs"]} == {True}
    assert len(rest["runs"]) == 1 and rest["next_before"] is None
    assert {r["id"] for r in first["runs"] + rest["runs"]} == {str(i) for i in seeded["ids"].values()}


@pytest.mark.parametrize(
    ("path", "query", "code", "named"),
    [
        ("/api/runs", "stauts=completed", "query_parameter_unknown", "stauts"),
        ("/api/runs", "started[between]=1", "query_parameter_unknown", "started[between]"),
        ("/api/runs", "started[gte]=yesterday", "query_parameter_invalid", "started[gte]"),
        ("/api/runs", "status=completed&status=failed", "query_parameter_invalid", "status"),
        ("/api/runs", "limit=0", "query_parameter_invalid", "limit"),
        ("/api/ai/workflows/plain/runs", "workflow_id=x", "query_parameter_unknown", "workflow_id"),
        ("/api/ai/workflows/plain/runs", "colour=red", "query_parameter_unknown", "colour"),
    ],
)
async def test_an_unknown_or_malformed_parameter_is_a_422_naming_it(
    engine: Engine, path: str, query: str, code: str, named: str
) -> None:
    await engine.publish_workflow(PLAIN)
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as client:
        response = await client.get(f"{path}?{query}")
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["details"]["parameter"] == named, error


async def test_runs_by_the_model_they_called_and_by_employee(engine: Engine) -> None:
    for size in ("small", "large"):
        await engine.publish_workflow(
            {"name": f"asks-{size}", "kind": "structured",
             "nodes": [{"id": "ask", "type": "llm", "model": f"scripted:{size}", "prompt": "hi"}]}
        )  # fmt: skip
    await engine.publish_workflow(
        {
            "name": "helper",
            "kind": "employee",
            "title": "Helper",
            "prompt": "You help.",
            "model": "scripted:desk",
            "on_text": "complete",
        }
    )
    model = ScriptedProvider.from_replies(["one", "two", "three"])
    async with running_worker(engine, model=model):
        small = await engine.start_run("asks-small", {})
        large = await engine.start_run("asks-large", {})
        helper = await engine.start_run("helper", {"message": "Hello"})
        for run in (small, large, helper):
            ended = await until(engine, run.id, lambda r: r.status.is_terminal)
            assert ended.status == "completed", ended.error
    plain = await engine.start_run("asks-small", {})  # never ran: it called nothing yet
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as client:

        async def ids(query: str) -> set[str]:
            response = await client.get(f"/api/runs?{query}")
            assert response.status_code == 200, response.text
            return {run["id"] for run in response.json()["runs"]}

        assert await ids("model=scripted:small") == {str(small.id)}
        assert await ids("model=scripted:large") == {str(large.id)}
        assert await ids("model=scripted:desk&employee=helper") == {str(helper.id)}
        assert await ids("employee=helper") == {str(helper.id)}
        assert await ids("employee=asks-small") == set(), "asks-small is not an employee"
        assert await ids("model=scripted") == set(), "the whole name, not a prefix"
    assert str(plain.id) not in await ids_of(engine, "small")


async def ids_of(engine: Engine, model: str) -> set[str]:
    return {str(r.id) for r in await engine.search_runs(parse_run_filter([("model", f"scripted:{model}")]))}


async def test_runs_by_trigger_id_and_employee_id(engine: Engine) -> None:
    await engine.publish_workflow({**PLAIN, "name": "on-order", "trigger": {"topics": ["order.placed"]}})
    await engine.publish_workflow(
        {
            "name": "helper",
            "kind": "employee",
            "title": "Helper",
            "prompt": "You help.",
            "on_text": "complete",
        }
    )
    await engine.events.publish(
        [{"topic": "order.placed", "message_id": f"order-{n}", "data": {}} for n in range(3)]
    )
    await dispatch_all(engine)
    helper = await engine.start_run("helper", {"message": "Hello"})
    manual = await engine.start_run("on-order", {})
    helper_id = helper.workflow_id
    async with serve(create_app(engine)) as base, httpx.AsyncClient(base_url=base) as client:
        by_event = await client.get("/api/runs", params={"trigger_id": "order-1"})
        assert by_event.status_code == 200, by_event.text
        (row,) = by_event.json()["runs"]
        assert row["trigger_id"] == "order-1" and row["id"] != str(manual.id)
        assert await found(client, {"trigger_id": "order-9"}) == set()
        assert await found(client, {"employee_id": str(helper_id)}) == {str(helper.id)}
        assert await found(client, {"ai_employee_id": str(helper_id)}) == {str(helper.id)}
        assert await found(client, {"employee_id": str(row["workflow_id"])}) == set(), "not an employee"
        bad = await client.get("/api/runs", params={"employee_id": "nope"})
        assert (bad.status_code, bad.json()["error"]["details"]["parameter"]) == (422, "employee_id")
