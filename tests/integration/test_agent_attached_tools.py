"""Action nodes attached to an agent node are its tools (issue 12, seed 001's attached TOOL
nodes): offered to the model by id with a schema from their templates or ``parameters``, run by
their kind's own runner as steps of the agent's run, never as steps of the graph."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from agentflow.core.chat import Message, ModelRequest
from agentflow.core.errors import ConfigError
from agentflow.core.tools import ToolRegistry, tool
from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from tests.conftest import make_settings
from tests.support.agents import calls, running_worker, until
from tests.support.scripted_http import ScriptedServer, json_reply


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as scripted:
        yield scripted


@pytest.fixture
async def engine(database_url: str, server: ScriptedServer) -> AsyncIterator[Engine]:
    settings = make_settings(database_url, http_allow=f"127.0.0.1:{server.port}")
    eng = await Engine.connect(settings, migrate_schema=False)
    yield eng
    await eng.close()


def support_flow(server: ScriptedServer, **agent: Any) -> dict[str, Any]:
    return {
        "name": "support",
        "kind": "structured",
        "nodes": [
            {
                "id": "helper",
                "type": "agent",
                "prompt": "Answer {{ payload.customer }} about order {{ payload.order }}.",
                "attach": ["lookup_order", "tell_owner", "discount"],
                **agent,
            },
            {
                "id": "lookup_order",
                "type": "http_request",
                "description": "Look an order up by its id.",
                "url": server.url + "/orders/{{ args.order_id }}",
                "headers": {"X-Customer": "{{ payload.customer }}"},
            },
            {
                "id": "tell_owner",
                "type": "send_message",
                "channel": "in_app",
                "to": "{{ args.owner }}",
                "body": "{{ args.text }}",
            },
            {
                "id": "discount",
                "type": "tool",
                "tool": "quote_discount",
                "args": {"percent": "{{ args.percent }}"},
                "parameters": {
                    "type": "object",
                    "properties": {"percent": {"type": "integer", "minimum": 0, "maximum": 30}},
                    "required": ["percent"],
                    "additionalProperties": False,
                },
            },
            {"id": "done", "type": "finish", "output": "{{ input.summary }}"},
        ],
    }


REGISTRY = ToolRegistry()


@tool(name="quote_discount", registry=REGISTRY)
def quote_discount(percent: int) -> dict[str, Any]:
    """A discount quote (the test's registered Python tool)."""
    return {"quote": f"{percent}% off", "type": type(percent).__name__}


def model_calling(*decisions: Message) -> tuple[ScriptedProvider, list[ModelRequest]]:
    seen: list[ModelRequest] = []
    queue = list(decisions)

    def respond(request: ModelRequest) -> Message:
        seen.append(request)
        return queue.pop(0) if queue else calls(("complete", {"summary": "answered"}))

    return ScriptedProvider(respond), seen


async def test_attached_nodes_are_the_agents_tools_run_by_their_own_runners(
    engine: Engine, server: ScriptedServer
) -> None:
    server.script("/orders/42", json_reply({"id": 42, "status": "shipped"}))
    registry = REGISTRY
    model, seen = model_calling(
        calls(
            ("lookup_order", {"order_id": "42"}),
            ("tell_owner", {"owner": "dana", "text": "Ann asked about order 42"}),
            ("discount", {"percent": 10}),
        )
    )
    await engine.publish_workflow(support_flow(server))
    async with running_worker(engine, model=model, tools=registry):
        run = await engine.start_run("support", {"customer": "Ann", "order": 42})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    offered = {t.name: t for t in seen[0].tools}
    assert offered["lookup_order"].description == "Look an order up by its id."
    assert offered["lookup_order"].parameters["properties"] == {"order_id": {"type": "string"}}
    assert offered["tell_owner"].parameters["required"] == ["owner", "text"]
    assert offered["discount"].parameters["properties"]["percent"]["maximum"] == 30
    assert [s.node_id for s in await engine.list_steps(run.id)] == ["helper", "helper", "done"], (
        "attached nodes are no steps of the graph"
    )
    child = await engine.db.pool.fetchval("SELECT id FROM runs WHERE parent_run_id = $1", run.id)
    steps = [s for s in await engine.list_steps(child) if s.kind == "agent.tool"]
    by_name = {s.name: s for s in steps}
    lookup = by_name["lookup_order"]
    assert lookup.output["result"]["body"] == {"id": 42, "status": "shipped"}
    (request,) = server.requests("/orders/42")
    assert request.header("X-Customer") == "Ann", "the node's templates see the run's payload"
    assert request.header("Idempotency-Key") == f"{child}:{lookup.seq}", "the agent step's key"
    notes = await engine.db.pool.fetch("SELECT recipient, body, run_id FROM notifications")
    assert [(n["recipient"], n["body"], n["run_id"]) for n in notes] == [
        ("dana", "Ann asked about order 42", child)
    ], "written once, by the step's checkpoint"
    assert by_name["discount"].output["result"] == {"quote": "10% off", "type": "int"}


async def test_arguments_that_break_the_schema_are_refused_to_the_model(
    engine: Engine, server: ScriptedServer
) -> None:
    registry = REGISTRY
    model, seen = model_calling(calls(("discount", {"percent": 90})))
    await engine.publish_workflow(support_flow(server))
    async with running_worker(engine, model=model, tools=registry):
        run = await engine.start_run("support", {"customer": "Ann", "order": 1})
        await until(engine, run.id, lambda r: r.status.is_terminal)
    told = [m.content for m in seen[1].messages if m.role == "tool"]
    assert any("invalid_tool_args" in t and "90 is greater than the maximum of 30" in t for t in told), told


async def test_publishing_refuses_attached_tools_that_clash_or_are_not_tools(
    engine: Engine, server: ScriptedServer
) -> None:
    clash = support_flow(server)
    clash["nodes"][1]["id"] = "complete"
    clash["nodes"][0]["attach"] = ["complete", "tell_owner", "discount"]
    with pytest.raises(ConfigError) as caught:
        await engine.publish_workflow(clash)
    assert "'complete' is already one of the agent's tools" in str(caught.value.info.details["errors"])
    loop = support_flow(server)
    loop["nodes"].append({"id": "each", "type": "for_each", "items": "{{ payload.x }}"})
    loop["nodes"][0]["attach"].append("each")
    with pytest.raises(ConfigError) as caught:
        await engine.publish_workflow(loop)
    assert "(for_each) cannot be attached" in str(caught.value.info.details["errors"])
