"""The ``run_workflow`` node's config: mistakes refused at publish naming the node's path; the
child's id; a detached child in the transition."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agentflow.core import loops
from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ConfigError
from agentflow.core.graph.catalog import describe_kind
from agentflow.core.graph.child_nodes import RunWorkflowNode, child_run_id, started_output
from agentflow.core.statuses import RunStatus
from agentflow.core.step_results import Transition


def call(**fields: Any) -> dict[str, Any]:
    return {"id": "call", "type": "run_workflow", "workflow": "enrich-account", **fields}


def first_error(*nodes: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        validate_config({"name": "m", "kind": "structured", "nodes": list(nodes)})
    errors: list[dict[str, str]] = info.value.info.details["errors"]
    return errors[0]


def test_a_call_takes_its_defaults() -> None:
    config = validate_config(
        {"name": "m", "kind": "structured", "nodes": [call(input={"id": "{{ payload.id }}"})]}
    )
    assert isinstance(config, StructuredConfig)
    node = config.node("call")
    assert isinstance(node, RunWorkflowNode)
    assert (node.version, node.wait, node.max_depth, node.input) == (
        None,
        True,
        10,
        {"id": "{{ payload.id }}"},
    )


@pytest.mark.parametrize(
    ("node", "path", "words"),
    [
        ({"id": "call", "type": "run_workflow"}, "nodes[0].workflow", "Field required"),
        (call(workflow="{{ payload.flow }}"), "nodes[0].workflow", "should match pattern"),
        (call(version=0), "nodes[0].version", "greater than or equal to 1"),
        (call(max_depth=0), "nodes[0].max_depth", "greater than or equal to 1"),
        (call(max_depth=51), "nodes[0].max_depth", "less than or equal to 50"),
        (call(wait="sometimes"), "nodes[0].wait", "valid boolean"),
        (call(input={"id": "{{ payload. }}"}), "nodes[0].input", "template"),
    ],
)
def test_each_mistake_is_named_at_its_path(node: dict[str, Any], path: str, words: str) -> None:
    error = first_error(node)
    assert error["path"].startswith(path) and words in error["message"], error


def test_the_kind_declares_its_ports_and_fields_for_a_builder() -> None:
    kind = describe_kind(RunWorkflowNode)
    assert kind["kind"] == "run_workflow" and kind["ports"] == ["result", "error"]
    assert {"workflow", "version", "input", "wait", "max_depth"} <= set(kind["config_schema"]["properties"])


def test_the_child_id_is_the_same_on_every_attempt_of_a_step_and_differs_between_steps() -> None:
    run = uuid.uuid4()
    assert child_run_id(run, 3) == child_run_id(run, 3)
    assert len({child_run_id(run, 3), child_run_id(run, 4), child_run_id(uuid.uuid4(), 3)}) == 3
    started = started_output(child_run_id(run, 3), "enrich", run, 2)
    assert started == {
        "run_id": str(child_run_id(run, 3)),
        "workflow": "enrich",
        "workflow_id": str(run),
        "version": 2,
    }


def test_a_detached_child_goes_with_the_transition_that_moves_the_node_on() -> None:
    moved = Transition(RunStatus.IN_PROGRESS, {"node": "next"}, "completed")
    out = loops.detached_child(moved, {"node": "first"}, {"id": "x", "workflow_id": "w"})
    assert out.state == {"node": "next"} and out.status is RunStatus.IN_PROGRESS
    assert out.children == (
        {"state": {"node": "first"}, "released": True, "detached": True, "id": "x", "workflow_id": "w"},
    )
