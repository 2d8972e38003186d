"""The ``condition`` node: send the run down the first branch whose condition holds.

Conditions are the trigger condition language (``agentflow.core.conditions``), tested
against ``{"input", "payload", "steps", "state"}``: ``{path: input.total, op: gte, value:
1000}``. The node passes its input on unchanged, so the chosen branch's first node sees the
same ``{{ input }}``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from agentflow.core import conditions
from agentflow.core.graph.model import PORT_PATTERN
from agentflow.core.node_specs import NodeSpec, register_node_spec

DEFAULT_PORT = "default"
RESERVED_PORTS = (DEFAULT_PORT, "error", "result")


class Branch(BaseModel):
    """One way out of a condition node.

    Attributes:
        port: the port this branch fires (edges leave by it).
        when: the condition: a rule, ``{all: [...]}``, ``{any: [...]}``, ``{not: ...}``, or a
            list meaning all.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    port: str = Field(pattern=PORT_PATTERN, description="The port this branch fires.")
    when: Annotated[Any, conditions.checked("when")] = Field(
        description="A condition over input, payload, steps and state."
    )
    _condition: conditions.Condition | None = PrivateAttr(default=None)

    @field_validator("port")
    @classmethod
    def _port(cls, value: str) -> str:
        if value in RESERVED_PORTS:
            raise ValueError(f"{value!r} is a reserved port name; name the branch after what it means")
        return value

    @property
    def condition(self) -> conditions.Condition:
        """The parsed condition (parsed once)."""
        if self._condition is None:
            self._condition = conditions.parse_conditions(self.when, "when")
        return self._condition


class ConditionNode(NodeSpec):
    """Route the run down the first branch whose condition holds, else down ``default``.

    Only the chosen port's edges fire; the node's output is its input, unchanged.
    """

    title: ClassVar[str] = "Condition"
    port_names: ClassVar[tuple[str, ...]] = (DEFAULT_PORT,)
    config_ports: ClassVar[str | None] = "branches[].port"
    pure: ClassVar[bool] = True
    type: Literal["condition"] = "condition"
    branches: list[Branch] = Field(
        min_length=1, max_length=50, description="Tested in order; the first that holds wins."
    )

    @model_validator(mode="after")
    def _unique_ports(self) -> ConditionNode:
        ports = [branch.port for branch in self.branches]
        twice = sorted({port for port in ports if ports.count(port) > 1})
        if twice:
            raise ValueError(f"branch port(s) {twice} are used more than once")
        return self

    def output_ports(self) -> tuple[str, ...]:
        """Each branch's port, then ``default``."""
        return (*(branch.port for branch in self.branches), DEFAULT_PORT)


register_node_spec(ConditionNode)
