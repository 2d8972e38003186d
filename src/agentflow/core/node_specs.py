"""Node specs: the validated shape of each node kind, found through a registry.

A structured workflow's nodes are checked one by one against the spec registered for
their ``type``; a new node kind registers its spec here and its runner in
``agentflow.nodes``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentflow.core.durations import parse_duration
from agentflow.core.retry import RetryPolicy
from agentflow.core.state_definition import MAX_VARIABLES

NODE_ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$"


class NodeSpec(BaseModel):
    """Fields every node has.

    Attributes:
        id: unique within the workflow; used by ``next`` and in templates (``steps.<id>``).
        type: the node kind.
        name: a label for people.
        next: the node to run after this one; by default the next node in the list.
        retry: overrides the workflow's retry policy for this node.
        timeout: overrides the workflow's step timeout for this node.
        save_to_state: run variables to set when the node succeeds, ``{name: template}``;
            the templates also see the node's ``output``. Each name must be declared in the
            workflow's ``state_definition`` and the value must match its type.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=NODE_ID_PATTERN)
    type: str
    name: str | None = None
    next: str | None = None
    retry: RetryPolicy | None = None
    timeout: timedelta | None = None
    save_to_state: dict[str, Any] | None = Field(default=None, max_length=MAX_VARIABLES)

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, value: Any) -> timedelta | None:
        return None if value is None else parse_duration(value)


class ToolNode(NodeSpec):
    """Call a registered Python tool with templated arguments."""

    type: Literal["tool"] = "tool"
    tool: str = Field(min_length=1, max_length=200)
    args: dict[str, Any] = Field(default_factory=dict)


class WaitNode(NodeSpec):
    """Sleep durably for ``duration``, or until the ``until`` timestamp (a template).

    With ``wake_on_event`` the sleep ends early, as soon as something arrives in the run's
    inbox (an enrolled event, a change to a task the run created); ``duration``/``until`` is
    then the longest it waits. The next node sees what arrived as ``{{ inbox }}``.
    """

    type: Literal["wait"] = "wait"
    duration: timedelta | None = None
    until: str | None = None
    wake_on_event: bool = False

    @field_validator("duration", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> timedelta | None:
        return None if value is None else parse_duration(value)

    @model_validator(mode="after")
    def _one_of(self) -> WaitNode:
        if (self.duration is None) == (self.until is None):
            raise ValueError("a wait node needs exactly one of 'duration' or 'until'")
        return self


class FinishNode(NodeSpec):
    """Complete the run with ``output`` (templated)."""

    type: Literal["finish"] = "finish"
    output: Any = None


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
