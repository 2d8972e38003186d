"""Data nodes: shape what flows between nodes without a tool (seed 001's data nodes,
seed 002's ``mapping``).

- ``mapping``: an object built from templates, or a JMESPath expression's result;
- ``filter``: the items of a list for which a condition holds;
- ``sort``: a list ordered by a field of its items;
- ``split``: a list cut into chunks or grouped by a field, or a string cut at a separator.

A ``mapping`` with ``output`` declares the keys it sends, and ``split`` the shape of its
mode, so ``{{ input.x }}`` after them is checked at publish.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import jmespath
from jmespath.exceptions import JMESPathError
from pydantic import AfterValidator, Field, PrivateAttr, field_validator, model_validator

from agentflow.core import conditions
from agentflow.core.json_paths import parse_path
from agentflow.core.node_specs import ANY, NodeSpec, register_node_spec

MAX_EXPRESSION = 2_000
MAX_CHUNK = 10_000


def _checked_path(value: str | None) -> str | None:
    if value is not None:
        parse_path(value)  # raises ValueError with the reason
    return value


ItemPath = Annotated[str | None, AfterValidator(_checked_path)]
"""A path in each item of a list (``customer.name``), checked when the config is."""
LIST_SCHEMA: dict[str, Any] = {"type": "array"}


class MappingNode(NodeSpec):
    """Build the output from templates (``output``) or a JMESPath ``expression`` over
    ``{input, payload, steps, state}``."""

    title: ClassVar[str] = "Mapping"
    pure: ClassVar[bool] = True
    type: Literal["mapping"] = "mapping"
    output: dict[str, Any] | None = Field(
        default=None, description="The output object; its values may be templates."
    )
    expression: str | None = Field(
        default=None,
        max_length=MAX_EXPRESSION,
        description="Or a JMESPath expression over {input, payload, steps, state}.",
    )
    _compiled: Any = PrivateAttr(default=None)

    @field_validator("expression")
    @classmethod
    def _expression(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                jmespath.compile(value)
            except JMESPathError as exc:
                raise ValueError(f"not a JMESPath expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_of(self) -> MappingNode:
        if (self.output is None) == (self.expression is None):
            raise ValueError("a mapping node needs exactly one of 'output' or 'expression'")
        return self

    def search(self, document: dict[str, Any]) -> Any:
        """The expression's result over ``document``."""
        if self._compiled is None:
            self._compiled = jmespath.compile(self.expression or "@")
        return self._compiled.search(document)

    def declared_schema(self, port: str) -> dict[str, Any]:
        """With ``output``: an object with exactly its keys (nested objects likewise)."""
        return _shape(self.output) if self.output is not None else ANY


def _shape(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return {
            "type": "object",
            "properties": {key: _shape(item) for key, item in value.items()},
            "additionalProperties": False,
        }
    return ANY  # a template, or a literal a template may stand for


class FilterNode(NodeSpec):
    """Keep the items of a list for which ``where`` holds (the condition language, with each
    item as ``item``: ``{path: item.status, op: equals, value: open}``)."""

    title: ClassVar[str] = "Filter"
    result_schema: ClassVar[dict[str, Any]] = LIST_SCHEMA
    pure: ClassVar[bool] = True
    type: Literal["filter"] = "filter"
    items: str = Field(default="{{ input }}", max_length=10_000, description="A template giving the list.")
    where: Annotated[Any, conditions.checked("where")] = Field(
        description="A condition over item, input, payload, steps and state."
    )
    _condition: conditions.Condition | None = PrivateAttr(default=None)

    @property
    def condition(self) -> conditions.Condition:
        """The parsed ``where`` (parsed once)."""
        if self._condition is None:
            self._condition = conditions.parse_conditions(self.where, "where")
        return self._condition


class SortNode(NodeSpec):
    """Order a list by a field of its items (``by``), or by the items themselves; items
    without the field go last."""

    title: ClassVar[str] = "Sort"
    result_schema: ClassVar[dict[str, Any]] = LIST_SCHEMA
    pure: ClassVar[bool] = True
    type: Literal["sort"] = "sort"
    items: str = Field(default="{{ input }}", max_length=10_000, description="A template giving the list.")
    by: ItemPath = Field(default=None, max_length=500, description="A path in each item, e.g. customer.name.")
    order: Literal["asc", "desc"] = "asc"


def _counted(name: str, items: dict[str, Any]) -> dict[str, Any]:
    """An object of a list under ``name`` and its length under ``count``."""
    return {
        "type": "object",
        "properties": {name: {"type": "array", "items": items}, "count": {"type": "integer", "minimum": 0}},
        "required": [name, "count"],
        "additionalProperties": False,
    }


CHUNKS_SCHEMA = _counted("chunks", {"type": "array"})
GROUPS_SCHEMA = _counted(
    "groups",
    {
        "type": "object",
        "properties": {"key": ANY, "items": {"type": "array"}},
        "required": ["key", "items"],
        "additionalProperties": False,
    },
)
PARTS_SCHEMA = _counted("parts", {"type": "string"})


class SplitNode(NodeSpec):
    """Cut a list into chunks of ``size`` items, or group its items by the field ``by``
    (groups in order of first appearance; items without the field under key null); or cut a
    string at ``separator``. Exactly one of the three."""

    title: ClassVar[str] = "Split"
    # Any of the three modes' shapes; a node's own ``declared_schema`` is its mode's.
    result_schema: ClassVar[dict[str, Any]] = {"anyOf": [CHUNKS_SCHEMA, GROUPS_SCHEMA, PARTS_SCHEMA]}
    pure: ClassVar[bool] = True
    type: Literal["split"] = "split"
    items: str = Field(
        default="{{ input }}",
        max_length=10_000,
        description="A template giving the list (the string, with separator).",
    )
    size: int | None = Field(
        default=None, ge=1, le=MAX_CHUNK, strict=True, description="Items per chunk: {chunks, count}."
    )
    by: ItemPath = Field(
        default=None,
        max_length=500,
        description="Or a path in each item, e.g. customer.tier, to group by: {groups, count}.",
    )
    separator: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="Or cut a string where this text occurs: {parts, count}.",
    )

    @model_validator(mode="after")
    def _one_of(self) -> SplitNode:
        if sum(mode is not None for mode in (self.size, self.by, self.separator)) != 1:
            raise ValueError("a split node needs exactly one of 'size', 'by' or 'separator'")
        return self

    def declared_schema(self, port: str) -> dict[str, Any]:
        """The shape of this node's mode: ``{chunks, count}``, ``{groups, count}`` or
        ``{parts, count}``."""
        if self.size is not None:
            return CHUNKS_SCHEMA
        return GROUPS_SCHEMA if self.by is not None else PARTS_SCHEMA


for _spec in (MappingNode, FilterNode, SortNode, SplitNode):
    register_node_spec(_spec)
