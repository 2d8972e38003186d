"""Node specs: the validated shape of each node kind, found through a registry.

A structured workflow's nodes are checked one by one against the spec registered for
their ``type``. A spec also declares what the graph needs to know about its kind: its output
ports, the JSON Schema of what each port carries (so ``{{ input.x }}`` can be checked at
publish), what it expects as input, and whether it joins several incoming edges into one
execution. A new node kind registers its spec here (``register_node_spec``) and its runner in
``agentflow.nodes``; the engine needs no change.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from agentflow.core.durations import parse_duration
from agentflow.core.graph.event_waits import EVENT_SCHEMA, EventWait
from agentflow.core.graph.output_params import MAX_PARAMS, OutputParam, params_schema
from agentflow.core.graph.schema_paths import checked_object_schema
from agentflow.core.retry import RetryPolicy
from agentflow.core.state_definition import MAX_VARIABLES

NODE_ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$"

DURATION_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "description": "90s, 1h30m, 7d, 500ms or ISO 8601 (PT5M)"},
        {"type": "number", "minimum": 0, "description": "seconds"},
    ]
}
Duration = Annotated[timedelta, WithJsonSchema(DURATION_SCHEMA)]
"""A duration field as configs write it (the validators parse it; see ``core.durations``)."""

ANY: dict[str, Any] = {}
"""The JSON Schema that any value satisfies: an output nothing is known about."""

ERROR_PORT = "error"
ERROR_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "code": {"type": "string"},
        "message": {"type": "string"},
        "details": {"type": "object"},
        "solution": {"type": "string"},
    },
    "required": ["code", "message"],
    "additionalProperties": False,
}
"""What a node sends down its ``error`` port when it failed for good: its last error."""


class NodeSpec(BaseModel):
    """Fields every node has.

    Attributes:
        id: unique within the workflow; used by ``next``, ``edges`` and in templates
            (``steps.<id>``).
        type: the node kind.
        name: a label for people.
        next: shorthand for an edge from this node's ``result`` port to that node. Without
            ``edges`` in the workflow, a node with neither continues to the next in the list.
        retry: overrides the workflow's retry policy for this node.
        timeout: overrides the workflow's step timeout for this node.
        save_to_state: run variables to set when the node succeeds, ``{name: template}``;
            the templates also see the node's ``output``. Each name must be declared in the
            workflow's ``state_definition`` and the value must match its type.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    title: ClassVar[str] = ""
    """The kind's name for people (a builder's palette)."""
    port_names: ClassVar[tuple[str, ...]] = ("result", ERROR_PORT)
    """Output ports: ``result`` carries the node's output; ``error``, when an edge leaves it,
    takes the node's last error after its attempts are spent (a handled failure) instead of
    failing the run."""
    config_ports: ClassVar[str | None] = None
    """Where the config names more ports, for a builder (``branches[].port``), else None."""
    body_ports: ClassVar[tuple[str, ...]] = ()
    """Ports whose links lead into a sub-graph the node runs itself (a loop's body): neither
    fired nor skipped in the run's own frontier."""
    joins: ClassVar[bool] = False
    """True: one execution waits for every live incoming edge and sees their outputs by
    predecessor id. False: the node runs once for each incoming edge that fires."""
    input_schema: ClassVar[dict[str, Any]] = ANY
    """JSON Schema of the ``input`` the kind can use (``ANY``: whatever comes)."""
    result_schema: ClassVar[dict[str, Any]] = ANY
    """JSON Schema of the output on ``result`` (``ANY``: not known before it runs)."""
    literal_fields: ClassVar[frozenset[str]] = frozenset()
    """Fields of the kind that are never templates (a JSON Schema, say): not checked as such."""
    attachable: ClassVar[bool] = False
    """True: the kind can be attached to an ``agent`` node (seed 001's attached nodes), which
    uses it itself; an attached node is no step of the graph's own sequence."""
    attached_only: ClassVar[bool] = False
    """True: the kind works only attached to an agent (a ``memory`` node), never in the graph."""
    pure: ClassVar[bool] = False
    """True: the kind only computes its output from what it reads (no write, no call out, no
    model). Its step is checkpointed in the same commit as the next step's: after a crash it
    is run again and gives what the lost checkpoint would have held."""
    reference_fields: ClassVar[Mapping[str, str]] = {}
    """Fields that name a workspace resource (a name or a list of names), by the resource's
    kind: ``{"credential": "credential"}``. A published version records them (``references``)."""

    id: str = Field(pattern=NODE_ID_PATTERN)
    type: str
    name: str | None = None
    next: str | None = None
    retry: RetryPolicy | None = None
    timeout: Duration | None = None
    save_to_state: dict[str, Any] | None = Field(default=None, max_length=MAX_VARIABLES)
    output_params: dict[str, OutputParam] | None = Field(
        default=None,
        max_length=MAX_PARAMS,
        description="Declared output: only these keys, coerced to their types, defaults when missing.",
    )

    def output_ports(self) -> tuple[str, ...]:
        """This node's output ports (a kind may derive them from its config)."""
        return self.port_names

    def references(self) -> set[str]:
        """The workspace resources this node uses, as ``kind:name`` (a template's value is known
        only when the step runs: none is recorded)."""
        found: set[str] = set()
        for field, kind in self.reference_fields.items():
            value = getattr(self, field)
            for name in value if isinstance(value, list) else [value]:
                if isinstance(name, str) and name and "{{" not in name:
                    found.add(f"{kind}:{name}")
        return found

    def attached_ids(self) -> tuple[str, ...]:
        """The ids of the nodes attached to this one (an agent's ``attach``; others none)."""
        return ()

    def attachment_problems(self, attached: dict[str, NodeSpec]) -> list[str]:
        """What is wrong with the nodes this one attaches, by kind's own rules (none by default)."""
        return []

    def join_ready(self, fired: int, resolved: bool) -> bool:
        """For a kind that joins: whether it runs now, given how many incoming links fired
        and whether every one has fired or been skipped (by default: when all have)."""
        return resolved

    def port_schema(self, port: str) -> dict[str, Any]:
        """JSON Schema of what this node sends down ``port``: its error, its declared
        ``output_params``, else what its kind declares."""
        if port == ERROR_PORT:
            return ERROR_OUTPUT
        if self.output_params:
            return params_schema(self.output_params)
        return self.declared_schema(port)

    def declared_schema(self, port: str) -> dict[str, Any]:
        """What the kind declares its ``port`` sends (a kind may derive it from its config)."""
        return self.result_schema

    def step_limit(self) -> timedelta | None:
        """The time limit this node sets on its step: its ``timeout`` (a kind whose ``timeout``
        bounds only part of the step's work may allow the step more)."""
        return self.timeout

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, value: Any) -> timedelta | None:
        return None if value is None else parse_duration(value)


class AgentToolFields(BaseModel):
    """The fields of an action node an agent can use as a tool (see
    ``agentflow.core.graph.agent_tools``)."""

    attachable: ClassVar[bool] = True

    description: str | None = Field(
        default=None, min_length=1, max_length=2000, description="What the tool does, for an agent's model."
    )
    parameters: dict[str, Any] | None = Field(
        default=None,
        description="JSON Schema of the arguments an agent's model gives ({{ args.x }} in templates); "
        "default: one string per args.x the templates read.",
    )

    @field_validator("parameters")
    @classmethod
    def _parameters(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return checked_object_schema(value, "parameters")


class ToolNode(AgentToolFields, NodeSpec):
    """Call a registered Python tool with templated arguments; its return value is the output."""

    title: ClassVar[str] = "Tool"
    reference_fields: ClassVar[Mapping[str, str]] = {"tool": "tool"}
    type: Literal["tool"] = "tool"
    tool: str = Field(min_length=1, max_length=200, description="A registered tool's name.")
    args: dict[str, Any] = Field(
        default_factory=dict, description="The tool's arguments by name (values may be templates)."
    )


class WaitNode(NodeSpec):
    """Sleep durably for ``duration``, or until the ``until`` timestamp (a template).

    With ``wake_on_event`` the sleep ends early, as soon as something arrives in the run's
    inbox (an enrolled event, a change to a task the run created); ``duration``/``until`` is
    then the longest it waits. The next node sees what arrived as ``{{ inbox }}``.

    With ``for_event`` it waits for an event of a topic that meets a condition (values may be
    templates), at most ``duration``/``until``; the output is the event, or null.
    """

    title: ClassVar[str] = "Wait"
    result_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "slept": {"type": "number"},
            "until": {"type": "string", "format": "date-time"},
            "at_most": {"type": "number"},
            "wake_on_event": {"type": "boolean"},
            "woken_by": {"type": "string"},
            "pending": {"type": "integer"},
        },
        "additionalProperties": False,
    }
    type: Literal["wait"] = "wait"
    duration: Duration | None = Field(default=None, description="How long to sleep.")
    until: str | None = Field(
        default=None, description="Or a time to sleep until: ISO 8601 with a time zone (a template)."
    )
    wake_on_event: bool = Field(
        default=False, description="End the sleep when something arrives in the inbox."
    )
    for_event: EventWait | None = Field(
        default=None,
        description="Wait for an event of a topic that meets a condition; duration/until is the timeout.",
    )

    @field_validator("duration", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta | None:
        return None if value is None else parse_duration(value)

    @model_validator(mode="after")
    def _one_of(self) -> WaitNode:
        if (self.duration is None) == (self.until is None):
            raise ValueError("a wait node needs exactly one of 'duration' or 'until'")
        if self.for_event is not None and self.wake_on_event:
            raise ValueError("'wake_on_event' and 'for_event' do not go together")
        return self

    def declared_schema(self, port: str) -> dict[str, Any]:
        """A wait for an event sends the event (or null); a sleep what it slept."""
        return EVENT_SCHEMA if self.for_event is not None else self.result_schema


class FinishNode(NodeSpec):
    """Complete the run with ``output`` (templated)."""

    title: ClassVar[str] = "Finish"
    port_names: ClassVar[tuple[str, ...]] = ()
    type: Literal["finish"] = "finish"
    output: Any = Field(default=None, description="The run's output (values may be templates).")


NODE_SPECS: dict[str, type[NodeSpec]] = {}


def register_node_spec(spec: type[NodeSpec]) -> type[NodeSpec]:
    """Register a node kind's spec under the literal default of its ``type`` field."""
    kind = spec.model_fields["type"].default
    if not isinstance(kind, str):
        raise TypeError(f"{spec.__name__}.type needs a literal default")
    NODE_SPECS[kind] = spec
    return spec


for _spec in (ToolNode, WaitNode, FinishNode):
    register_node_spec(_spec)
