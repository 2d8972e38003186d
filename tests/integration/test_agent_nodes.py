"""The ``agent`` node end to end on the real database: the agent loop inside a graph, as a child
run of the graph's run, with its tools, approvals and budget; its end moves the graph on."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

from agentflow.core.chat import Message, ModelRequest
from agentflow.core.errors import ConfigError
from agentflow.core.records import RunRecord
from agentflow.engine import Engine
from agentflow.llm.scripted import ScriptedProvider
from tests.support.agents import calls, replies, running_worker, until

ACCOUNT = {"customer": "Ann", "issue": "SSO rollout blocked"}


def flow(*nodes: dict[str, Any], edges: list[dict[str, str]] | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {"name": "with-agent", "kind": "structured", "nodes": list(nodes)}
    if edges is not None:
        config["edges"] = edges
    return config


def helper(**extra: Any) -> dict[str, Any]:
    return {
        "id": "helper",
        "type": "agent",
        "prompt": "Create one task to unblock {{ input.customer }}: {{ input.issue }}.",
        "actions": {"create_tasks": {"enabled": True}},
        "temperature": 0.1,
        **extra,
    }


SHAPE = {
    "id": "shape",
    "type": "mapping",
    "output": {"customer": "{{ payload.customer }}", "issue": "{{ payload.issue }}"},
}
DONE = {"id": "done", "type": "finish", "output": "agent said: {{ input.summary }}"}


async def child_of(engine: Engine, parent: UUID) -> RunRecord:
    row = await engine.db.pool.fetchrow("SELECT id FROM runs WHERE parent_run_id = $1", parent)
    assert row is not None, "the agent node started no child run"
    return await engine.get_run(row["id"])


async def test_an_agent_node_acts_through_its_tools_and_the_graph_goes_on_with_its_summary(
    engine: Engine,
) -> None:
    model = replies(
        calls(("create_task", {"title": "Send Ann the SSO guide"})),
        calls(("complete", {"summary": "one task created"})),
    )
    await engine.publish_workflow(flow(SHAPE, helper(), DONE))
    async with running_worker(engine, model=model):
        run = await engine.start_run("with-agent", ACCOUNT)
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    assert done.output == "agent said: one task created"
    child = await child_of(engine, run.id)
    assert child.status == "completed" and child.parent_run_id == run.id
    kinds = [s.kind for s in await engine.list_steps(child.id)]
    assert kinds == ["agent.decide", "agent.tool", "agent.decide", "agent.tool"]
    (task,) = await engine.tasks.list(run_id=child.id)
    assert task.title == "Send Ann the SSO guide"
    first: ModelRequest = model.requests[0]
    assert "Create one task to unblock Ann: SSO rollout blocked." in first.messages[0].content
    assert first.temperature == 0.1
    started, ended = [s for s in await engine.list_steps(run.id) if s.node_id == "helper"]
    assert started.input == {"prompt": "Create one task to unblock Ann: SSO rollout blocked."}
    assert child.parent_step == started.seq, "the child hangs off the node's step"
    assert (ended.kind, ended.output) == ("agent", child.output), "the node's end carries the agent's result"
    finished = await engine.get_run(run.id)
    assert finished.input_tokens == 0, (
        "the scripted model costs the parent nothing: the child records its own"
    )


async def test_an_agent_that_does_not_act_fails_the_node_down_its_error_port(engine: Engine) -> None:
    model = ScriptedProvider(lambda request: Message("assistant", "I think someone should help Ann."))
    fallback = {"id": "fallback", "type": "finish", "output": "agent failed: {{ input.code }}"}
    await engine.publish_workflow(
        flow(SHAPE, helper(), DONE, fallback,
             edges=[{"from": "shape", "to": "helper"}, {"from": "helper", "to": "done"},
                    {"from": "helper", "port": "error", "to": "fallback"}])
    )  # fmt: skip
    async with running_worker(engine, model=model):
        run = await engine.start_run("with-agent", ACCOUNT)
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    assert done.output == "agent failed: agent_no_action"
    assert (await child_of(engine, run.id)).status == "failed"


async def test_without_an_error_port_the_agents_failure_fails_the_run_with_its_reason(engine: Engine) -> None:
    model = ScriptedProvider(lambda request: Message("assistant", "Nothing to do, I guess."))
    await engine.publish_workflow(flow(SHAPE, helper(on_text="fail"), DONE))
    async with running_worker(engine, model=model):
        run = await engine.start_run("with-agent", ACCOUNT)
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "failed"
    assert done.error["code"] == "agent_no_action"
    assert done.error["message"].startswith("agent node 'helper': the model answered with text")
    assert done.error["details"]["node"] == "helper"


async def test_an_agent_node_waits_durably_for_an_approval_then_the_graph_completes(engine: Engine) -> None:
    model = replies(
        calls(("create_task", {"title": "Call Ann"})),
        calls(("complete", {"summary": "approved and done"})),
    )
    await engine.publish_workflow(flow(SHAPE, helper(approvals=["create_task"]), DONE))
    async with running_worker(engine, model=model):
        run = await engine.start_run("with-agent", ACCOUNT)
        child = await until(engine, (await _child_id(engine, run.id)), lambda r: r.status == "waiting")
        assert child.status_reason == "awaiting_approval"
        parent = await engine.get_run(run.id)
        assert (parent.status, parent.status_reason) == ("waiting", "loop")
        (request,) = await engine.governance.approvals()
        await engine.governance.decide(request["id"], approve=True, decided_by="lee")
        done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed" and done.output == "agent said: approved and done"
    assert len(await engine.tasks.list(run_id=child.id)) == 1


async def test_a_suspended_agent_resumes_with_more_budget_and_the_graph_completes(engine: Engine) -> None:
    model = replies(
        calls(("create_task", {"title": "Task one"})),
        calls(("complete", {"summary": "finished after the resume"})),
    )
    await engine.publish_workflow(flow(SHAPE, helper(budget={"max_model_calls": 1}), DONE))
    async with running_worker(engine, model=model):
        run = await engine.start_run("with-agent", ACCOUNT)
        child_id = await _child_id(engine, run.id)
        suspended = await until(engine, child_id, lambda r: r.status == "suspended")
        assert suspended.status_reason == "budget_model_calls"
        await engine.governance.resume(child_id, {"model_calls": 1})
        done = await until(engine, run.id, lambda r: r.status.is_terminal, timeout=45)
    assert done.status == "completed", done.error
    assert done.output == "agent said: finished after the resume"
    resumed = await engine.get_run(child_id)
    assert resumed.state["agent_node"] == "helper", "the resume kept what makes it the node's run"


@pytest.mark.parametrize(
    ("node", "words"),
    [
        ({"tools": ["not a name"]}, "invalid tool name"),
        ({"budget": {"max_model_calls": 0}}, "greater than or equal to 1"),
        ({"prompt": ""}, "at least 1 character"),
        ({"prompt": "{{ input. }}"}, "template"),
        ({"on_text": "shrug"}, "'nudge', 'complete' or 'fail'"),
    ],
)
async def test_an_agent_node_config_is_checked_at_publish(
    engine: Engine, node: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        await engine.publish_workflow(flow(SHAPE, helper(**node), DONE))
    assert words in str(info.value), info.value


async def _child_id(engine: Engine, parent: UUID) -> UUID:
    async def found() -> UUID | None:
        row = await engine.db.pool.fetchrow("SELECT id FROM runs WHERE parent_run_id = $1", parent)
        return None if row is None else row["id"]

    await until(engine, parent, lambda r: r.status == "waiting")
    child = await found()
    assert child is not None
    return child
