"""The ``agent`` node: its config makes an agent workflow, and the run waits for its child and
moves on by how the child ended."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from agentflow.core import loops
from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.graph import frontier
from agentflow.core.graph.agent_nodes import AGENT_NODE, AgentNode, delegated_agent
from agentflow.core.graph.frontier import Activation
from agentflow.core.graph.looping import LoopProgress
from agentflow.core.statuses import RunStatus


def graph(*edges: tuple[str, str, str], **agent: Any) -> StructuredConfig:
    config = validate_config(
        {
            "name": "g",
            "kind": "structured",
            "retry": {"max_attempts": 7},
            "nodes": [
                {"id": "helper", "type": "agent", "prompt": "Help {{ payload.who }}", **agent},
                {"id": "done", "type": "finish", "output": "{{ input.summary }}"},
                *([{"id": "oops", "type": "finish", "output": "{{ input.code }}"}] if edges else []),
            ],
            "edges": [{"from": s, "port": p, "to": t} for s, p, t in (("helper", "result", "done"), *edges)],
        }
    )
    assert isinstance(config, StructuredConfig)
    return config


def started(config: StructuredConfig) -> dict[str, Any]:
    state = {"node": "helper"}
    node = config.node("helper")
    assert isinstance(node, AgentNode)
    t = loops.on_child_start(config, state, node.child_state("Help Ann"), 1, Activation("helper"), {"ok": 1})
    assert t.status is RunStatus.WAITING and t.reason == "loop"
    assert t.children == ({"item_index": 0, "state": node.child_state("Help Ann"), "released": True},)
    assert t.wake_after == timedelta(seconds=AgentNode.child_poll_seconds), (
        "it looks at the agent now and then"
    )
    return t.state


def test_the_node_runs_as_an_agent_workflow_with_its_own_settings_and_the_graphs_defaults() -> None:
    config = graph(model="openai:gpt-4o-mini", tools=["echo"], budget={"max_model_calls": 3}, timeout="90s")
    node = config.node("helper")
    assert isinstance(node, AgentNode)
    agent = delegated_agent(config, node.child_state("Help Ann"))
    assert isinstance(agent, AgentConfig)
    assert (agent.name, agent.prompt, agent.model, agent.tools) == (
        "g",
        "Help Ann",
        "openai:gpt-4o-mini",
        ["echo"],
    )
    assert agent.budget.max_model_calls == 3 and agent.timeout == timedelta(seconds=90)
    assert agent.retry.max_attempts == 7, "the graph's retry policy unless the node sets one"
    assert delegated_agent(config, {"node": "helper"}) is None, "a run that is not an agent node's"
    assert node.child_state("x")[AGENT_NODE] == "helper"


def test_a_completed_child_fires_result_with_its_output() -> None:
    config = graph()
    state = started(config)
    step = loops.on_loop_wake(config, state, {1: LoopProgress(completed=1, items=[
        {"status": "completed", "output": {"summary": "done"}, "error": None}])})  # fmt: skip
    assert step.node_id == "helper" and step.output == {"summary": "done"}
    after = frontier.load(step.transition.state, config.graph)
    assert [a.node for a in after.ready] == ["done"] and not after.loops


def test_a_child_still_running_is_looked_at_again() -> None:
    config = graph()
    state = started(config)
    step = loops.on_loop_wake(config, state, {})
    assert step.node_id is None and step.transition.status is RunStatus.WAITING


def test_a_failed_child_takes_the_error_port_or_fails_the_run_with_its_code() -> None:
    end = {"status": "failed", "output": None,
           "error": {"code": "agent_stuck", "message": "refused", "details": {"refused_in_row": 5}}}  # fmt: skip
    handled_config = graph(("helper", "error", "oops"))
    step = loops.on_loop_wake(
        handled_config, started(handled_config), {1: LoopProgress(failed=1, items=[end])}
    )
    assert step.transition.handled and step.transition.step_output["code"] == "agent_stuck"
    assert [a.node for a in frontier.load(step.transition.state, handled_config.graph).ready] == ["oops"]

    config = graph()
    failed = loops.on_loop_wake(config, started(config), {1: LoopProgress(failed=1, items=[end])}).transition
    assert failed.status is RunStatus.FAILED and failed.error is not None
    assert failed.error.code == "agent_stuck"
    assert failed.error.message == "agent node 'helper': refused"
    assert failed.error.details == {"node": "helper", "status": "failed", "refused_in_row": 5}


def test_a_canceled_child_fails_the_node_with_a_generic_code() -> None:
    config = graph()
    end = {"status": "canceled", "output": None, "error": None}
    failed = loops.on_loop_wake(config, started(config), {1: LoopProgress(failed=1, items=[end])}).transition
    assert failed.error is not None and failed.error.code == "child_failed"
    assert "its run canceled" in failed.error.message
