"""Checks that run *before* a template operation that could build something huge.

Each check estimates the size of the result from its operands and refuses it above the
limits in :mod:`.meter`; the operation runs only when it is known to be small. Checking
afterwards would be too late: ``'ab' * 300000000`` takes its memory and its time in one go.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Mapping
from string import Formatter
from typing import Any

from agentflow.core.templating.meter import MAX_INT_BITS, MAX_SIZE, MAX_WIDTH, TemplateLimitError
from agentflow.core.templating.weight import ensure_small, refuse_over, weigh

BINOPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": operator.pow,
}

_SEQUENCES = (str, bytes, list, tuple)
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d*)(?:\.(\*|\d*))?[hlL]?[a-zA-Z%]")
_NUMBER = re.compile(r"\d+")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_binop(op: str, left: Any, right: Any) -> None:
    """Refuse ``left op right`` when its result would be over the limits.

    Raises:
        TemplateLimitError: the result would be too big.
    """
    if op == "**" and _is_int(left) and _is_int(right) and right > 0 and abs(left) > 1:
        if right > MAX_INT_BITS or right * left.bit_length() > MAX_INT_BITS:
            raise TemplateLimitError(f"'**' would make a number of more than {MAX_INT_BITS:,} bits")
    elif op == "*":
        _check_product(left, right)
    elif op == "+" and isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES):
        refuse_over(_text_weight(left) + _text_weight(right), "'+'")
    elif op == "%" and isinstance(left, str):
        check_percent_format(left, right)


def _text_weight(value: Any) -> int:
    return len(value) if isinstance(value, str | bytes) else weigh(value)


def _check_product(left: Any, right: Any) -> None:
    if _is_int(left) and _is_int(right):
        if left.bit_length() + right.bit_length() > MAX_INT_BITS:
            raise TemplateLimitError(f"'*' would make a number of more than {MAX_INT_BITS:,} bits")
        return
    sequence, times = (left, right) if isinstance(left, _SEQUENCES) else (right, left)
    if isinstance(sequence, _SEQUENCES) and isinstance(times, int) and times > 0:
        if times > MAX_SIZE:
            raise TemplateLimitError(f"'*' would repeat a value {times:,} times")
        unit = len(sequence) if isinstance(sequence, str | bytes) else weigh(sequence)
        refuse_over(unit * times, "'*'")


def check_percent_format(template: str, args: Any) -> None:
    """Refuse ``template % args`` when widths, precisions or arguments would make it huge.

    Raises:
        TemplateLimitError: a ``*`` width, a width over ``MAX_WIDTH``, or a result too big.
    """
    conversions = 0
    widest = 0
    for match in _PERCENT_SPEC.finditer(template):
        conversions += 1
        for part in match.groups():
            if part == "*":
                raise TemplateLimitError("'*' widths are not available in templates")
            if part:
                widest = max(widest, _width(part))
    _refuse_formatted(template, conversions, widest, args)


def check_str_format(template: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """Refuse ``template.format(*args, **kwargs)`` when it would make something huge.

    Raises:
        TemplateLimitError: a nested field in a format spec, a width over ``MAX_WIDTH``, or
            a result too big.
    """
    fields = 0
    widest = 0
    try:
        parsed = list(Formatter().parse(template))
    except ValueError:
        return  # str.format raises its own, clearer error
    for _literal, name, spec, _conversion in parsed:
        if name is None:
            continue
        fields += 1
        if spec and "{" in spec:
            raise TemplateLimitError("nested fields in format specs are not available in templates")
        for number in _NUMBER.findall(spec or ""):
            widest = max(widest, _width(number))
    _refuse_formatted(template, fields, widest, (*args, *kwargs.values()))


def _width(text: str) -> int:
    if len(text) > 5 or int(text) > MAX_WIDTH:
        raise TemplateLimitError(f"a format width or precision over {MAX_WIDTH:,}")
    return int(text)


def _refuse_formatted(template: str, conversions: int, widest: int, args: Any) -> None:
    if conversions == 0:
        return
    values: Iterable[Any]
    if isinstance(args, Mapping):
        values = args.values()
    elif isinstance(args, tuple):
        values = args
    else:
        values = (args,)
    largest = max((weigh(v) for v in values), default=0)
    refuse_over(len(template) + conversions * max(largest, widest), "the formatted string")


def check_str_method(text: str | bytes, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """Refuse a call of ``text.<name>(...)`` that would make a string over the limits.

    Raises:
        TemplateLimitError: the result would be too big.
    """
    if name in ("ljust", "rjust", "center", "zfill") and args and _is_int(args[0]):
        refuse_over(args[0], f"str.{name}()")
    elif name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        if _is_int(size):
            tabs = text.count("\t") if isinstance(text, str) else text.count(b"\t")
            refuse_over(len(text) + tabs * max(size, 0), "str.expandtabs()")
    elif name == "replace" and len(args) >= 2:
        check_replace(text, args[0], args[1], args[2] if len(args) > 2 else -1)


def check_replace(text: str | bytes, old: Any, new: Any, count: Any) -> None:
    """Refuse ``text.replace(old, new, count)`` when the result would be too big.

    Raises:
        TemplateLimitError: the result would be too big.
    """
    # Two branches, one per type, so that the type checker sees matching operands.
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):  # noqa: SIM114
        occurrences = text.count(old)
    elif isinstance(text, bytes) and isinstance(old, bytes) and isinstance(new, bytes):
        occurrences = text.count(old)
    else:
        return  # replace() raises its own error
    if _is_int(count) and count >= 0:
        occurrences = min(occurrences, count)
    refuse_over(len(text) + occurrences * max(len(new) - len(old), 0), "replace()")


def check_join(items: list[Any], separator: Any) -> None:
    """Refuse joining ``items`` with ``separator`` when the result would be too big.

    Raises:
        TemplateLimitError: the result would be too big.
    """
    size = len(items) * len(str(separator)) if isinstance(separator, str) else 0
    for item in items:
        size += weigh(item)
        refuse_over(size, "join")


def check_stringify(value: Any, what: str) -> int:
    """The weight of ``value``, which is about to be written out as text.

    Raises:
        TemplateLimitError: it would be too long.
    """
    return ensure_small(value, what)
