"""Resource references (issue 15, seed 004): which workspace resources a config uses.

Each published version records them as ``kind:name`` strings (``credential:stripe``,
``workflow:refund``, ``tool:crm.lookup``, ``person:lee``, ``role:finance``,
``employee:ada``) in a GIN-indexed column, so "which workflows use this?" is one index
lookup, and deleting or disabling a resource that is in use can be refused with the list.
A node kind declares which of its fields name resources (``NodeSpec.reference_fields``); a
value that is a template is known only when the step runs and is not recorded.
"""

from __future__ import annotations

from typing import Literal, get_args

from agentflow.core.definitions import AgentConfig, StructuredConfig

ResourceKind = Literal["credential", "employee", "person", "role", "tool", "workflow"]
"""The kinds of resource a version can reference."""
KINDS: tuple[str, ...] = get_args(ResourceKind)


def references_of(config: AgentConfig | StructuredConfig) -> list[str]:
    """The resources ``config`` uses, as sorted ``kind:name`` strings."""
    found = {f"credential:{s.credential}" for s in config.mcp_servers or () if s.credential}
    if isinstance(config, StructuredConfig):
        for node in config.nodes:
            found |= node.references()
    else:
        found |= {f"tool:{name}" for name in config.tools}
        found |= {f"credential:{t.credential}" for t in config.http_tools if t.credential}
    return sorted(found)
