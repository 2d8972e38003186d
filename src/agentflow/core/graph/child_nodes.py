"""The ``run_workflow`` node: a run of another workflow as one step (seed 002 ``run_workflow``).

The node's step resolves the workflow (by name; a version, or its latest), renders the child's
input, and its checkpoint inserts the child run, exactly once: ``runs.parent_run_id`` names the
parent and ``caller_node`` this node. With ``wait`` (the default) the child is the node's one
item, as for an ``agent`` node: the parent waits durably, holding no worker, and the child's end
wakes it; the node fires ``result`` with the child's output, or fails with the child's error
(down ``error`` when an edge leaves it). Canceling the parent cancels the child; retrying a
parent whose child failed retries the child from where it stopped. With ``wait: false`` the
child is on its own (fire and forget): the node fires at once with the child's id, and the
child neither wakes nor follows its parent.

``max_depth`` stops runaway recursion: a run nested that deep in parents does not start another.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, JsonValue

from agentflow.core.definitions import NAME_PATTERN
from agentflow.core.node_specs import AgentToolFields, NodeSpec, register_node_spec

MAX_DEPTH = 50
STARTED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "run_id": {"type": "string", "format": "uuid"},
        "workflow": {"type": "string"},
        "workflow_id": {"type": "string", "format": "uuid"},
        "version": {"type": "integer"},
    },
    "required": ["run_id", "workflow", "workflow_id", "version"],
    "additionalProperties": False,
}
"""The output of a step that started a child: the node's own with ``wait: false``."""


class RunWorkflowNode(AgentToolFields, NodeSpec):
    """Start a run of another workflow (by name; ``version``, or its latest published one) with
    ``input`` (a template) as its payload. With ``wait`` (the default) the run waits durably for
    it and fires ``result`` with the child's output, or ``error`` with why it failed; its
    cancellation cancels the child. ``wait: false`` starts the child and goes on at once with
    ``{run_id, workflow, workflow_id, version}``. A run nested ``max_depth`` deep in parents
    does not start another (``run_depth_exceeded``). Attached to an agent, the model calls it
    with arguments ``input`` reads as ``{{ args.x }}``; the call's result is the child's output
    (or its error, which the model is told), or with ``wait: false`` the child's id."""

    title: ClassVar[str] = "Run workflow"
    literal_fields: ClassVar[frozenset[str]] = frozenset({"workflow", "version", "wait", "max_depth"})
    reference_fields: ClassVar[Mapping[str, str]] = {"workflow": "workflow"}
    type: Literal["run_workflow"] = "run_workflow"
    workflow: str = Field(pattern=NAME_PATTERN, description="The name of the workflow to run.")
    version: int | None = Field(default=None, ge=1, description="Its version (default: the latest).")
    input: JsonValue = Field(
        default=None, description="The child's payload (templates; default: an empty object)."
    )
    wait: bool = Field(default=True, description="Wait for the child and go on with its output.")
    max_depth: int = Field(
        default=10, ge=1, le=MAX_DEPTH, description="How deep in parent runs a run may start another."
    )


def child_run_id(run_id: uuid.UUID, step_seq: int) -> uuid.UUID:
    """The id of the run that step ``step_seq`` of ``run_id`` starts: the same on every attempt,
    so a step retried after its checkpoint was lost starts the same child, or none."""
    return uuid.uuid5(run_id, f"run_workflow:{step_seq}")


def started_output(run_id: uuid.UUID, workflow: str, workflow_id: uuid.UUID, version: int) -> dict[str, Any]:
    """What the step that started a child records (``STARTED_SCHEMA``)."""
    return {"run_id": str(run_id), "workflow": workflow, "workflow_id": str(workflow_id), "version": version}


register_node_spec(RunWorkflowNode)
