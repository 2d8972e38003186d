"""An agent's ``output_schema`` end to end (issue 12): the agent completes with ``data`` that
must match it; a call that breaks it is sent back with what is wrong, a bounded number of
times, then the run fails with ``output_invalid``; the graph reads ``input.data``."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow.core.chat import Message, ModelRequest
from agentflow.core.errors import ConfigError
from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from tests.support.agents import agent_workflow, calls, running_worker, until

SCHEMA = {
    "type": "object",
    "properties": {"priority": {"type": "string", "enum": ["low", "high"]}, "reason": {"type": "string"}},
    "required": ["priority"],
    "additionalProperties": False,
}


def triage(finish: str = "{{ input.data.priority }}: {{ input.summary }}", **agent: Any) -> dict[str, Any]:
    node = {"id": "triage", "type": "agent", "prompt": "Triage: {{ payload.text }}", "output_schema": SCHEMA}
    return {
        "name": "triage",
        "kind": "structured",
        "nodes": [{**node, **agent}, {"id": "done", "type": "finish", "output": finish}],
    }


def completing(*datas: Any) -> tuple[ScriptedProvider, list[ModelRequest]]:
    """A model that completes with each of ``datas`` in turn."""
    seen: list[ModelRequest] = []
    queue = list(datas)

    def respond(request: ModelRequest) -> Message:
        seen.append(request)
        return calls(("complete", {"summary": "triaged", "data": queue.pop(0)}))

    return ScriptedProvider(respond), seen


async def test_the_graph_reads_the_agents_data_and_the_model_is_offered_the_schema(engine: Engine) -> None:
    model, seen = completing({"priority": "high", "reason": "outage"})
    await engine.publish_workflow(triage())
    async with running_worker(engine, model=model):
        run = await engine.start_run("triage", {"text": "site down"})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    assert done.output == "high: triaged"
    complete = next(t for t in seen[0].tools if t.name == "complete")
    assert complete.parameters["properties"]["data"] == SCHEMA
    assert complete.parameters["required"] == ["summary", "data"]


async def test_data_that_breaks_the_schema_is_sent_back_until_it_fits(engine: Engine) -> None:
    model, seen = completing({"priority": "urgent"}, {"priority": "low"})
    await engine.publish_workflow(triage())
    async with running_worker(engine, model=model):
        run = await engine.start_run("triage", {"text": "typo on page"})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    assert done.output == "low: triaged"
    told = [m.content for m in seen[1].messages if m.role == "tool"]
    assert any("'urgent' is not one of ['low', 'high']" in text for text in told), told


async def test_data_that_never_fits_fails_with_output_invalid_after_the_retries(engine: Engine) -> None:
    model, seen = completing(*[{"priority": "urgent"}] * 5)
    await engine.publish_workflow(triage(output_retries=1))
    async with running_worker(engine, model=model):
        run = await engine.start_run("triage", {"text": "?"})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "failed"
    assert done.error["code"] == "output_invalid"
    assert len(seen) == 2, "the first answer and one retry"
    child = await engine.db.pool.fetchval("SELECT id FROM runs WHERE parent_run_id = $1", run.id)
    agent = await engine.get_run(child)
    assert agent.error["details"]["attempts"] == 2
    assert "'urgent' is not one of" in agent.error["details"]["problems"]


async def test_publishing_checks_what_the_graph_reads_of_the_data(engine: Engine) -> None:
    with pytest.raises(ConfigError) as caught:
        await engine.publish_workflow(triage(finish="{{ input.data.severity }}"))
    assert "input.data.severity" in str(caught.value.info.details["errors"])
    with pytest.raises(ConfigError) as caught:
        await engine.publish_workflow(triage(output_schema={"type": "array"}))
    assert caught.value.info.details["errors"][0]["path"].startswith("nodes[0]")


async def test_an_agent_workflows_output_carries_data_from_the_default_model(engine: Engine) -> None:
    await engine.publish_workflow(agent_workflow("typed", output_schema=SCHEMA))
    async with running_worker(engine):
        run = await engine.start_run("typed", {"note": "manual"})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    assert done.output["data"]["priority"] in ("low", "high"), "the offline model fills what the schema asks"
