"""How big a value is when written out: what a template's output, a JSON step record or
``str()`` of it would take, counting shared references once per appearance.

``[s] * 1000`` holds one string a thousand times: cheap in memory, a thousand copies of
``s`` once written out. Weighing walks a value and stops as soon as it passes a limit, so
weighing costs at most the limit, whatever the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jinja2 import Undefined
from jinja2.runtime import Context
from jinja2.utils import Namespace

from agentflow.core.templating.meter import MAX_SIZE, TemplateLimitError, current

_OPAQUE = 32
"""The weight of an object weighing does not look into (a number, a date, a macro)."""


def weigh(value: Any, limit: int = MAX_SIZE) -> int:
    """The written-out size of ``value``, or a number above ``limit`` once it passes it."""
    total = 0
    stack = [value]
    seen = 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen % 2048 == 0:
            current().look_at_clocks()  # a long walk is work too: it may have to give way
        if isinstance(item, str | bytes | bytearray):
            total += len(item) + 2
        elif isinstance(item, bool) or item is None:
            total += 5
        elif isinstance(item, int):
            total += item.bit_length() // 3 + 1
        elif isinstance(item, list | tuple | set | frozenset):
            total += 2 + len(item)
            stack.extend(item)
        elif isinstance(item, Mapping) and not isinstance(item, Context):
            total += 2 + 2 * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, Namespace):
            stack.append(object.__getattribute__(item, "_Namespace__attrs"))
        elif isinstance(item, Undefined):
            continue
        else:
            total += _OPAQUE
        if total > limit:
            return total
    return total


def ensure_small(value: Any, what: str, limit: int = MAX_SIZE) -> int:
    """``weigh(value)``, refusing a value over ``limit``.

    Raises:
        TemplateLimitError: naming ``what`` was too big.
    """
    size = weigh(value, limit)
    if size > limit:
        raise TemplateLimitError(f"{what} would be more than {limit:,} characters long")
    return size


def refuse_over(size: int, what: str, limit: int = MAX_SIZE) -> None:
    """Refuse an estimated ``size`` over ``limit`` before building it.

    Raises:
        TemplateLimitError: naming ``what`` would be too big.
    """
    if size > limit:
        raise TemplateLimitError(f"{what} would be more than {limit:,} characters long")
