"""The data nodes' runners: ``mapping``, ``filter``, ``sort`` and ``split`` (specs in
``agentflow.core.graph.data_nodes``). Pure work on the run's data; nothing leaves the worker."""

from __future__ import annotations

from collections.abc import Hashable
from datetime import UTC, datetime
from typing import Any

from jmespath.exceptions import JMESPathError

from agentflow.core import conditions
from agentflow.core.condition_ops import ABSENT, kind_of
from agentflow.core.errors import StepFailure
from agentflow.core.graph.data_nodes import FilterNode, MappingNode, SortNode, SplitNode
from agentflow.core.json_paths import resolve
from agentflow.core.node_specs import NodeSpec
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.nodes.base import BaseRunner, NodeEnv


class MappingRunner(BaseRunner):
    """Render ``output``, or search ``expression``."""

    kind = "mapping"

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """The built object is the output."""
        assert isinstance(node, MappingNode)
        if node.output is not None:
            return None, NodeResult(output=await env.render(node.output, node.id, "output"))
        try:
            found = node.search(env.data())
        except JMESPathError as exc:  # a type error in a function call, found on this data
            raise StepFailure(
                "mapping_failed",
                f"node {node.id!r} expression failed on this input: {exc}",
                retryable=False,
                details={"node": node.id, "field": "expression"},
                solution="Check the expression against the data the node receives.",
            ) from None
        return {"expression": node.expression}, NodeResult(output=found)


class FilterRunner(BaseRunner):
    """Test ``where`` on each item."""

    kind = "filter"

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """The items that pass, in their order."""
        assert isinstance(node, FilterNode)
        items = await env.render_list(node.items, node.id, "items", code="input_not_a_list")
        document = env.data()
        now = datetime.now(UTC)  # only for older_than / newer_than rules
        kept = [
            item for item in items if conditions.evaluate(node.condition, {**document, "item": item}, now=now)
        ]
        return {"items": len(items), "kept": len(kept)}, NodeResult(output=kept)


class SortRunner(BaseRunner):
    """Order the items by ``by``."""

    kind = "sort"

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """The sorted list; items without the field last, in their order."""
        assert isinstance(node, SortNode)
        items = await env.render_list(node.items, node.id, "items", code="input_not_a_list")
        keyed = [
            (resolve(item, node.by) if node.by else item, index, item) for index, item in enumerate(items)
        ]
        present = [entry for entry in keyed if entry[0] is not ABSENT and entry[0] is not None]
        missing = [entry[2] for entry in keyed if entry[0] is ABSENT or entry[0] is None]
        kinds = {kind_of(entry[0]) for entry in present}
        if len(kinds) > 1 or not kinds <= {"boolean", "number", "string"}:
            raise StepFailure(
                "sort_incomparable",
                f"node {node.id!r} cannot order {' and '.join(sorted(kinds))} values"
                + (f" (field {node.by})" if node.by else ""),
                retryable=False,
                details={"node": node.id, "kinds": sorted(kinds)},
                solution="Sort by a field that holds one type in every item.",
            )
        ordered = sorted(present, key=lambda entry: entry[0], reverse=node.order == "desc")
        return {"by": node.by, "order": node.order}, NodeResult(
            output=[entry[2] for entry in ordered] + missing
        )


class SplitRunner(BaseRunner):
    """Cut the items into chunks, group them by a field, or cut a string at a separator."""

    kind = "split"

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """``{chunks, count}``, ``{groups, count}`` or ``{parts, count}``, by the node's mode."""
        assert isinstance(node, SplitNode)
        if node.separator is not None:
            text = await env.render(node.items, node.id, "items")
            if not isinstance(text, str):
                raise StepFailure(
                    "input_not_a_string",
                    f"node {node.id!r} field items must give a string to cut at separator, "
                    f"not {type(text).__name__}",
                    retryable=False,
                    details={"node": node.id, "field": "items", "got": type(text).__name__},
                    solution="Point 'items' at a string, e.g. '{{ input.line }}', or drop separator.",
                )
            # An empty text has no parts (str.split would give one empty part): a loop over
            # them then runs no item rather than one blank one.
            parts = text.split(node.separator) if text else []
            return {"length": len(text), "separator": node.separator}, NodeResult(
                output={"parts": parts, "count": len(parts)}
            )
        items = await env.render_list(node.items, node.id, "items", code="input_not_a_list")
        if node.size is not None:
            chunks = [items[start : start + node.size] for start in range(0, len(items), node.size)]
            return {"items": len(items), "size": node.size}, NodeResult(
                output={"chunks": chunks, "count": len(chunks)}
            )
        assert node.by is not None
        groups = _group_by(items, node.by)
        return {"items": len(items), "by": node.by}, NodeResult(
            output={"groups": groups, "count": len(groups)}
        )


def _group_by(items: list[Any], by: str) -> list[dict[str, Any]]:
    """``[{key, items}]`` by the value at ``by`` in each item, in order of first appearance;
    items without the field (or with null) under key ``None``."""
    groups: dict[Hashable, dict[str, Any]] = {}
    for item in items:
        value = resolve(item, by)
        key = None if value is ABSENT else value
        group = groups.setdefault(_identity(key), {"key": key, "items": []})
        group["items"].append(item)
    return list(groups.values())


def _identity(value: Any) -> Hashable:
    """A hashable stand-in for a JSON value, equal for equal values: objects and lists
    compared by content, ``true`` kept apart from ``1`` (Python counts them equal), ``1``
    and ``1.0`` together (JSON does)."""
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, dict):
        return ("object", tuple(sorted((str(k), _identity(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return ("array", tuple(_identity(v) for v in value))
    return ("other", repr(value))  # None, and anything a template made that JSON has no name for
