"""AI teammates (issue 12, seed 002 ``employee`` workflows and "Assign AI"): a graph hands an
employee an assignment with attachments and a response schema and waits durably for its
validated answer; people message an employee, which remembers the conversation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agentflow.api.app import create_app
from agentflow.core.chat import Message, ModelRequest
from agentflow.core.errors import ConfigError
from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from tests.support.agents import calls, running_worker, until

ANALYST = {
    "name": "analyst",
    "kind": "employee",
    "title": "Renewal analyst",
    "prompt": "You are Rae, the renewal analyst. Answer what you are assigned, briefly.",
    "memory": {"key": "{{ payload.conversation_id | default(run.id) }}"},
}
VERDICT = {
    "type": "object",
    "properties": {"risk": {"type": "string", "enum": ["low", "high"]}, "why": {"type": "string"}},
    "required": ["risk"],
    "additionalProperties": False,
}


def renewal_review() -> dict[str, Any]:
    return {
        "name": "renewal-review",
        "kind": "structured",
        "nodes": [
            {
                "id": "assess",
                "type": "run_employee",
                "employee": "analyst",
                "assignment": "Assess the renewal risk of {{ payload.account }}.",
                "attachments": [{"title": "usage", "text": "{{ payload.usage }}"}],
                "response_schema": VERDICT,
                "conversation_id": "renewal-{{ payload.account }}",
            },
            {"id": "done", "type": "finish", "output": "{{ input.data.risk }}: {{ input.summary }}"},
        ],
    }


class Analyst:
    """Rae: completes with a verdict from what the assignment's attachments say."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    def respond(self, request: ModelRequest) -> Message:
        self.requests.append(request)
        context = "\n".join(m.content for m in request.messages)
        risk = "high" if "usage dropped" in context else "low"
        return calls(("complete", {"summary": f"{risk} risk", "data": {"risk": risk, "why": "usage"}}))


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


async def test_a_graph_assigns_work_to_an_employee_and_goes_on_with_its_validated_answer(
    engine: Engine,
) -> None:
    analyst = Analyst()
    await engine.publish_workflow(ANALYST)
    await engine.publish_workflow(renewal_review())
    async with running_worker(engine, model=ScriptedProvider(analyst.respond)):
        run = await engine.start_run("renewal-review", {"account": "Acme", "usage": "usage dropped 40%"})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    assert done.output == "high: high risk"
    child = await engine.db.pool.fetchrow(
        "SELECT r.id, r.input, r.conversation, w.name FROM runs r JOIN workflows w ON w.id = r.workflow_id"
        " WHERE r.parent_run_id = $1",
        run.id,
    )
    assert child["name"] == "analyst"
    assert child["input"]["assignment"] == "Assess the renewal risk of Acme."
    assert child["input"]["attachments"] == [{"title": "usage", "text": "usage dropped 40%"}]
    assert child["conversation"] == {"id": "renewal-Acme", "channel": "workflow"}, (
        "the talk is found by its id"
    )
    first = analyst.requests[0]
    assert "You are Rae, the renewal analyst." in first.messages[0].content, "the persona is its objective"
    complete = next(t for t in first.tools if t.name == "complete")
    assert complete.parameters["properties"]["data"] == VERDICT, "the assignment's schema shapes the answer"


async def test_an_answer_that_breaks_the_response_schema_fails_the_node(engine: Engine) -> None:
    wrong = ScriptedProvider(
        lambda request: calls(("complete", {"summary": "?", "data": {"risk": "medium"}}))
    )
    await engine.publish_workflow(ANALYST)
    await engine.publish_workflow(renewal_review())
    async with running_worker(engine, model=wrong):
        run = await engine.start_run("renewal-review", {"account": "Acme", "usage": "flat"})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "failed"
    assert done.error["code"] == "output_invalid"


async def test_publishing_refuses_an_assignment_to_what_is_not_an_employee(engine: Engine) -> None:
    with pytest.raises(ConfigError) as caught:
        await engine.publish_workflow(renewal_review())
    assert "no employee named 'analyst'" in str(caught.value.info.details["errors"])
    await engine.publish_workflow({"name": "analyst", "kind": "agent", "prompt": "Not an employee."})
    with pytest.raises(ConfigError) as caught:
        await engine.publish_workflow(renewal_review())
    assert "is a workflow of kind agent, not an employee" in str(caught.value.info.details["errors"])


async def test_people_message_an_employee_that_remembers_the_conversation(
    engine: Engine, api: httpx.AsyncClient
) -> None:
    heard: list[str] = []

    def respond(request: ModelRequest) -> Message:
        heard.append(request.messages[0].content)
        return calls(("complete", {"summary": "noted"}))

    await engine.publish_workflow(ANALYST)
    listed = await api.get("/api/employees")
    assert [e["name"] for e in listed.json()["employees"]] == ["analyst"]
    async with running_worker(engine, model=ScriptedProvider(respond)):
        first = await api.post("/api/employees/analyst/messages", json={"message": "Acme renews in May."})
        assert first.status_code == 202, first.text
        reply = first.json()
        await until(engine, reply["run_id"], lambda r: r.status.is_terminal)
        again = await api.post(
            "/api/employees/analyst/messages",
            json={"message": "When does Acme renew?", "conversation_id": reply["conversation_id"]},
        )
        await until(engine, again.json()["run_id"], lambda r: r.status.is_terminal)
    assert "Acme renews in May." not in heard[0]
    assert "Acme renews in May." in heard[1], "the second message sees the first in memory"
    assert reply["stream"] == f"/api/runs/{reply['run_id']}/stream"
    await engine.publish_workflow({"name": "plain", "kind": "agent", "prompt": "x"})
    refused = await api.post("/api/employees/plain/messages", json={"message": "hi"})
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "employee_not_found"
    empty = await api.post("/api/employees/analyst/messages", json={"message": ""})
    assert empty.status_code == 422
