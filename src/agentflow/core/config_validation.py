"""Reading and checking workflow configs: YAML or JSON text to a validated config with every
problem named by its path, and the normalised document (and content hash) a version stores.

The shapes are in ``agentflow.core.definitions``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import yaml
from pydantic import (
    ValidationError,
)

from agentflow.core import safe_yaml
from agentflow.core.definitions import CONFIG_ADAPTER, AgentConfig, StructuredConfig
from agentflow.core.errors import ConfigError
from agentflow.core.graph.action_nodes import at_args_path, tool_as_http_request
from agentflow.core.graph.checks import TEMPLATE_FIELDS_EXCLUDED, check_graph, check_inputs
from agentflow.core.graph.mcp_nodes import McpToolNode
from agentflow.core.node_specs import NODE_SPECS, NodeSpec
from agentflow.core.templating import template_problems


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
        config = CONFIG_ADAPTER.validate_python(data)
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
    if config.trigger is not None and config.trigger.conversation is not None:
        conversation = config.trigger.conversation.model_dump(exclude_none=True)
        errors.extend(template_problems(conversation, "trigger.conversation"))
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
