"""The ``merge`` node: wait for the branches that lead to it and combine their outputs.

A branch not taken (a condition chose another port upstream) is skipped, not waited for, so
a merge after a condition runs with the branches that ran.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from agentflow.core.node_specs import NodeSpec, register_node_spec


class MergeNode(NodeSpec):
    """Wait for every live incoming branch (or the first, or ``n`` of them) and combine their
    outputs: as an ``object`` by predecessor id, a ``list`` in arrival order, or a ``deep``
    merge of their objects (later arrivals win)."""

    title: ClassVar[str] = "Merge"
    joins: ClassVar[bool] = True
    pure: ClassVar[bool] = True
    type: Literal["merge"] = "merge"
    wait: Literal["all", "first"] | Annotated[int, Field(ge=1, le=1000)] = Field(
        default="all", description="'all' live branches, the 'first', or a number of them."
    )
    combine: Literal["object", "list", "deep"] = Field(
        default="object", description="By predecessor id, in arrival order, or merged deeply."
    )

    def join_ready(self, fired: int, resolved: bool) -> bool:
        """``all``: when every incoming link has fired or been skipped; ``first``: at the
        first; ``n``: at the n-th (or when all are in, if fewer are live)."""
        if self.wait == "all":
            return resolved
        if self.wait == "first":
            return fired >= 1
        return fired >= self.wait or resolved

    def declared_schema(self, port: str) -> dict[str, Any]:
        """A list, or an object (its keys depend on which branches ran)."""
        return {"type": "array"} if self.combine == "list" else {"type": "object"}


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` merged in: nested objects merge, anything else is replaced."""
    merged = dict(base)
    for key, value in extra.items():
        found = merged.get(key)
        merged[key] = (
            deep_merge(found, value) if isinstance(found, dict) and isinstance(value, dict) else value
        )
    return merged


register_node_spec(MergeNode)
