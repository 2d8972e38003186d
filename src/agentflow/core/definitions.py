"""Workflow configs: their models, loading from YAML/JSON, validation and content hash."""

from __future__ import annotations

import functools
import re
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

# Importing the node kinds' modules registers them (the registry is core.node_specs).
from agentflow.core.agent_config import (
    TOOL_NAME_PATTERN,
    Action,
    ApprovalPolicy,
    Budget,
    ContextLimits,
    HttpTool,
    Impact,
)
from agentflow.core.agent_memory import Memory
from agentflow.core.durations import parse_duration
from agentflow.core.graph.model import Edge, Graph, build_graph
from agentflow.core.graph.schema_paths import checked_object_schema
from agentflow.core.mcp import SEPARATOR, McpServer, check_servers
from agentflow.core.node_specs import NodeSpec
from agentflow.core.payload_format import FieldSpec, normalise
from agentflow.core.retry import RetryPolicy
from agentflow.core.schedules import CronSchedule
from agentflow.core.sources import SOURCE_PATTERN
from agentflow.core.state_definition import MAX_VARIABLES, StateVariable, check_definition
from agentflow.core.triggers import Gate, Trigger

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\- ]{0,99}$"


DEFAULT_MAX_PARALLEL = 4
"""Nodes of one run running at once when a workflow does not say (``max_parallel``)."""


_DISABLED = Action()
"""An action a workflow does not list (frozen: one serves every lookup, each step makes several)."""


class WorkflowBase(BaseModel):
    """Fields shared by both kinds.

    Attributes:
        name: unique within the workspace; applying a config with the same name publishes
            a new version of that workflow.
        description: free text.
        retry: default retry policy of every step.
        timeout: default time limit of every step.
        trigger: which events start the workflow (see ``agentflow.core.triggers``).
        payload_format: the fields a run's input must have (checked when a run is started by
            hand: ``start_run``, the API, the CLI).
        schedule: a cron schedule that starts runs (see ``agentflow.core.schedules``).
        state_definition: the run's variables (``{{ state.x }}``), with types and defaults
            (see ``agentflow.core.state_definition``).
        mcp_servers: MCP servers whose tools agents are offered and ``mcp_tool`` nodes call
            (see ``agentflow.core.mcp``; unset keeps the stored config and its hash as before).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = Field(default=None, max_length=10_000)
    retry: RetryPolicy = RetryPolicy()
    timeout: timedelta = timedelta(minutes=5)
    trigger: Trigger | None = None
    payload_format: dict[str, FieldSpec] | None = Field(default=None, max_length=200)
    schedule: CronSchedule | None = None
    state_definition: dict[str, StateVariable] | None = Field(default=None, max_length=MAX_VARIABLES)
    mcp_servers: list[McpServer] | None = Field(default=None, max_length=20)

    @field_validator("mcp_servers")
    @classmethod
    def _mcp_servers(cls, value: list[McpServer] | None) -> list[McpServer] | None:
        return check_servers(value)

    def mcp_server(self, name: str) -> McpServer | None:
        """The entry of ``mcp_servers`` named ``name``, if any."""
        return next((s for s in self.mcp_servers or () if s.name == name), None)

    @field_validator("payload_format", "state_definition", mode="before")
    @classmethod
    def _legacy_fields(cls, value: Any) -> Any:
        return normalise(value)

    @field_validator("state_definition")
    @classmethod
    def _state_definition(cls, value: dict[str, StateVariable] | None) -> dict[str, StateVariable] | None:
        return check_definition(value)

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, value: Any) -> timedelta:
        return parse_duration(value)


class Source(BaseModel):
    """An event source an agent workflow listens to, such as ``{"type": "email"}``: the
    events whose topic starts with ``email.`` (see ``agentflow.core.sources``)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    type: str = Field(pattern=SOURCE_PATTERN)


class AgentConfig(WorkflowBase):
    """An LLM-planned workflow (seed 000): a model plans and acts through tools.

    Attributes:
        prompt: the trigger and objective, in the admin's words.
        type: ``event`` runs are keyed on event id + account id, ``account`` on account id.
        model: ``provider:model`` (default: the ``AGENTFLOW_MODEL`` setting, else scripted).
        sources: event sources that can start the workflow.
        actions: which built-in actions the model may take: ``create_tasks`` (with
            ``expiry``), ``send_notifications``, ``follow_ups`` (the ``wait`` tool).
        tools: registered Python tools (``@agentflow.tool``) the model may call.
        http_tools: HTTP tools the model may call, through the guarded HTTP client.
        approvals: tool names whose every call a person must approve first.
        approval: how those approvals wait: timeout, what the timeout does, who is told.
        budget: per-run limits; past one the run is suspended.
        impact: how the impact report values the agent's work.
        context: how much history the model sees verbatim.
        gate: ask a model whether each matching event should start a run (see ``Gate``).
        on_text: what an answer with text and no tool call does: ``nudge`` (default: the
            model is told once to use its tools or call ``complete``; a second such answer
            fails the run with ``agent_no_action``), ``complete`` (the text is the summary)
            or ``fail`` (at once, ``agent_no_action``).
        temperature / top_p / max_tokens: sampling for every decision (None: the vendor's
            default; ``max_tokens`` 2048).
        memory: keep what the agent was told, said and did across runs, per key (see
            ``agentflow.core.agent_memory``).
        stream: stream each decision's text to the run's stream while the model writes it.
        node_tools: the action nodes an agent node attaches, offered as tools by their ids
            (set by the node, never written in a config).
        output_schema: JSON Schema (an object) of the ``data`` the agent must give ``complete``;
            a call whose ``data`` breaks it is sent back with what is wrong, ``output_retries``
            times, then the run fails with ``output_invalid``. The run's output carries ``data``.
    """

    kind: Literal["agent"] = "agent"
    prompt: str = Field(min_length=1, max_length=20_000)
    type: Literal["event", "account"] = "event"
    model: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.:/@-]{1,200}$")
    sources: list[Source] = Field(default_factory=list)
    actions: dict[str, Action] = Field(default_factory=dict)
    tools: list[str] = Field(default_factory=list, max_length=100)
    http_tools: list[HttpTool] = Field(default_factory=list, max_length=100)
    approvals: list[str] = Field(default_factory=list, max_length=100)
    approval: ApprovalPolicy = ApprovalPolicy()
    budget: Budget = Budget()
    impact: Impact = Impact()
    context: ContextLimits = ContextLimits()
    gate: Gate | None = None
    on_text: Literal["nudge", "complete", "fail"] = "nudge"
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1, le=200_000)
    memory: Memory | None = None
    output_schema: dict[str, Any] | None = None
    output_retries: int = Field(default=2, ge=0, le=5)
    stream: bool = False
    node_tools: SkipJsonSchema[tuple[NodeSpec, ...]] = Field(default=(), exclude=True)

    @field_validator("node_tools", mode="before")
    @classmethod
    def _node_tools(cls, value: Any) -> Any:
        # Set only by an agent node from the action nodes it attaches, never by a config.
        if not isinstance(value, tuple) or not all(isinstance(v, NodeSpec) for v in value):
            raise ValueError("node_tools is not a config field: attach action nodes to an agent node")
        return value

    @field_validator("output_schema")
    @classmethod
    def _output_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return checked_object_schema(value, "output_schema", " (wrap a list in a property)")

    @field_validator("tools", "approvals")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        bad = [v for v in value if not re.match(TOOL_NAME_PATTERN, v)]
        if bad:
            raise ValueError(f"invalid tool name(s) {bad}: letters, digits, _ and -, starting with a letter")
        return value

    @model_validator(mode="after")
    def _unique_tools(self) -> AgentConfig:
        names = [t.name for t in self.http_tools] + list(self.tools) + [n.id for n in self.node_tools]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"tool name(s) {twice} are declared more than once")
        servers = {s.name for s in self.mcp_servers or ()}
        shadowing = sorted(n for n in names if n.partition(SEPARATOR)[0] in servers and SEPARATOR in n)
        if shadowing:
            raise ValueError(f"tool name(s) {shadowing} look like tools of an MCP server of mcp_servers")
        return self

    def action(self, name: str) -> Action:
        """The ``actions`` entry ``name`` (disabled when absent)."""
        return self.actions.get(name) or _DISABLED


class StructuredConfig(WorkflowBase):
    """A node graph run step by step.

    Attributes:
        start: the first node; by default the only node no edge enters, or, in a config
            without ``edges``, the first in ``nodes``.
        nodes: the nodes, each checked against the spec of its ``type``.
        edges: connections ``{from, port, to}`` between nodes (see ``agentflow.core.graph``);
            a node's ``next`` is shorthand for one from its ``result`` port. Without
            ``edges``, nodes run in list order.
        max_parallel: how many of a run's nodes may run at once when its branches fan out
            (1: they take turns; unset: ``DEFAULT_MAX_PARALLEL``, and the stored config, its
            content hash included, stays what it was before the setting existed).
    """

    kind: Literal["structured"] = "structured"
    start: str | None = None
    max_parallel: int | None = Field(default=None, ge=1, le=64)
    nodes: list[NodeSpec] = Field(min_length=1, max_length=1000)
    edges: list[Edge] | None = Field(default=None, max_length=5000)

    @functools.cached_property
    def graph(self) -> Graph:
        """The nodes and their links (built once; asked many times per step)."""
        return build_graph(self.nodes, self.edges, self.start)

    @property
    def parallel_limit(self) -> int:
        """How many of a run's nodes may run at once."""
        return self.max_parallel or DEFAULT_MAX_PARALLEL

    def node(self, node_id: str) -> NodeSpec:
        """Return the node with ``node_id``."""
        return self.graph.nodes[node_id]

    @property
    def start_id(self) -> str:
        """The id of the first node to run."""
        entry = self.graph.entry()
        assert entry is not None  # validation refuses a graph without one
        return entry

    def next_id(self, node: NodeSpec, port: str = "result") -> str | None:
        """The node that ``node``'s ``port`` leads to, or None: the run ends there."""
        links = self.graph.outgoing(node.id, port)
        return links[0].target if links else None

    def predecessors(self, node_id: str) -> list[str]:
        """The nodes with a link into ``node_id``, in config order."""
        return [link.source for link in self.graph.incoming(node_id)]


class EmployeeConfig(AgentConfig):
    """An AI teammate (seed 002 ``employee``): an agent with a persona that other workflows hand
    assignments to (``run_employee``), people chat with, and schedules remind. It runs as an
    agent run; ``prompt`` is its persona and standing instructions, and what it is asked comes
    as the run's input (``assignment``, ``attachments``, ``message``).

    Attributes:
        title: its role, for people and other agents (``Customer success associate``).
    """

    kind: Literal["employee"] = "employee"  # type: ignore[assignment]
    title: str | None = Field(default=None, min_length=1, max_length=200)


WorkflowConfig = Annotated[AgentConfig | StructuredConfig | EmployeeConfig, Field(discriminator="kind")]
CONFIG_ADAPTER: TypeAdapter[AgentConfig | StructuredConfig | EmployeeConfig] = TypeAdapter(WorkflowConfig)
