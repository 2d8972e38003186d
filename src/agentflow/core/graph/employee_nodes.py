"""The ``run_employee`` node (seed 002 "Assign AI"): hand an assignment to an AI teammate (a
workflow of kind ``employee``) and wait durably for its answer.

The node's step renders the ``assignment`` (and ``attachments``, ``conversation_id``) and its
checkpoint starts the employee's run as a child, exactly once, as ``run_workflow`` does; the
parent waits holding no worker. With a ``response_schema`` the employee must complete with
``data`` that matches it (a completion that breaks it is sent back with what is wrong, then
the child fails with ``output_invalid``), and ``{{ input.data.x }}`` after the node is checked
at publish against the schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, JsonValue, field_validator

from agentflow.core.definitions import NAME_PATTERN
from agentflow.core.graph.agent_nodes import RESULT_SCHEMA
from agentflow.core.graph.child_nodes import MAX_DEPTH
from agentflow.core.graph.schema_paths import checked_object_schema
from agentflow.core.node_specs import AgentToolFields, NodeSpec, register_node_spec

RESPONSE_SCHEMA = "employee_response_schema"
"""The state key that gives an employee's run the shape its answer must have."""


class RunEmployeeNode(AgentToolFields, NodeSpec):
    """Assign work to an AI teammate (``employee``: a workflow of kind employee) and wait for
    its answer: ``result`` carries ``{summary, data, model_calls, tool_calls}``, ``data``
    matching ``response_schema`` when one is given; ``error`` why it failed. Attached to an
    agent, the model delegates through it (``{{ args.x }}`` in the assignment) and reads the
    answer as the call's result."""

    title: ClassVar[str] = "Assign AI"
    literal_fields: ClassVar[frozenset[str]] = frozenset({"employee", "response_schema", "max_depth"})
    reference_fields: ClassVar[Mapping[str, str]] = {"employee": "employee"}

    type: Literal["run_employee"] = "run_employee"
    employee: str = Field(pattern=NAME_PATTERN, description="The name of an employee workflow.")
    assignment: str = Field(min_length=1, max_length=20_000, description="What to do (a template).")
    attachments: JsonValue = Field(
        default=None,
        description="Material for the assignment (templates; any JSON, e.g. a list of documents).",
    )
    conversation_id: str | None = Field(
        default=None,
        max_length=500,
        description="Whose conversation this is part of (a template), for its memory.",
    )
    response_schema: dict[str, Any] | None = Field(
        default=None, description="JSON Schema (type object) of the data the employee must answer with."
    )
    max_depth: int = Field(
        default=10, ge=1, le=MAX_DEPTH, description="How deep in parent runs it may start."
    )

    @field_validator("response_schema")
    @classmethod
    def _schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return checked_object_schema(value, "response_schema", " (wrap a list in a property)")

    def references(self) -> set[str]:
        """The employee, which is a workflow too (disabling or deleting it is checked alike)."""
        return {*super().references(), f"workflow:{self.employee}"}

    def declared_schema(self, port: str) -> dict[str, Any]:
        """The employee's result, with ``data`` shaped by ``response_schema`` when set."""
        if self.response_schema is None:
            return RESULT_SCHEMA
        return {**RESULT_SCHEMA, "properties": {**RESULT_SCHEMA["properties"], "data": self.response_schema}}


register_node_spec(RunEmployeeNode)
