"""YAML that cannot explode: bounded nesting and bounded alias expansion.

``yaml.safe_load`` builds shared objects for aliases, so a "billion laughs" document
(nine anchors, each a list of nine aliases of the previous one) loads in microseconds into
a few kilobytes, and then fills memory the moment anything walks it: validation,
``model_dump``, JSON encoding, storing it. Deep nesting exhausts the recursive composer.
``load`` measures the composed node graph before constructing anything, counting each
alias as the whole subtree it stands for, and refuses documents past ``MAX_NODES``
values, ``MAX_DEPTH`` levels, or with an alias inside its own anchor (a cycle).
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

MAX_DEPTH = 64
"""The deepest nesting of mappings and sequences, aliases expanded (as for JSON bodies)."""

MAX_NODES = 100_000
"""The most values (scalars, sequences and mappings) a document may hold, aliases expanded."""


class YamlLimitError(yaml.MarkedYAMLError):
    """A document over one of the limits; a ``yaml.YAMLError``, so callers report it like a syntax error."""


class _BoundedLoader(yaml.SafeLoader):
    """``SafeLoader`` whose composer stops at ``MAX_DEPTH`` before Python's recursion limit does."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.aliases = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            return super().compose_node(parent, index)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise YamlLimitError(
                    problem=f"the YAML nests deeper than {MAX_DEPTH} levels", problem_mark=mark
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def load(text: str) -> Any:
    """Parse one YAML (or JSON) document with the safe loader, within the limits.

    Returns:
        The document's value (None for an empty document).

    Raises:
        yaml.YAMLError: a syntax error, or ``YamlLimitError`` for a document over a limit.
    """
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _Measure(aliased=loader.aliases > 0).size(node, 1)
        return loader.construct_document(node)
    finally:
        loader.dispose()


class _Measure:
    """The expanded size and height of a node graph, each shared node measured once."""

    def __init__(self, *, aliased: bool) -> None:
        self.aliased = aliased
        self.known: dict[int, tuple[int, int]] = {}
        self.open: set[int] = set()

    def size(self, node: Node, depth: int) -> tuple[int, int]:
        """``(values, height)`` of ``node`` at ``depth``; raises past a limit.

        The recursion stops at ``MAX_DEPTH``, so it cannot exhaust the stack.
        """
        if depth > MAX_DEPTH:
            raise YamlLimitError(
                problem=f"the YAML nests deeper than {MAX_DEPTH} levels", problem_mark=node.start_mark
            )
        key = id(node)
        if key in self.open:
            raise YamlLimitError(problem="an alias refers to its own anchor", problem_mark=node.start_mark)
        if key in self.known:
            values, height = self.known[key]
        else:
            self.open.add(key)
            values, height = 1, 1
            for child in _children(node):
                child_values, child_height = self.size(child, depth + 1)
                values += child_values
                height = max(height, child_height + 1)
                if values > MAX_NODES:
                    raise YamlLimitError(problem=self._too_many(), problem_mark=node.start_mark)
            self.open.discard(key)
            self.known[key] = (values, height)
        if depth + height - 1 > MAX_DEPTH:
            raise YamlLimitError(
                problem=f"the YAML nests deeper than {MAX_DEPTH} levels", problem_mark=node.start_mark
            )
        return values, height

    def _too_many(self) -> str:
        if self.aliased:
            return f"the YAML expands to more than {MAX_NODES:,} values through its aliases (*name)"
        return f"the YAML holds more than {MAX_NODES:,} values"


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []
