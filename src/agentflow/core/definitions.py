"""Workflow configs: their models, loading from YAML/JSON, validation and content hash."""

from __future__ import annotations

import functools
import hashlib
import re
from datetime import timedelta
from typing import Annotated, Any, Literal

import orjson
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

# Importing the node kinds' modules registers them (the registry is core.node_specs).
from agentflow.core import safe_yaml
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
from agentflow.core.errors import ConfigError
from agentflow.core.graph.action_nodes import at_args_path, tool_as_http_request
from agentflow.core.graph.checks import TEMPLATE_FIELDS_EXCLUDED, check_graph, check_inputs
from agentflow.core.graph.mcp_nodes import McpToolNode
from agentflow.core.graph.model import Edge, Graph, build_graph
from agentflow.core.graph.schema_paths import checked_object_schema
from agentflow.core.mcp import SEPARATOR, McpServer, check_servers
from agentflow.core.node_specs import NODE_SPECS, NodeSpec
from agentflow.core.payload_format import FieldSpec, normalise
from agentflow.core.retry import RetryPolicy
from agentflow.core.schedules import CronSchedule
from agentflow.core.sources import SOURCE_PATTERN
from agentflow.core.state_definition import MAX_VARIABLES, StateVariable, check_definition
from agentflow.core.templating import template_problems
from agentflow.core.triggers import Gate, Trigger

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\- ]{0,99}$"


DEFAULT_MAX_PARALLEL = 4
"""Nodes of one run running at once when a workflow does not say (``max_parallel``)."""


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
        return self.actions.get(name) or Action()


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
_ADAPTER: TypeAdapter[AgentConfig | StructuredConfig | EmployeeConfig] = TypeAdapter(WorkflowConfig)


def parse_config_text(text: str, source: str = "config") -> AgentConfig | StructuredConfig:
    """Parse YAML or JSON text and validate it (see ``validate_config``).

    The YAML may not nest deeper than 64 levels nor expand past 100,000 values through its
    aliases (see ``agentflow.core.safe_yaml``): either is a ``config_syntax`` error.
    """
    try:
        data = safe_yaml.load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        limit = isinstance(exc, safe_yaml.YamlLimitError)
        verdict = "refused" if limit else "not valid YAML or JSON"
        raise ConfigError(
            "config_syntax",
            f"{source} is {verdict}{where}: {getattr(exc, 'problem', exc)}",
            solution="Write the values out instead of nesting aliases, and nest less."
            if limit
            else "Fix the syntax at the position shown.",
        ) from None
    return validate_config(data, source)


def validate_config(
    data: Any, source: str = "config", *, stored: bool = False
) -> AgentConfig | StructuredConfig:
    """Validate a config object, reporting every problem with its path.

    Args:
        data: the config.
        source: its name in messages (a file name).
        stored: the normalised document of a published version: it passed the publish rules
            (the graph's shape, templates) of its time, so only its shape is parsed again;
            a rule added later must not strand the runs of an older version.

    Raises:
        ConfigError: code ``config_invalid``; ``details['errors']`` holds one
            ``{"path", "message"}`` per problem, e.g. ``nodes[1].duration``.
    """
    if not isinstance(data, dict):
        raise _invalid(source, [{"path": "", "message": "the config must be a mapping"}])
    errors: list[dict[str, str]] = []
    raw_nodes = data.get("nodes")
    nodes: list[NodeSpec] = []
    if data.get("kind") == "structured" and isinstance(raw_nodes, list):
        for index, raw in enumerate(raw_nodes):
            node = _validate_node(raw, f"nodes[{index}]", errors)
            if node is not None:
                nodes.append(node)
        data = {**data, "nodes": nodes if len(nodes) == len(raw_nodes) else raw_nodes}
    try:
        config = _ADAPTER.validate_python(data)
    except ValidationError as exc:
        errors.extend(
            _pydantic_errors(exc, "")
            if not errors
            else [e for e in _pydantic_errors(exc, "") if not e["path"].startswith("nodes[")]
        )
        raise _invalid(source, errors) from None
    if errors:
        raise _invalid(source, errors)
    if stored:
        return config
    if isinstance(config, StructuredConfig):
        errors.extend(check_graph(config.graph, [node.id for node in config.nodes]))
        if not errors:
            errors.extend(check_inputs(config.graph))
        _check_saves(config, errors)
        _check_mcp_nodes(config, errors)
    _check_templates(config, errors)
    if errors:
        raise _invalid(source, errors)
    return config


def _check_templates(config: AgentConfig | StructuredConfig, errors: list[dict[str, str]]) -> None:
    """Templates that cannot compile (bad syntax, ``{% include %}``, too long) are refused at
    publish, where the path says which, rather than at run time."""
    if config.trigger is not None and config.trigger.enrollment.key is not None:
        errors.extend(template_problems(config.trigger.enrollment.key, "trigger.enrollment.key"))
    if isinstance(config, StructuredConfig):
        for index, node in enumerate(config.nodes):
            fields = node.model_dump(mode="json", exclude=TEMPLATE_FIELDS_EXCLUDED | node.literal_fields)
            errors.extend(template_problems(fields, f"nodes[{index}]"))
    else:
        for index, tool in enumerate(config.http_tools):
            errors.extend(
                template_problems({"url": tool.url, "headers": dict(tool.headers)}, f"http_tools[{index}]")
            )


def _validate_node(raw: Any, path: str, errors: list[dict[str, str]]) -> NodeSpec | None:
    if not isinstance(raw, dict):
        errors.append({"path": path, "message": "a node must be a mapping"})
        return None
    alias = tool_as_http_request(raw)
    if alias is not None:
        found: list[dict[str, str]] = []
        node = _validate_node(alias, path, found)
        errors.extend(at_args_path(error, path, own=set(raw) - {"tool", "args"}) for error in found)
        return node
    kind = raw.get("type")
    spec = NODE_SPECS.get(kind) if isinstance(kind, str) else None
    if spec is None:
        known = ", ".join(sorted(NODE_SPECS))
        errors.append({"path": f"{path}.type", "message": f"unknown node type {kind!r}; known: {known}"})
        return None
    try:
        return spec.model_validate(raw)
    except ValidationError as exc:
        errors.extend(_pydantic_errors(exc, path))
        return None


def _check_saves(config: StructuredConfig, errors: list[dict[str, str]]) -> None:
    declared = config.state_definition or {}
    for index, node in enumerate(config.nodes):
        for name in node.save_to_state or {}:
            if name not in declared:
                where = "in state_definition" if declared else "(the workflow has no state_definition)"
                path = f"nodes[{index}].save_to_state.{name}"
                errors.append({"path": path, "message": f"{name!r} is not declared {where}"})


def _check_mcp_nodes(config: StructuredConfig, errors: list[dict[str, str]]) -> None:
    declared = [s.name for s in config.mcp_servers or ()]
    for index, node in enumerate(config.nodes):
        if not isinstance(node, McpToolNode):
            continue
        server = config.mcp_server(node.server)
        if server is None:
            where = f"declared: {', '.join(declared)}" if declared else "the workflow has no mcp_servers"
            message = f"{node.server!r} is not one of mcp_servers ({where})"
            errors.append({"path": f"nodes[{index}].server", "message": message})
        elif not server.offers(node.tool):
            message = f"{node.tool!r} is not in the tools of MCP server {server.name!r}"
            errors.append({"path": f"nodes[{index}].tool", "message": message})


def _pydantic_errors(exc: ValidationError, prefix: str) -> list[dict[str, str]]:
    out = []
    for err in exc.errors(include_url=False):
        loc = [str(p) for p in err["loc"] if p not in ("agent", "structured", "employee")]
        path = prefix
        for part in loc:
            path += f"[{part}]" if part.isdigit() else (f".{part}" if path else part)
        out.append({"path": path, "message": err["msg"].removeprefix("Value error, ")})
    return out


def _invalid(source: str, errors: list[dict[str, str]]) -> ConfigError:
    first = errors[0] if errors else {"path": "", "message": "invalid"}
    where = f" at {first['path']}" if first["path"] else ""
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return ConfigError(
        "config_invalid",
        f"{source} is invalid{where}: {first['message']}{more}",
        details={"errors": errors},
        solution="Correct each listed path; see docs/reference/workflow-config.md.",
    )


def config_document(config: AgentConfig | StructuredConfig) -> dict[str, Any]:
    """The normalised JSON document stored as a version's config."""
    doc: dict[str, Any] = config.model_dump(mode="json", exclude_none=True)
    if isinstance(config, StructuredConfig):
        doc["nodes"] = [n.model_dump(mode="json", exclude_none=True) for n in config.nodes]
    return doc


def content_hash(document: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a normalised config document."""
    return hashlib.sha256(orjson.dumps(document, option=orjson.OPT_SORT_KEYS)).hexdigest()
