"""Action nodes an agent uses as tools (seed 001's attached TOOL nodes).

A ``tool``, ``http_request``, ``mcp_tool`` or ``send_message`` node listed in an agent node's
``attach`` is no step of the graph: the agent's model is offered it as a tool named by the
node's id, described by its ``description``, and calls it with arguments its templates read
as ``{{ args.x }}``. The arguments' JSON Schema is the node's ``parameters`` when it declares
them, else one string per ``args.x`` its templates read. Each call is a step of the agent's
run, run by the node kind's own runner.
"""

from __future__ import annotations

from typing import Any

from agentflow.core.graph.checks import TEMPLATE_FIELDS_EXCLUDED
from agentflow.core.node_specs import NodeSpec
from agentflow.core.templating.references import template_reads

ARGS = "args"
"""The template name under which an attached node reads the model's arguments."""
BUILTIN_TOOLS = frozenset({"generate_plan", "create_task", "send_notification", "wait", "complete"})


def offered_parameters(node: NodeSpec) -> dict[str, Any]:
    """The JSON Schema of the arguments the model gives ``node``."""
    declared = getattr(node, "parameters", None)
    if isinstance(declared, dict):
        return declared
    excluded = TEMPLATE_FIELDS_EXCLUDED | node.literal_fields | {"description", "parameters"}
    fields = node.model_dump(mode="json", exclude=excluded)
    names = sorted(
        {read[0] for _, read in template_reads(fields, ARGS, "") if read and isinstance(read[0], str)}
    )
    return {
        "type": "object",
        "properties": {name: {"type": "string"} for name in names},
        "required": names,
        "additionalProperties": False,
    }


def offered_description(node: NodeSpec) -> str:
    """What the model is told the tool does."""
    found = getattr(node, "description", None)
    if isinstance(found, str):
        return found
    return node.name or f"{node.title or node.type} ({node.id})"
