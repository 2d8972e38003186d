"""The ``agent`` node: the agent loop inside a graph (seed 001's agent node, seed 002's AI step).

The node's activation starts a child run of the same workflow version whose state names the
node (``agent_node``) and holds the prompt rendered from the run's data. A worker runs that
child as an agent run (``delegated_agent``): each decision and each tool call its own
checkpointed step, with the node's tools, budget and approvals. When the child ends the
parent wakes and the node fires ``result`` with the agent's summary, or ``error`` with why it
failed (see ``agentflow.core.loops``).

Nodes listed in ``attach`` are the agent's own, not steps of the graph: a ``memory`` node
gives it a history across runs (its key is rendered from the run's data when the node starts,
into the child's state as ``agent_memory_key``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError, model_validator

from agentflow.core.agent_config import TOOL_NAME_PATTERN, Action, ApprovalPolicy, Budget, ContextLimits
from agentflow.core.agent_memory import Memory
from agentflow.core.agent_state import AgentState
from agentflow.core.definitions import AgentConfig, StructuredConfig
from agentflow.core.graph.agent_tools import BUILTIN_TOOLS
from agentflow.core.graph.memory_nodes import MemoryNode
from agentflow.core.graph.model_nodes import MODEL_PATTERN
from agentflow.core.mcp import McpServer
from agentflow.core.node_specs import NodeSpec, register_node_spec

AGENT_NODE = "agent_node"
"""The state key that makes a child run an agent node's run."""
AGENT_PROMPT = "agent_prompt"
AGENT_MEMORY_KEY = "agent_memory_key"

RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "summary": {"type": "string"},
        "model_calls": {"type": "integer"},
        "tool_calls": {"type": "integer"},
        "plan": {"type": "object"},
    },
    "additionalProperties": False,
}


class AgentNode(NodeSpec):
    """Let a model act through tools until it calls ``complete``: each decision and each tool
    call is its own step of a child run; ``result`` carries the summary, ``error`` a failure."""

    title: ClassVar[str] = "Agent"
    literal_fields: ClassVar[frozenset[str]] = frozenset(
        {
            "actions",
            "budget",
            "context",
            "tools",
            "approvals",
            "approval",
            "mcp_servers",
            "attach",
            "output_schema",
        }
    )
    result_schema: ClassVar[dict[str, Any]] = RESULT_SCHEMA
    reference_fields: ClassVar[Mapping[str, str]] = {"tools": "tool"}
    child_poll_seconds: ClassVar[float] = 30.0
    """How often the waiting run looks at the agent even when its end did not wake it."""

    type: Literal["agent"] = "agent"
    prompt: str = Field(min_length=1, max_length=20_000, description="What the agent is to do (a template).")
    model: str | None = Field(default=None, pattern=MODEL_PATTERN, description="provider:model.")
    tools: list[str] = Field(
        default_factory=list, max_length=100, description="Registered tools it may call."
    )
    actions: dict[str, Action] = Field(
        default_factory=dict, description="Built-in actions: create_tasks, send_notifications, follow_ups."
    )
    approvals: list[str] = Field(
        default_factory=list, max_length=100, description="Tools whose every call a person approves."
    )
    approval: ApprovalPolicy = Field(
        default_factory=ApprovalPolicy, description="How approvals wait: timeout, on_timeout, notify."
    )
    budget: Budget = Field(default_factory=Budget, description="Limits; past one the agent is suspended.")
    context: ContextLimits = Field(default_factory=ContextLimits, description="History shown verbatim.")
    on_text: Literal["nudge", "complete", "fail"] = Field(
        default="nudge", description="What an answer with text and no tool call does."
    )
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1, le=200_000)
    mcp_servers: list[McpServer] | None = Field(
        default=None, max_length=20, description="MCP servers whose tools it may call (<server>__<tool>)."
    )
    output_schema: dict[str, Any] | None = Field(
        default=None, description="JSON Schema (type object) of the 'data' the agent must complete with."
    )
    output_retries: int = Field(
        default=2,
        ge=0,
        le=5,
        description="Times a complete call breaking output_schema is sent back.",
    )
    stream: bool = Field(default=False, description="Stream each decision's text to the run's stream.")
    attach: list[str] = Field(
        default_factory=list,
        max_length=50,
        description="Ids of attached nodes: a memory, action nodes as tools.",
    )

    def references(self) -> set[str]:
        """Its tools, and the credentials its MCP servers authenticate with."""
        servers = self.mcp_servers or ()
        return {*super().references(), *(f"credential:{s.credential}" for s in servers if s.credential)}

    def attached_ids(self) -> tuple[str, ...]:
        """The nodes this agent attaches (``attach``)."""
        return tuple(self.attach)

    def attachment_problems(self, attached: dict[str, NodeSpec]) -> list[str]:
        """Attached action nodes are tools named by their ids: each id must be a tool name no
        other tool of the agent has."""
        problems = []
        for node_id, node in attached.items():
            if isinstance(node, MemoryNode):
                continue
            if not re.match(TOOL_NAME_PATTERN, node_id):
                problems.append(
                    f"{node_id!r} names the agent's tool: start with a letter; letters, digits, _ and -"
                )
            elif node_id in BUILTIN_TOOLS or node_id in self.tools:
                problems.append(
                    f"{node_id!r} is already one of the agent's tools: give the attached node another id"
                )
        return problems

    def declared_schema(self, port: str) -> dict[str, Any]:
        """The agent's result, with ``data`` shaped by ``output_schema`` when set."""
        if self.output_schema is None:
            return self.result_schema
        properties = {**RESULT_SCHEMA["properties"], "data": self.output_schema}
        return {**RESULT_SCHEMA, "properties": properties}

    @model_validator(mode="after")
    def _as_agent(self) -> AgentNode:
        try:
            self.agent_config("node-check", self.prompt)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ValueError(f"{where}: {first['msg']}") from None
        return self

    def agent_config(
        self,
        workflow: str,
        prompt: str,
        base: StructuredConfig | None = None,
        memory: Memory | None = None,
        node_tools: tuple[NodeSpec, ...] = (),
    ) -> AgentConfig:
        """The agent workflow this node runs, with ``prompt`` rendered (``base``: the graph's
        workflow, whose retry policy and step timeout the node's own override; ``memory`` and
        ``node_tools``: its attached memory's settings and action nodes)."""
        doc: dict[str, Any] = {
            "name": workflow,
            "kind": "agent",
            "prompt": prompt,
            "model": self.model,
            "tools": self.tools,
            "actions": self.actions,
            "approvals": self.approvals,
            "approval": self.approval,
            "budget": self.budget,
            "context": self.context,
            "on_text": self.on_text,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "mcp_servers": self.mcp_servers,
            "memory": memory,
            "output_schema": self.output_schema,
            "output_retries": self.output_retries,
            "node_tools": node_tools,
            "stream": self.stream,
        }
        retry = self.retry or (base.retry if base is not None else None)
        timeout = self.timeout or (base.timeout if base is not None else None)
        doc.update({k: v for k, v in (("retry", retry), ("timeout", timeout)) if v is not None})
        return AgentConfig.model_validate(doc)

    def child_state(self, prompt: str, memory_key: str | None = None) -> dict[str, Any]:
        """The state a new agent child run starts with (``memory_key``: its memory's key, rendered)."""
        state = {AGENT_NODE: self.id, AGENT_PROMPT: prompt, **AgentState().to_json()}
        if memory_key is not None:
            state[AGENT_MEMORY_KEY] = memory_key
        return state


def attached_memory(attached: Mapping[str, NodeSpec], node: AgentNode) -> MemoryNode | None:
    """The memory node ``node`` attaches, if any (``attached``: the graph's attached nodes)."""
    for target in node.attach:
        found = attached.get(target)
        if isinstance(found, MemoryNode):
            return found
    return None


def delegated_agent(config: StructuredConfig, state: dict[str, Any]) -> AgentConfig | None:
    """The agent config a child run of ``config`` runs, when its ``state`` names an agent node."""
    node_id = state.get(AGENT_NODE)
    if not isinstance(node_id, str):
        return None
    node = config.node(node_id)
    assert isinstance(node, AgentNode), f"{node_id!r} is not an agent node"
    memory = attached_memory(config.graph.attached, node)
    settings = memory.settings() if memory is not None else None
    tools = tuple(
        found
        for target in node.attach
        if (found := config.graph.attached.get(target)) is not None and not isinstance(found, MemoryNode)
    )
    prompt = str(state.get(AGENT_PROMPT, node.prompt))
    return node.agent_config(config.name, prompt, config, settings, tools)


register_node_spec(AgentNode)
