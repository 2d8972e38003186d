"""How long a text a regular expression may search: Python's engine backtracks, so bound
the worst case before a pattern from a config ever runs on event data.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

MAX_MATCH_INPUT = 10_000
REGEX_BUDGET = 10**8

_SRE_PARSER: Any = importlib.import_module("re._parser")
_UNBOUNDED: int = importlib.import_module("re._constants").MAXREPEAT
_ATOMS = {"LITERAL", "NOT_LITERAL", "ANY", "IN", "CATEGORY", "RANGE", "NEGATE"}


def safe_input_length(parsed: Any) -> int:
    """The longest text this pattern can search within ``REGEX_BUDGET`` backtracking steps.

    Models each element as (choices, width): a repeat of variable length offers up to n+1
    choices, a sequence multiplies choices, an alternation adds them, and an unanchored
    search tries n start positions. Nested variable repeats (``(a+)+``), alternation inside
    repeats and backreferences are refused outright (their cost is exponential).
    """
    items = list(parsed)
    starts = (
        items and str(items[0][0]) == "AT" and str(items[0][1]) in ("AT_BEGINNING", "AT_BEGINNING_STRING")
    )
    anchored = bool(starts) and not parsed.state.flags & re.MULTILINE

    def cost(n: int) -> float:
        choices, width = _sequence(items, n, final=True)
        return choices * (1 + width) * (1 if anchored else n + 1)

    low, high = 0, MAX_MATCH_INPUT
    if cost(high) <= REGEX_BUDGET:
        return high
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if cost(middle) <= REGEX_BUDGET else (low, middle - 1)
    return low


def _sequence(items: Any, n: int, final: bool = False) -> tuple[float, float]:
    choices, width = 1.0, 0.0
    for position, (op, arg) in enumerate(items):
        c, w = _element(str(op), arg, n, final and position == len(items) - 1)
        choices, width = choices * c, width + w
    return choices, width


def _element(op: str, arg: Any, n: int, final: bool = False) -> tuple[float, float]:
    """(choices, width) of one parsed element; ``final``: nothing after it can fail."""
    if op in _ATOMS:
        return 1.0, 1.0
    if op == "AT":
        return 1.0, 0.0
    if op == "SUBPATTERN":
        return _sequence(arg[-1], n)
    if op in ("ATOMIC_GROUP", "ASSERT", "ASSERT_NOT"):
        c, w = _sequence(arg if op == "ATOMIC_GROUP" else arg[1], n)
        return 1.0, c * (1 + w)  # committed after one success, but finding it may try every choice
    if op == "BRANCH":
        options = [_sequence(branch, n) for branch in arg[1]]
        return sum(c for c, _ in options), max(w for _, w in options)
    if op in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        low, high, body = arg
        c, w = _sequence(body, n)
        if c > 1 and high > 1:
            raise ValueError(
                "a repeated group contains another variable repeat or an alternation, like (a+)+"
            )
        if high <= 1:
            return (c + 1.0 if low == 0 and not final else c), w
        if final:  # the first way that fits ends the match, so the count is never revisited
            return 1.0, w * min(low, n)
        span = min(high, n) - min(low, n) + 1 if high != _UNBOUNDED else n - min(low, n) + 1
        return (1.0 if op == "POSSESSIVE_REPEAT" else float(max(span, 1))), w * min(low, n)
    if op in ("GROUPREF", "GROUPREF_EXISTS"):
        raise ValueError("backreferences are not supported")
    raise ValueError(f"unsupported construct {op}")


def parse_tree(text: str, flags: int) -> Any:
    """The parsed form of a pattern that ``safe_input_length`` reads."""
    return _SRE_PARSER.parse(text, flags)
