"""The ``memory`` node: an agent's history across runs, attached to an ``agent`` node.

It never runs in the graph: the agent node that lists it in ``attach`` loads the memory before
each decision and its steps add to it (see ``agentflow.core.agent_memory``). Its settings are
those of ``memory:`` on an agent workflow.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from agentflow.core.agent_memory import Memory
from agentflow.core.node_specs import NodeSpec, register_node_spec


class MemoryNode(NodeSpec, Memory):
    """Keep what an agent was told, said and did across runs, per ``key`` (a template):
    attach it to an agent node (``attach: [<this id>]``)."""

    title: ClassVar[str] = "Memory"
    port_names: ClassVar[tuple[str, ...]] = ()
    attachable: ClassVar[bool] = True
    attached_only: ClassVar[bool] = True

    type: Literal["memory"] = "memory"

    def settings(self) -> Memory:
        """The memory's settings, as an agent config holds them."""
        return Memory.model_validate(self.model_dump(include=set(Memory.model_fields)))


register_node_spec(MemoryNode)
