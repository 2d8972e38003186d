"""The operators of trigger conditions: value checks at parse time, tests at evaluation time.

Everything here is pure and total at evaluation time: a field of an unexpected type never
raises, it just does not match (the outcome carries the reason, for explanations).
Configured values, on the other hand, are checked strictly when a workflow is saved, so a
mistake is reported then and not discovered on the first event.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from agentflow.core.durations import parse_duration
from agentflow.core.frozen import frozen
from agentflow.core.regex_guard import parse_tree, safe_input_length

MAX_PATTERN_LENGTH = 200
MAX_LIST_VALUE = 1_000
"""Worst-case backtracking steps a ``matches`` test may cost (about 0.1 s of CPU)."""


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()
"""What a path resolves to when the document has nothing there."""

Outcome = tuple[bool, str]
_MATCH: Outcome = (True, "matched")
_NO_MATCH: Outcome = (False, "did not match")
_Test = Callable[[Any, Any, bool, datetime], Outcome]


def kind_of(value: Any) -> str:
    """The JSON name of a value's type, for messages ("string", "number", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float | Decimal):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, dict):
        return "object"
    return "date" if isinstance(value, date) else type(value).__name__


def as_number(value: Any) -> int | float | Decimal | None:
    """The value if it is a number (not a boolean, not NaN), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return None
    if isinstance(value, Decimal):
        return None if value.is_nan() else value
    return None if isinstance(value, float) and math.isnan(value) else value


def equal(actual: Any, expected: Any, fold: bool = False) -> bool:
    """JSON equality: 1 == 1.0 == Decimal(1), True != 1, strings folded when ``fold``."""
    if isinstance(actual, bool) or isinstance(expected, bool):
        return isinstance(actual, bool) and isinstance(expected, bool) and actual is expected
    left, right = as_number(actual), as_number(expected)
    if left is not None or right is not None:
        return left is not None and right is not None and left == right
    if isinstance(actual, str) and isinstance(expected, str):
        return actual.casefold() == expected.casefold() if fold else actual == expected
    if actual is None or expected is None:
        return actual is None and expected is None
    if isinstance(actual, list | tuple) and isinstance(expected, list | tuple):
        return len(actual) == len(expected) and all(
            equal(a, e, fold) for a, e in zip(actual, expected, strict=True)
        )
    if isinstance(actual, dict) and isinstance(expected, dict):
        return len(actual) == len(expected) and all(
            key in actual and equal(actual[key], value, fold) for key, value in expected.items()
        )
    return False


_INSTANT = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,12}))?)?"
    r"\s?(Z|z|[+-]\d{2}(?::?\d{2})?)?)?"
)


def parse_instant(value: Any) -> date | datetime | None:
    """An ISO 8601 date or datetime from text (or a date object); None if it is not one.

    A ``date`` means a whole day; a ``datetime`` may be naive (no offset), which callers
    refuse. Fractions of a second beyond microseconds are truncated (Go sends nanoseconds).
    """
    if isinstance(value, date):
        return value
    if not isinstance(value, str) or len(value) > 64 or (match := _INSTANT.fullmatch(value)) is None:
        return None
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    try:
        if hour is None:
            return date(int(year), int(month), int(day))
        tz = None
        if offset is not None:
            tz = UTC if offset in "Zz" else _offset(offset)
        micros = int((fraction or "0")[:6].ljust(6, "0"))
        return datetime(int(year), int(month), int(day), int(hour), int(minute), int(second or 0), micros, tz)
    except (ValueError, OverflowError):
        return None


def _offset(text: str) -> timezone:
    digits = text[1:].replace(":", "")
    delta = timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
    return timezone(-delta if text[0] == "-" else delta)


def _aware(moment: date | datetime) -> datetime | None:
    """The moment in UTC (a whole day starts at midnight UTC); None if naive or out of range."""
    if not isinstance(moment, datetime):
        return datetime(moment.year, moment.month, moment.day, tzinfo=UTC)
    try:
        return moment.astimezone(UTC) if moment.utcoffset() is not None else None
    except (OverflowError, ValueError):
        return None


def _compare(actual: Any, bound: Any) -> int | str:
    """-1, 0 or 1 comparing a field to a prepared bound, or why they are not comparable."""
    if isinstance(bound, date):
        moment = parse_instant(actual)
        if moment is None:
            return f"the field is a {kind_of(actual)}, not a date or datetime"
        left, right = _aware(moment), _aware(bound)
        if left is None or right is None:
            return "the field is a datetime without a time zone (or out of range)"
        return (left > right) - (left < right)
    number = as_number(actual)
    if number is None:
        return f"the field is a {kind_of(actual)}, not a number"
    return int(number > bound) - int(number < bound)


def _ordered(accept: Callable[[int], bool]) -> _Test:
    def test(actual: Any, bound: Any, fold: bool, now: datetime) -> Outcome:
        order = _compare(actual, bound)
        if isinstance(order, str):
            return False, order
        return _MATCH if accept(order) else _NO_MATCH

    return test


def _between(actual: Any, bounds: Any, fold: bool, now: datetime) -> Outcome:
    low, high = _compare(actual, bounds[0]), _compare(actual, bounds[1])
    if isinstance(low, str) or isinstance(high, str):
        return False, str(low if isinstance(low, str) else high)
    return _MATCH if low >= 0 and high <= 0 else _NO_MATCH


def _age(older: bool) -> _Test:
    def test(actual: Any, span: Any, fold: bool, now: datetime) -> Outcome:
        moment = parse_instant(actual)
        if moment is None:
            return False, f"the field is a {kind_of(actual)}, not a timestamp"
        at = _aware(moment)
        if at is None:
            return False, "the field is a datetime without a time zone (or out of range)"
        age = now - at
        return _MATCH if (age > span if older else age < span) else _NO_MATCH

    return test


def _text_test(check: Callable[[str, str], bool]) -> _Test:
    def test(actual: Any, expected: Any, fold: bool, now: datetime) -> Outcome:
        if not isinstance(actual, str):
            return False, f"the field is a {kind_of(actual)}, not a string"
        if fold:
            actual, expected = actual.casefold(), expected.casefold()
        return _MATCH if check(actual, expected) else _NO_MATCH

    return test


def _contains(actual: Any, needle: Any, fold: bool, now: datetime) -> Outcome:
    if isinstance(actual, list | tuple):
        found = any(equal(item, needle, fold) for item in actual)
    elif isinstance(actual, str) and isinstance(needle, str):
        found = needle.casefold() in actual.casefold() if fold else needle in actual
    elif isinstance(actual, dict) and isinstance(needle, str):
        folded = needle.casefold()
        found = needle in actual or (
            fold and any(isinstance(k, str) and k.casefold() == folded for k in actual)
        )
    else:
        return False, f"a {kind_of(actual)} field cannot contain a {kind_of(needle)}"
    return _MATCH if found else _NO_MATCH


def _matches(actual: Any, regex: Any, fold: bool, now: datetime) -> Outcome:
    if not isinstance(actual, str):
        return False, f"the field is a {kind_of(actual)}, not a string"
    pattern, limit = regex
    if len(actual) > limit:
        return False, f"the text has {len(actual)} characters; this pattern checks at most {limit} safely"
    return _MATCH if pattern.search(actual) is not None else _NO_MATCH


def _is_empty(actual: Any, _: Any, fold: bool, now: datetime) -> Outcome:
    empty = actual is None or (isinstance(actual, str | list | tuple | dict) and len(actual) == 0)
    return _MATCH if empty else _NO_MATCH


# ---- configured values, checked when the condition is parsed ------------------------------


def _need_list(value: Any, _: bool) -> tuple[Any, ...]:
    if not isinstance(value, list):
        raise ValueError(f"needs a list of values, e.g. ['gold', 'platinum']; got a {kind_of(value)}")
    if len(value) > MAX_LIST_VALUE:
        raise ValueError(f"lists at most {MAX_LIST_VALUE} values; got {len(value)}")
    return tuple(value)


def _need_scalar(value: Any, _: bool) -> Any:
    if isinstance(value, list | dict):
        raise ValueError("needs one text, number, boolean or null to look for, not a list or mapping")
    return value


def _need_text(value: Any, _: bool) -> str:
    if not isinstance(value, str):
        raise ValueError(f"needs text; got a {kind_of(value)}")
    return value


def _need_bound(value: Any, _: bool = False) -> int | float | Decimal | date:
    number = as_number(value)
    if number is not None:
        if not math.isfinite(number):
            raise ValueError("needs a finite number")
        return number
    moment = parse_instant(value)
    if moment is None:
        hint = " (write 5, not '5')" if isinstance(value, str) and _is_number_text(value) else ""
        raise ValueError(
            f"needs a number or an ISO date/datetime such as '2024-05-01' or '2024-05-01T09:00:00Z'{hint}"
        )
    if isinstance(moment, datetime):
        if moment.utcoffset() is None:
            raise ValueError(f"{value!r} has no time zone; add one, e.g. '{value}Z' or '{value}+02:00'")
        aware = _aware(moment)
        if aware is None:
            raise ValueError(f"{value!r} is out of range")
        return aware
    return moment


def _is_number_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _need_range(value: Any, _: bool) -> tuple[Any, Any]:
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError("needs a list [low, high] of two numbers or two dates")
    low, high = _need_bound(value[0]), _need_bound(value[1])
    if isinstance(low, date) != isinstance(high, date):
        raise ValueError("needs two numbers or two dates, not one of each")
    if _compare(value[1], low) == -1:
        raise ValueError(f"needs low <= high; got {value!r}")
    return low, high


def _need_duration(value: Any, _: bool) -> timedelta:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ValueError("needs a duration such as '2h', '30m', '7d' or 'PT5M'")
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise ValueError(f"needs a duration such as '2h', '30m', '7d' or 'PT5M': {exc}") from None


def _need_pattern(value: Any, fold: bool) -> tuple[re.Pattern[str], int]:
    text = _need_text(value, fold)
    if len(text) > MAX_PATTERN_LENGTH:
        raise ValueError(f"needs a pattern of at most {MAX_PATTERN_LENGTH} characters; got {len(text)}")
    flags = re.IGNORECASE if fold else 0
    try:
        compiled = re.compile(text, flags)
        limit = safe_input_length(parse_tree(text, flags))
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        raise ValueError(f"has an invalid pattern {text!r}: {exc}") from None
    if limit < 100:
        raise ValueError(
            f"pattern {text!r} could take too long even on 100 characters; anchor it with ^ "
            "and use fewer *, + and {m,n} repeats"
        )
    return compiled, limit


# ---- the operator table ------------------------------------------------------------------


@frozen
class Operator:
    """How one operator checks its configured value and tests a field.

    Attributes:
        name: the canonical name stored in configs.
        test: ``(field, prepared value, case-insensitive, now) -> (matched, reason)`` for a
            field that is present.
        prepare: checks and converts the configured value (raises ``ValueError``); None for
            operators that take no value.
        when_absent: the result when the path resolves to nothing.
        folds: whether ``case_insensitive`` applies.
    """

    name: str
    test: _Test
    prepare: Callable[[Any, bool], Any] | None
    when_absent: bool = False
    folds: bool = False


def _any_value(value: Any, _: bool) -> Any:
    return value


_BASE = [
    Operator("equals", lambda a, v, f, _: _MATCH if equal(a, v, f) else _NO_MATCH, _any_value, folds=True),
    Operator(
        "one_of",
        lambda a, v, f, _: _MATCH if any(equal(a, o, f) for o in v) else _NO_MATCH,
        _need_list,
        folds=True,
    ),
    Operator("contains", _contains, _need_scalar, folds=True),
    Operator("starts_with", _text_test(str.startswith), _need_text, folds=True),
    Operator("ends_with", _text_test(str.endswith), _need_text, folds=True),
    Operator("matches", _matches, _need_pattern, folds=True),
    Operator("exists", lambda a, v, f, _: _MATCH if a is not None else (False, "the field is null"), None),
    Operator("is_empty", _is_empty, None, when_absent=True),
    Operator("gt", _ordered(lambda order: order > 0), _need_bound),
    Operator("gte", _ordered(lambda order: order >= 0), _need_bound),
    Operator("lt", _ordered(lambda order: order < 0), _need_bound),
    Operator("lte", _ordered(lambda order: order <= 0), _need_bound),
    Operator("between", _between, _need_range),
    Operator("older_than", _age(older=True), _need_duration),
    Operator("newer_than", _age(older=False), _need_duration),
]
OPERATORS: dict[str, Operator] = {op.name: op for op in _BASE}
NEGATIONS = {
    "not_equals": "equals",
    "not_one_of": "one_of",
    "not_contains": "contains",
    "not_exists": "exists",
    "is_not_empty": "is_empty",
}
"""Operators that are exactly the negation of another (so absent fields match them)."""
ALIASES = {
    "eq": "equals", "==": "equals", "ne": "not_equals", "not": "not_equals", "!=": "not_equals",
    "in": "one_of", "not_in": "not_one_of", ">": "gt", ">=": "gte", "<": "lt", "<=": "lte",
}  # fmt: skip
KNOWN = sorted([*OPERATORS, *NEGATIONS])


def canonical(name: str) -> str | None:
    """The canonical operator for a name or alias ("Not In" -> "not_one_of"), or None."""
    key = "_".join(name.strip().lower().replace("-", " ").split())
    key = ALIASES.get(key, key)
    return key if key in OPERATORS or key in NEGATIONS else None


def operator(name: str) -> tuple[Operator, bool]:
    """The base operator of a canonical name and whether the result is negated."""
    base = NEGATIONS.get(name)
    return (OPERATORS[base], True) if base else (OPERATORS[name], False)


def run(name: str, actual: Any, operand: Any, fold: bool, now: datetime) -> Outcome:
    """Test a resolved field (``ABSENT`` if missing) against a prepared value."""
    spec, negated = operator(name)
    if actual is ABSENT:
        matched, reason = spec.when_absent, "the field is absent"
    else:
        matched, reason = spec.test(actual, operand, fold, now)
    if negated:
        return not matched, f"negation of {spec.name} ({reason})"
    return matched, reason
