"""Which listeners' conditions can hold for an event, found without testing each of them.

The dispatcher tests the conditions of every workflow that listens to an event's topic (100
workflows: 100 tests an event). Most trigger conditions begin with an equality on a field
(``data.account_id equals "acme"``, ``data.plan one_of [pro, team]``), and an event whose
field holds another value fails them at once. ``ConditionIndex`` files each condition under
the values its leading equality accepts, so an event finds the few conditions that can
hold by looking its field's value up; only those are tested (Inngest aggregates its trigger
expressions the same way). The others fail, exactly as testing them would find: an ``all``
stops at its first member when it fails, before any other member could raise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentflow.core import condition_ops as ops
from agentflow.core.conditions import AllOf, Condition, Rule
from agentflow.core.json_paths import resolve

Key = tuple[str, Any]
"""A scalar as ``condition_ops.equal`` compares it: its JSON kind and its value."""

_INDEXED = frozenset({"equals", "one_of"})


def equality_key(value: Any) -> Key | None:
    """The key of a scalar: two scalars are ``equal`` (unfolded) exactly when their keys are
    (``1``, ``1.0`` and ``Decimal(1)`` share one; ``True`` and ``1`` do not). None for what no
    scalar equals: lists, objects, NaN, dates, an absent field."""
    if isinstance(value, bool):
        return ("boolean", value)
    if value is None:
        return ("null", None)
    number = ops.as_number(value)
    if number is not None:
        return ("number", number)
    if isinstance(value, str):
        return ("string", value)
    return None


def first_equality(condition: Condition) -> tuple[str, list[Key]] | None:
    """The path and accepted keys of the condition's leading equality: the condition itself,
    or the first member of an ``all``, when it is an ``equals`` or ``one_of`` of scalars, not
    negated, not case-folded. None otherwise."""
    members = condition.all if isinstance(condition, AllOf) else (condition,)
    if not members or not isinstance(first := members[0], Rule):
        return None
    keys = _accepted(first)
    return None if keys is None else (first.path, keys)


def _accepted(rule: Rule) -> list[Key] | None:
    if rule.case_insensitive:
        return None
    spec, negated = ops.operator(rule.op)
    if negated or spec.name not in _INDEXED:
        return None
    operand = rule.prepared_operand()
    values = operand if spec.name == "one_of" else (operand,)
    keys = [equality_key(value) for value in values]
    if not keys or any(key is None for key in keys):
        return None
    return [key for key in keys if key is not None]


class ConditionIndex:
    """Conditions (by position; None: no conditions) filed by their leading equality."""

    def __init__(self, conditions: Sequence[Condition | None]) -> None:
        self._always: list[int] = []
        self._by_path: dict[str, dict[Key, list[int]]] = {}
        for position, condition in enumerate(conditions):
            found = None if condition is None else first_equality(condition)
            if found is None:
                self._always.append(position)
                continue
            path, keys = found
            table = self._by_path.setdefault(path, {})
            for key in dict.fromkeys(keys):
                table.setdefault(key, []).append(position)

    def candidates(self, document: Any) -> set[int]:
        """The positions of the conditions that may hold for ``document``; every other one
        does not."""
        found = set(self._always)
        for path, table in self._by_path.items():
            key = equality_key(resolve(document, path))
            if key is not None:
                found.update(table.get(key, ()))
        return found
