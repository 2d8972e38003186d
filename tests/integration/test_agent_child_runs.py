"""A ``run_workflow`` node attached to an agent (issue 12): the model starts a run of another
workflow as a tool call, the agent waits for it durably (no worker held), and the child's
output (or why it failed) is the call's result."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import tests.support.tools  # noqa: F401  (registers always_fails)
from agentflow.core.chat import Message, ModelRequest
from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from tests.conftest import make_settings
from tests.integration.test_agent_attached_tools import model_calling
from tests.support.agents import calls, running_worker, until


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[Engine]:
    eng = await Engine.connect(make_settings(database_url), migrate_schema=False)
    yield eng
    await eng.close()


def billing(*before_finish: dict[str, Any]) -> dict[str, Any]:
    """The child: optional nodes, then a finish with the order it was asked about."""
    finish = {"id": "done", "type": "finish", "output": {"order": "{{ payload.order }}", "balance": 12}}
    return {"name": "billing", "kind": "structured", "nodes": [*before_finish, finish]}


def support(wait: bool = True, **attached: Any) -> dict[str, Any]:
    return {
        "name": "support",
        "kind": "structured",
        "nodes": [
            {"id": "helper", "type": "agent", "prompt": "Help with the order.", "attach": ["ask_billing"]},
            {
                "id": "ask_billing",
                "type": "run_workflow",
                "workflow": "billing",
                "description": "Ask billing about an order.",
                "input": {"order": "{{ args.order_id }}"},
                "wait": wait,
                **attached,
            },
            {"id": "end", "type": "finish", "output": "{{ input.summary }}"},
        ],
    }


async def agent_run_of(engine: Engine, run_id: Any) -> Any:
    return await engine.db.pool.fetchval("SELECT id FROM runs WHERE parent_run_id = $1", run_id)


async def test_the_agent_waits_for_the_child_and_reads_its_output(engine: Engine) -> None:
    await engine.publish_workflow(billing())
    await engine.publish_workflow(support())
    model, seen = model_calling(calls(("ask_billing", {"order_id": "42"})))
    async with running_worker(engine, model=model):
        run = await engine.start_run("support", {})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    agent = await agent_run_of(engine, run.id)
    steps = await engine.list_steps(agent)
    started = next(s for s in steps if s.kind == "agent.child")
    answered = next(s for s in steps if s.kind == "agent.tool" and s.name == "ask_billing")
    child = await engine.db.pool.fetchrow(
        "SELECT id, status, input, parent_step, caller_node, workflow_id FROM runs WHERE parent_run_id = $1",
        agent,
    )
    assert child["status"] == "completed" and child["input"] == {"order": "42"}
    assert (child["parent_step"], child["caller_node"]) == (started.seq, "ask_billing"), (
        "the child is the item of the step that started it, so its end wakes the agent"
    )
    assert started.output["run_id"] == str(child["id"])
    assert answered.output == {"call_id": "c0", "result": {"order": "42", "balance": 12}}
    told = [m for m in seen[1].messages if m.role == "tool"]
    assert len(told) == 1 and '"balance": 12' in str(told[0].content).replace('":12', '": 12'), (
        "the model reads the child's output as the call's result, once"
    )
    count = await engine.db.pool.fetchval(
        "SELECT count(*) FROM runs WHERE workflow_id = $1", child["workflow_id"]
    )
    assert count == 1


async def test_a_child_that_fails_is_an_error_the_model_decides_on(engine: Engine) -> None:
    failing = {
        "id": "charge",
        "type": "tool",
        "tool": "always_fails",
        "args": {"retryable": False},
        "next": "done",
    }
    await engine.publish_workflow(billing(failing))
    await engine.publish_workflow(support())
    model, seen = model_calling(calls(("ask_billing", {"order_id": "7"})))
    async with running_worker(engine, model=model):
        run = await engine.start_run("support", {})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", "the model was told and completed anyway"
    agent = await agent_run_of(engine, run.id)
    answered = next(s for s in await engine.list_steps(agent) if s.kind == "agent.tool")
    error = answered.output["result"]["error"]
    assert error["code"] == "child_failed" and "the upstream is down" in error["message"]
    assert answered.output.get("refused") is True
    assert "child_failed" in str([m.content for m in seen[1].messages if m.role == "tool"])


async def test_output_params_shape_the_childs_output(engine: Engine) -> None:
    await engine.publish_workflow(billing())
    await engine.publish_workflow(support(output_params={"balance": {"type": "number"}}))
    model, _ = model_calling(calls(("ask_billing", {"order_id": "9"})))
    async with running_worker(engine, model=model):
        run = await engine.start_run("support", {})
        await until(engine, run.id, lambda r: r.status.is_terminal)
    agent = await agent_run_of(engine, run.id)
    answered = next(s for s in await engine.list_steps(agent) if s.kind == "agent.tool")
    assert answered.output["result"] == {"balance": 12}


async def test_wait_false_starts_the_child_on_its_own(engine: Engine) -> None:
    sleeping = {"id": "nap", "type": "wait", "duration": "1h", "next": "done"}
    await engine.publish_workflow(billing(sleeping))
    await engine.publish_workflow(support(wait=False))
    model, _ = model_calling(calls(("ask_billing", {"order_id": "5"})))
    async with running_worker(engine, model=model):
        run = await engine.start_run("support", {})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", "nobody waited for the hour-long child"
    agent = await agent_run_of(engine, run.id)
    answered = next(s for s in await engine.list_steps(agent) if s.kind == "agent.tool")
    child = await engine.db.pool.fetchrow(
        "SELECT id, status, parent_step FROM runs WHERE parent_run_id = $1", agent
    )
    assert answered.output["result"]["run_id"] == str(child["id"])
    assert child["status"] == "waiting" and child["parent_step"] is None, "detached: no item of the agent"


async def test_a_waiting_agent_holds_no_worker_and_its_cancel_cancels_the_child(engine: Engine) -> None:
    sleeping = {"id": "nap", "type": "wait", "duration": "1h", "next": "done"}
    await engine.publish_workflow(billing(sleeping))
    await engine.publish_workflow(support())
    model, seen = model_calling(calls(("ask_billing", {"order_id": "3"})))
    async with running_worker(engine, model=model):
        run = await engine.start_run("support", {})
        agent = None
        while agent is None:
            agent = await agent_run_of(engine, run.id)
        waiting = await until(
            engine, agent, lambda r: r.status == "waiting" and r.status_reason == "awaiting_child"
        )
        child = await engine.db.pool.fetchrow("SELECT id FROM runs WHERE parent_run_id = $1", agent)
        await until(engine, child["id"], lambda r: r.status == "waiting")
        lease = await engine.db.pool.fetchval("SELECT lease_owner FROM runs WHERE id = $1", agent)
        assert lease is None, "the wait holds no worker"
        assert waiting.status == "waiting" and len(seen) == 1, "no decision while the child runs"
        await engine.cancel_run(run.id)
        ended = await until(engine, child["id"], lambda r: r.status.is_terminal)
    assert ended.status == "canceled"


async def test_an_agent_waiting_past_its_wall_time_is_suspended_and_a_resume_waits_on(engine: Engine) -> None:
    sleeping = {"id": "nap", "type": "wait", "duration": "1h", "next": "done"}
    await engine.publish_workflow(billing(sleeping))
    config = support()
    config["nodes"][0]["budget"] = {"max_wall_time": "4s"}
    await engine.publish_workflow(config)
    model, seen = model_calling(calls(("ask_billing", {"order_id": "8"})))
    async with running_worker(engine, model=model):
        run = await engine.start_run("support", {})
        agent = None
        while agent is None:
            agent = await agent_run_of(engine, run.id)
        waiting = await until(engine, agent, lambda r: r.status_reason == "awaiting_child")
        # It looks again when its budget runs out, not at the two-minute backstop.
        due_in = await engine.db.pool.fetchval(
            "SELECT extract(epoch FROM due_at - now()) FROM runs WHERE id = $1", agent
        )
        assert due_in is not None and due_in <= 4.5, due_in
        suspended = await until(engine, agent, lambda r: r.status == "suspended", timeout=30)
        assert suspended.status_reason == "budget_wall_seconds", suspended.status_reason
        child = await engine.db.pool.fetchrow("SELECT id, status FROM runs WHERE parent_run_id = $1", agent)
        assert child["status"] == "waiting", "the child is not the budget's to stop"
        await engine.governance.resume(agent, {"wall_seconds": 3600})
        again = await until(
            engine, agent, lambda r: r.status == "waiting" and r.updated_at > suspended.updated_at
        )
    assert again.status_reason == "awaiting_child"
    last = (await engine.list_steps(agent))[-1]
    assert (last.kind, last.output) == ("agent.child", {"run_id": str(child["id"]), "status": "running"})
    assert waiting.status == "waiting" and len(seen) == 1, "no decision was made while the child ran"


async def test_an_agent_delegates_to_an_employee_and_reads_its_validated_answer(engine: Engine) -> None:
    await engine.publish_workflow(
        {"name": "analyst", "kind": "employee", "prompt": "You are Rae, the renewal analyst."}
    )
    verdict = {"type": "object", "properties": {"risk": {"enum": ["low", "high"]}}, "required": ["risk"]}
    flow = {
        "name": "renewals",
        "kind": "structured",
        "nodes": [
            {"id": "lead", "type": "agent", "prompt": "Review Acme's renewal.", "attach": ["ask_rae"]},
            {
                "id": "ask_rae",
                "type": "run_employee",
                "employee": "analyst",
                "description": "Ask Rae, the renewal analyst, a question.",
                "assignment": "{{ args.question }}",
                "response_schema": verdict,
            },
            {"id": "end", "type": "finish", "output": "{{ input.summary }}"},
        ],
    }
    await engine.publish_workflow(flow)
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> Message:
        seen.append(request)
        if "You are Rae" in request.messages[0].content:  # the employee answers its assignment
            return calls(("complete", {"summary": "risky", "data": {"risk": "high"}}))
        if not any(m.role == "tool" for m in request.messages):
            return calls(("ask_rae", {"question": "How risky is Acme's renewal?"}))
        return calls(("complete", {"summary": "asked Rae"}))

    async with running_worker(engine, model=ScriptedProvider(respond)):
        run = await engine.start_run("renewals", {})
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    lead = await agent_run_of(engine, run.id)
    answered = next(s for s in await engine.list_steps(lead) if s.kind == "agent.tool")
    assert answered.output["result"]["data"] == {"risk": "high"}, "the answer, as the schema shaped it"
    asked = await engine.db.pool.fetchval("SELECT input FROM runs WHERE parent_run_id = $1", lead)
    assert asked["assignment"] == "How risky is Acme's renewal?"


async def test_an_attached_run_workflow_naming_a_missing_workflow_is_refused_at_publish(
    engine: Engine,
) -> None:
    from agentflow.core.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        await engine.publish_workflow(support())
    errors = refused.value.info.details["errors"]
    assert {"path": "nodes[1].workflow", "message": "no workflow named 'billing' here"} in errors
    assert await engine.db.pool.fetchval("SELECT count(*) FROM workflows WHERE name = 'support'") == 0
